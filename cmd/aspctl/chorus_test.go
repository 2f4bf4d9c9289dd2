package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChorusCommands: set (from a file, never an argument), get, deliveries,
// delete, against an aspd on its embedded store, whose Chorus key is
// generated beside the database.
func TestChorusCommands(t *testing.T) {
	t.Parallel()
	s := startAspd(t)
	s.newAgent("@acme.hook")
	conn := "https://agent.example.com/inbox/sk_secret_part"
	file := filepath.Join(t.TempDir(), "conn")
	if err := os.WriteFile(file, []byte(conn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var reg struct {
		Agent         string `json:"agent"`
		SigningSecret string `json:"signing_secret"`
		Rotated       bool   `json:"rotated"`
	}
	r := s.asAdmin("chorus", "set", "@acme.hook", "--file", file).ok(t, &reg)
	if reg.Agent != "@acme.hook" || !strings.HasPrefix(reg.SigningSecret, "whsec_") || reg.Rotated || strings.Contains(r.stdout, "sk_secret_part") {
		t.Fatalf("chorus set: %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "shown only once") {
		t.Fatalf("chorus set stderr: %q", r.stderr)
	}
	var again struct {
		SigningSecret string `json:"signing_secret"`
		Rotated       bool   `json:"rotated"`
	}
	s.asAdmin("chorus", "set", "@acme.hook", "--file", file).ok(t, &again)
	if !again.Rotated || again.SigningSecret == reg.SigningSecret {
		t.Fatalf("rotation: %+v after %+v", again, reg)
	}
	var info struct {
		Agent   string `json:"agent"`
		Failing bool   `json:"failing"`
	}
	r = s.asAdmin("chorus", "get", "@acme.hook").ok(t, &info)
	if info.Agent != "@acme.hook" || info.Failing || strings.Contains(r.stdout, "sk_secret_part") {
		t.Fatalf("chorus get: %s", r.stdout)
	}
	var list struct {
		Deliveries []any `json:"deliveries"`
	}
	s.asAdmin("chorus", "deliveries", "@acme.hook", "--limit", "10").ok(t, &list)
	if list.Deliveries == nil {
		t.Fatalf("chorus deliveries printed no list")
	}
	s.asAdmin("chorus", "deliveries", "@acme.hook", "--limit", "0").fails(t, 1, "limit must be from 1 to 500")
	s.asAdmin("chorus", "delete", "@acme.hook").ok(t, nil)
	s.asAdmin("chorus", "get", "@acme.hook").fails(t, 1, "not_found")
	s.asAdmin("chorus", "redeliver", "@acme.hook", "msg_nope").fails(t, 1, "not_found")

	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.asAdmin("chorus", "set", "@acme.hook", "--file", empty).fails(t, 2, "no connection string")
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("ftp://x/sk_bad_part"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = s.asAdmin("chorus", "set", "@acme.hook", "--file", bad)
	r.fails(t, 1, "invalid_request")
	if strings.Contains(r.stderr, "sk_bad_part") {
		t.Fatalf("an error quotes the connection string: %s", r.stderr)
	}
	if key, err := os.Stat(filepath.Join(s.dir, "chorus.key")); err != nil || key.Mode().Perm() != 0o600 {
		t.Fatalf("generated chorus.key: %v %v", key, err)
	}
	if strings.Contains(s.logs(), "sk_secret_part") {
		t.Fatalf("the aspd log holds the connection string")
	}
}
