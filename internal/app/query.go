package app

import (
	"strconv"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Listing and paging arguments arrive as text (query parameters, tool
// arguments); these are the rules that turn them into filters. Which
// names a transport accepts, and that each is given at most once and never
// empty, is the transport's business; an empty field here is "not given".

// SessionQuery is a session listing's or export's filters as given.
type SessionQuery struct {
	State       string // active or ended
	Status      string // invited, joined or left
	Before      string // a session id: list sessions older than it
	Cursor      string // a previous page's next_cursor: an alias of Before
	Limit       string // 1..1000, default 100
	Since       string // epoch milliseconds or RFC 3339
	Until       string // epoch milliseconds or RFC 3339
	Participant string // a handle
}

// SessionFilter selects the sessions of a listing or an export; a zero
// field does not filter. SessionQuery.Filter builds a checked one.
type SessionFilter struct {
	Participant string // only sessions this handle is or was part of
	Status      string // with Participant: only where its status is this
	State       string // active or ended
	Since       int64  // created_at >= Since (epoch ms), 0 = unbounded
	Until       int64  // created_at < Until (epoch ms), 0 = unbounded
	Before      string // only session ids < Before
	Limit       int    // at most this many; 0 = no limit (exports)
}

// store is f as the store takes it.
func (f SessionFilter) store() store.SessionFilter {
	return store.SessionFilter{Participant: f.Participant, Status: f.Status, State: f.State,
		Since: f.Since, Until: f.Until, Before: f.Before, Limit: f.Limit}
}

// Filter validates q and returns the filter it selects.
func (q SessionQuery) Filter() (SessionFilter, error) {
	f := SessionFilter{State: q.State, Status: q.Status, Before: q.Before}
	if f.Before == "" {
		f.Before = q.Cursor // next_cursor of the previous page
	}
	if f.State != "" && f.State != protocol.StateActive && f.State != protocol.StateEnded {
		return f, protocol.Invalid("state must be active or ended")
	}
	switch f.Status {
	case "", protocol.StatusInvited, protocol.StatusJoined, protocol.StatusLeft:
	default:
		return f, protocol.Invalid("status must be invited, joined or left")
	}
	if f.Before != "" && !protocol.ValidSessionID(f.Before) {
		if q.Cursor != "" {
			return f, protocol.Invalid("cursor must be a session id (a next_cursor)")
		}
		return f, protocol.Invalid("before must be a session id")
	}
	var err error
	if f.Limit, err = parseLimit(q.Limit); err != nil {
		return f, err
	}
	if f.Since, err = parseTime("since", q.Since); err != nil {
		return f, err
	}
	if f.Until, err = parseTime("until", q.Until); err != nil {
		return f, err
	}
	if p := q.Participant; p != "" {
		if !protocol.ValidHandle(p) {
			return f, protocol.Invalid("participant must be a handle")
		}
		f.Participant = p
	}
	return f, nil
}

// PageQuery is an event log page as given.
type PageQuery struct {
	AfterSequence string // a sequence number
	Cursor        string // a previous page's next_cursor: an alias of AfterSequence
	Limit         string // 1..1000, default 100
}

// Page validates q and returns the page it selects.
func (q PageQuery) Page() (Page, error) {
	var p Page
	var err error
	if p.Limit, err = parseLimit(q.Limit); err != nil {
		return Page{}, err
	}
	name, v := "after_sequence", q.AfterSequence
	if q.Cursor != "" {
		name, v = "cursor", q.Cursor
	}
	if v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 {
			return Page{}, protocol.Invalid("%s must be a non-negative integer", name)
		}
		p.After = n
	}
	return p, nil
}

// parseTime accepts epoch milliseconds or RFC 3339.
func parseTime(name, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, protocol.Invalid("%s must be epoch milliseconds or an RFC 3339 time", name)
	}
	return t.UnixMilli(), nil
}

// parseLimit parses a page size: 1..1000, default 100.
func parseLimit(v string) (int, error) {
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, protocol.Invalid("limit must be an integer from 1 to 1000")
	}
	return n, nil
}
