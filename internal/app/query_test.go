package app

import (
	"net/http"
	"testing"

	"github.com/aspd/aspd/protocol"
)

func TestSessionQuery(t *testing.T) {
	f, err := SessionQuery{}.Filter()
	if err != nil || f.Limit != 100 {
		t.Fatalf("defaults: %+v, %v", f, err)
	}
	f, err = SessionQuery{State: "ended", Status: "left", Cursor: "sess_00000000000000000000000000", Limit: "5",
		Since: "1000", Until: "2026-01-02T03:04:05Z", Participant: "@acme.a"}.Filter()
	if err != nil || f.Before != "sess_00000000000000000000000000" || f.Limit != 5 || f.Since != 1000 || f.Until != 1767323045000 || f.Participant != "@acme.a" {
		t.Fatalf("full query: %+v, %v", f, err)
	}
	for _, tc := range []struct {
		q    SessionQuery
		want string
	}{
		{SessionQuery{State: "open"}, "state must be active or ended"},
		{SessionQuery{Status: "gone"}, "status must be invited, joined or left"},
		{SessionQuery{Before: "x"}, "before must be a session id"},
		{SessionQuery{Cursor: "x"}, "cursor must be a session id (a next_cursor)"},
		{SessionQuery{Limit: "1001"}, "limit must be an integer from 1 to 1000"},
		{SessionQuery{Limit: "0"}, "limit must be an integer from 1 to 1000"},
		{SessionQuery{Since: "yesterday"}, "since must be epoch milliseconds or an RFC 3339 time"},
		{SessionQuery{Until: "-1"}, "until must be epoch milliseconds or an RFC 3339 time"},
		{SessionQuery{Participant: "acme"}, "participant must be a handle"},
	} {
		_, err := tc.q.Filter()
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		if pe := err.(*protocol.Error); pe.Message != tc.want {
			t.Errorf("%+v: %q, want %q", tc.q, pe.Message, tc.want)
		}
	}
}

func TestPageQuery(t *testing.T) {
	p, err := PageQuery{}.Page()
	if err != nil || p != (Page{Limit: 100}) {
		t.Fatalf("defaults: %+v, %v", p, err)
	}
	p, err = PageQuery{Cursor: "7", Limit: "3"}.Page()
	if err != nil || p != (Page{After: 7, Limit: 3}) {
		t.Fatalf("cursor: %+v, %v", p, err)
	}
	for q, want := range map[PageQuery]string{
		{AfterSequence: "-1"}: "after_sequence must be a non-negative integer",
		{Cursor: "x"}:         "cursor must be a non-negative integer",
		{Limit: "x"}:          "limit must be an integer from 1 to 1000",
	} {
		_, err := q.Page()
		if pe, ok := err.(*protocol.Error); !ok || pe.Message != want {
			t.Errorf("%+v: %v, want %q", q, err, want)
		}
	}
}
