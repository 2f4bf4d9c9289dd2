package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/protocol"
)

func TestCheckQuery(t *testing.T) {
	e := echo.New()
	tests := []struct {
		method, path, query string
		wantErr             string // substring of the message; "" = accepted
	}{
		{"GET", "/sessions", "", ""},
		{"GET", "/sessions", "state=active&status=left&since=1&until=2&before=x&limit=3", ""},
		{"GET", "/sessions", "cursor=x", ""},
		{"GET", "/sessions", "&&state=active&", ""},
		{"GET", "/sessions", "stat=active", `unknown query parameter "stat"`},
		{"GET", "/sessions", "participant=@a.b", `unknown query parameter "participant"`},
		{"GET", "/sessions", "limit=1&limit=1", "limit is given 2 times"},
		{"GET", "/sessions", "state=", "state has no value"},
		{"GET", "/sessions", "state", "state has no value"},
		{"GET", "/sessions", "state=%ff", "state is not valid UTF-8"},
		{"GET", "/sessions", "state=a%00", "state contains a NUL"},
		{"GET", "/sessions", "state=%zz", `"state" is not properly percent-encoded`},
		{"GET", "/sessions", "st%zzate=1", `name "st%zzate" is not properly percent-encoded`},
		{"GET", "/sessions", "state=active;limit=1", `separate parameters with "&"`},
		{"GET", "/sessions", "before=x&cursor=y", "before and cursor are one parameter"},
		{"GET", "/sessions/:id", "x=1", `unknown query parameter "x": this endpoint takes no query parameters`},
		{"POST", "/sessions", "x=1", `unknown query parameter "x"`},
		{"GET", "/sessions/:id/events", "after_sequence=1&cursor=1", "after_sequence and cursor are one parameter"},
		{"GET", "/admin/v1/sessions", "status=joined", "status requires participant"},
		{"GET", "/admin/v1/sessions", "status=joined&participant=@a.b", ""},
		{"GET", "/admin/v1/export", "session=s&state=active", "session cannot be combined"},
		{"GET", "/admin/v1/export", "session=s", ""},
		{"GET", "/admin/v1/export", "limit=1", `unknown query parameter "limit"`},
		{"GET", "/admin/v1/export", "participants=@a.b", `unknown query parameter "participants"`},
		{"GET", "/connect", "token=t", ""},
		{"GET", "/connect", "token=t&token=u", "token is given 2 times"},
		{"GET", "/stream", "instrument=a&session=b&filter=c", ""},
		{"GET", "/stream/roster", "x=1", `unknown query parameter "x"`},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, "/?"+tt.query, nil)
		req.URL.RawQuery = tt.query
		c := e.NewContext(req, httptest.NewRecorder())
		c.SetPath(tt.path)
		rt := findRoute(tt.method, tt.path)
		if rt == nil {
			t.Fatalf("%s %s is not in the route table", tt.method, tt.path)
		}
		_, err := checkQuery(c, rt.query)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s %s?%s: %v", tt.method, tt.path, tt.query, err)
		case tt.wantErr != "":
			pe, ok := err.(*protocol.Error)
			if !ok || pe.Status != http.StatusBadRequest || pe.Code != protocol.CodeInvalidRequest || !strings.Contains(pe.Message, tt.wantErr) {
				t.Errorf("%s %s?%s: got %v, want 400 invalid_request containing %q", tt.method, tt.path, tt.query, err, tt.wantErr)
			}
		}
	}
}
