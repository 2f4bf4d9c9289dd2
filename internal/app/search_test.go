package app

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aspd/aspd/protocol"
)

func TestSearchQuery(t *testing.T) {
	f, parsed, err := SearchQuery{Q: "widget"}.filter()
	if err != nil || f.Limit != DefaultSearchLimit || parsed == nil || f.After != nil {
		t.Fatalf("defaults: %+v, %v", f, err)
	}
	// A next_cursor goes back in as the position it names.
	c := searchCursor{CreatedAt: 1795511266560, SessionID: "sess_00000000000000000000000000", Sequence: 12}
	f, _, err = SearchQuery{Q: "widget", Cursor: encodeSearchCursor(c), Limit: "100", Since: "1000",
		Until: "2026-01-02T03:04:05Z", Session: c.SessionID, Sender: "@acme.a", Participant: "@acme.b", Type: "session.message"}.filter()
	if err != nil || f.After == nil || f.After.CreatedAt != c.CreatedAt || f.After.SessionID != c.SessionID || f.After.Sequence != c.Sequence ||
		f.Limit != 100 || f.Since != 1000 || f.Until != 1767323045000 || f.Session != c.SessionID || f.Sender != "@acme.a" ||
		f.Participant != "@acme.b" || f.Type != "session.message" {
		t.Fatalf("full query: %+v (after %+v), %v", f, f.After, err)
	}
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, q := range []SearchQuery{
		{},
		{Q: "-only"},
		{Q: strings.Repeat("x", 257)},
		{Q: "w", Limit: "0"}, {Q: "w", Limit: "101"}, {Q: "w", Limit: "ten"},
		{Q: "w", Session: "sess_x"}, {Q: "w", Sender: "acme"}, {Q: "w", Participant: "@@"},
		{Q: "w", Type: "session.joined"}, {Q: "w", Type: "nonsense"},
		{Q: "w", Since: "soon"}, {Q: "w", Until: "2026-02-30T00:00:00Z"},
		{Q: "w", Since: "2000", Until: "1000"}, {Q: "w", Since: "1000", Until: "1000"},
		{Q: "w", Cursor: "!!"},
		{Q: "w", Cursor: b64(`{"t":1,"s":"sess_00000000000000000000000000","q":0}`)},
		{Q: "w", Cursor: b64(`{"t":-1,"s":"sess_00000000000000000000000000","q":1}`)},
		{Q: "w", Cursor: b64(`{"t":1,"s":"x","q":1}`)},
		{Q: "w", Cursor: b64(`{"t":1,"s":"sess_00000000000000000000000000","q":1,"extra":true}`)},
		{Q: "w", Cursor: b64(`[1]`)},
		{Q: "w", Cursor: strings.Repeat("A", 400)},
	} {
		_, _, err := q.filter()
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Status != http.StatusBadRequest || pe.Code != protocol.CodeInvalidRequest {
			t.Errorf("%+v: %v, want 400 invalid_request", q, err)
		}
	}
}
