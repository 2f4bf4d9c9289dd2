package app

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aspd/aspd/internal/search"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// Transcript search for the operator (docs/search.md): the operator sees
// every session, so there is no eligibility filter. The query language is
// parsed once (internal/search) and the store turns it into SQL.

// Search page sizes.
const (
	DefaultSearchLimit = 20
	MaxSearchLimit     = 100
)

// SearchQuery is a search as given (query parameters, tool arguments);
// an empty field is "not given".
type SearchQuery struct {
	Q           string // the query (required)
	Session     string // a session id
	Sender      string // a handle
	Participant string // a handle
	Type        string // an indexed event type
	Since       string // RFC 3339 or epoch milliseconds: created_at >= Since
	Until       string // RFC 3339 or epoch milliseconds: created_at < Until
	Cursor      string // a previous page's next_cursor
	Limit       string // 1..MaxSearchLimit, default DefaultSearchLimit
}

// searchCursor is the decoded form of next_cursor: the last hit of a page.
type searchCursor struct {
	CreatedAt int64  `json:"t"`
	SessionID string `json:"s"`
	Sequence  int64  `json:"q"`
}

// Search finds the events matching q, newest first, each with its snippet.
func (a *App) Search(ctx context.Context, q SearchQuery) (protocol.SearchResults, error) {
	f, parsed, err := q.filter()
	if err != nil {
		return protocol.SearchResults{}, err
	}
	// One more than the page tells whether another page follows.
	f.Limit++
	hits, err := a.st.Search(ctx, f)
	if err != nil {
		return protocol.SearchResults{}, err
	}
	out := protocol.SearchResults{Hits: make([]protocol.SearchHit, 0, len(hits))}
	if len(hits) == f.Limit {
		hits = hits[:f.Limit-1]
		last := hits[len(hits)-1].Event
		out.NextCursor = encodeSearchCursor(searchCursor{CreatedAt: last.CreatedAt, SessionID: last.SessionID, Sequence: last.Sequence})
	}
	for _, h := range hits {
		e := h.Event
		snippet := search.Snippet(h.Text, parsed)
		parts := make([]protocol.SnippetPart, len(snippet))
		for i, p := range snippet {
			parts[i] = protocol.SnippetPart{Text: p.Text, Match: p.Match}
		}
		out.Hits = append(out.Hits, protocol.SearchHit{
			SessionID: e.SessionID, Sequence: e.Sequence, Type: e.Type,
			// The subject of every indexed event (session.message) is its sender.
			Sender:    e.Subject,
			CreatedAt: time.UnixMilli(e.CreatedAt).UTC().Format("2006-01-02T15:04:05.000Z07:00"),
			Event:     json.RawMessage(e.Body), Snippet: parts,
		})
	}
	return out, nil
}

// filter validates q and returns the store filter and the parsed query.
func (q SearchQuery) filter() (store.SearchFilter, *search.Query, error) {
	var f store.SearchFilter
	if q.Q == "" {
		return f, nil, protocol.Invalid("q is required: the words or phrases to find")
	}
	parsed, err := search.Parse(q.Q)
	if err != nil {
		var se *search.Error
		if errors.As(err, &se) {
			return f, nil, protocol.Invalid("%s", se.Message)
		}
		return f, nil, err
	}
	f.Query = parsed
	if id := q.Session; id != "" {
		if !protocol.ValidSessionID(id) {
			return f, nil, protocol.Invalid("session must be a session id")
		}
		f.Session = id
	}
	if h := q.Sender; h != "" {
		if !protocol.ValidHandle(h) {
			return f, nil, protocol.Invalid("sender must be a handle")
		}
		f.Sender = h
	}
	if h := q.Participant; h != "" {
		if !protocol.ValidHandle(h) {
			return f, nil, protocol.Invalid("participant must be a handle")
		}
		f.Participant = h
	}
	if t := q.Type; t != "" {
		if !search.Indexed(t) {
			return f, nil, protocol.Invalid("type must be an indexed event type: %s", strings.Join(search.IndexedTypes, ", "))
		}
		f.Type = t
	}
	if f.Since, err = parseTime("since", q.Since); err != nil {
		return f, nil, err
	}
	if f.Until, err = parseTime("until", q.Until); err != nil {
		return f, nil, err
	}
	if f.Since > 0 && f.Until > 0 && f.Since >= f.Until {
		return f, nil, protocol.Invalid("since must be before until")
	}
	f.Limit = DefaultSearchLimit
	if q.Limit != "" {
		n, err := strconv.Atoi(q.Limit)
		if err != nil || n < 1 || n > MaxSearchLimit {
			return f, nil, protocol.Invalid("limit must be an integer from 1 to %d", MaxSearchLimit)
		}
		f.Limit = n
	}
	if q.Cursor != "" {
		c, ok := decodeSearchCursor(q.Cursor)
		if !ok {
			return f, nil, protocol.Invalid("cursor is not a next_cursor of this search")
		}
		f.After = &store.SearchCursor{CreatedAt: c.CreatedAt, SessionID: c.SessionID, Sequence: c.Sequence}
	}
	return f, parsed, nil
}

// The cursor is opaque to clients: base64url (unpadded) of a small JSON
// object. Its fields are checked on the way back in, so a forged cursor
// is a 400, never a strange query.
func encodeSearchCursor(c searchCursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// maxSearchCursor bounds the encoded cursor's length before decoding.
const maxSearchCursor = 256

func decodeSearchCursor(s string) (searchCursor, bool) {
	var c searchCursor
	if len(s) > maxSearchCursor {
		return c, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, false
	}
	if perr := protocol.DecodeStrict(b, &c); perr != nil {
		return c, false
	}
	ok := c.CreatedAt >= 0 && c.Sequence >= 1 && protocol.ValidSessionID(c.SessionID)
	return c, ok
}

// searchParams are the query parameters of a search, for the transports'
// strict query checks.
var searchParams = []string{"q", "session", "sender", "participant", "type", "since", "until", "cursor", "limit"}

// SearchParams returns the names of a search's parameters.
func SearchParams() []string { return slices.Clone(searchParams) }
