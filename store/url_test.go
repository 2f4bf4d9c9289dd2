package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aspd/aspd/internal/dbtest"
	"github.com/aspd/aspd/store"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in       string
		postgres bool
		target   string // URL or path
	}{
		{"postgres://aspd@db:5432/aspd?sslmode=disable", true, "postgres://aspd@db:5432/aspd?sslmode=disable"},
		{"postgresql://aspd:pw@db/aspd", true, "postgresql://aspd:pw@db/aspd"},
		{"POSTGRES://db/aspd", true, "postgres://db/aspd"},
		{"postgres://h1:5432,h2:5432/aspd", true, "postgres://h1:5432,h2:5432/aspd"}, // several hosts: not a Go URL, still PostgreSQL
		{"aspd-data/aspd.db", false, "aspd-data/aspd.db"},
		{"/var/lib/aspd/aspd.db", false, "/var/lib/aspd/aspd.db"},
		{"./odd:name.db", false, "./odd:name.db"},
		{"sqlite:aspd.db", false, "aspd.db"},
		{"sqlite:/var/lib/aspd/aspd.db", false, "/var/lib/aspd/aspd.db"},
		{"sqlite:///var/lib/aspd/aspd.db", false, "/var/lib/aspd/aspd.db"},
		{"sqlite:odd:name.db", false, "odd:name.db"},
		{":memory:", false, ":memory:"},
	} {
		loc, err := store.ParseURL(tc.in)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.in, err)
			continue
		}
		got := loc.Path
		if loc.Postgres {
			got = loc.URL
		}
		if loc.Postgres != tc.postgres || got != tc.target {
			t.Errorf("ParseURL(%q) = %+v, want postgres=%v %q", tc.in, loc, tc.postgres, tc.target)
		}
	}
	for _, tc := range []struct{ in, secret string }{
		{"mysql://root:hunter2@127.0.0.1/x", "hunter2"},
		{"mariadb://root:hunter2@127.0.0.1/x", "hunter2"},
		{"file:aspd.db", ""},
		{"http://example.com/db", ""},
		{"postgres:aspd", ""},
		{"sqlite://aspd.db", ""},
		{"sqlite:", ""},
		{"odd:name.db", ""},
		{"host=db user=aspd password=hunter2 dbname=aspd", "hunter2"},
		{"", ""},
		{"  ", ""},
	} {
		_, err := store.ParseURL(tc.in)
		if err == nil {
			t.Errorf("ParseURL(%q) accepted", tc.in)
			continue
		}
		if tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
			t.Errorf("ParseURL(%q): the error shows the password: %v", tc.in, err)
		}
		if !strings.Contains(err.Error(), "postgres://") || !strings.Contains(err.Error(), "sqlite:PATH") {
			t.Errorf("ParseURL(%q): the error does not name the accepted forms: %v", tc.in, err)
		}
	}
	_, err := store.ParseURL("mysql://root:hunter2@127.0.0.1/x")
	if err == nil || !strings.Contains(err.Error(), "mysql://root:xxxxx@127.0.0.1/x") {
		t.Errorf("mysql URL error: %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://aspd:hunter2@db:5432/aspd?sslmode=disable": "postgres://aspd:xxxxx@db:5432/aspd?sslmode=disable",
		"postgres://aspd@db/aspd":                              "postgres://aspd@db/aspd",
		"postgres://db/aspd?user=aspd&password=hunter2&x=1":    "postgres://db/aspd?user=aspd&password=xxxxx&x=1",
		"postgres://db/aspd?sslpassword=hunter2":               "postgres://db/aspd?sslpassword=xxxxx",
		"postgres://u:hun/ter@2@h1,h2/aspd":                    "postgres://u:xxxxx@h1,h2/aspd", // unescaped '/' and '@' in the password
		"postgres://u:hun?ter2@h/aspd":                         "postgres://u:xxxxx@h/aspd",
		"mysql://root:hunter2@127.0.0.1/x":                     "mysql://root:xxxxx@127.0.0.1/x",
		"host=db password=hunter2 user=aspd":                   "host=db password=xxxxx user=aspd",
		"host=db password='hun ter2' user=aspd":                "host=db password=xxxxx user=aspd",
		"aspd-data/aspd.db":                                    "aspd-data/aspd.db",
		"sqlite:/var/lib/aspd/aspd.db":                         "sqlite:/var/lib/aspd/aspd.db",
	} {
		got := store.RedactURL(in)
		if got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(got, "hunter2") || strings.Contains(got, "ter2") && strings.Contains(in, "hun") {
			t.Errorf("RedactURL(%q) = %q keeps the password", in, got)
		}
	}
}

// Open refuses a foreign URL before it creates anything: it once took
// mysql://root:pw@host/x for a SQLite path and created a file named after
// it, password included.
func TestOpenRefusesForeignURL(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, u := range []string{"mysql://root:hunter2@127.0.0.1/x", "file:aspd.db", "sqlite://aspd.db"} {
		if s, err := store.Open(context.Background(), u); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", u)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): the error shows the password: %v", u, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Open created %v", entries)
	}
}

// The other spellings of each backend open it: postgresql:// and sqlite:PATH.
func TestOpenURLForms(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, url string) {
		alt := strings.Replace(url, "postgres://", "postgresql://", 1)
		if !strings.HasPrefix(url, "postgres://") {
			alt = "sqlite:" + url
		}
		s, err := store.Open(context.Background(), alt)
		if err != nil {
			t.Fatalf("Open(%q): %v", store.RedactURL(alt), err)
		}
		defer s.Close()
		want := "sqlite"
		if strings.HasPrefix(alt, "postgresql://") {
			want = "postgres"
		} else if _, err := os.Stat(filepath.Clean(url)); err != nil {
			t.Errorf("sqlite:%s did not create %s: %v", url, url, err)
		}
		if s.Dialect() != want {
			t.Errorf("Open(%q): dialect %s, want %s", alt, s.Dialect(), want)
		}
	})
}
