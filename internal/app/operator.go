package app

import (
	"context"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// The operator's reads: every session, complete event logs, exports.

// AdminSessions lists the sessions matching f, newest first.
func (a *App) AdminSessions(ctx context.Context, f SessionFilter) (protocol.SessionList[*protocol.Session], error) {
	sessions, err := a.st.ListSessions(ctx, f.store())
	if err != nil {
		return protocol.SessionList[*protocol.Session]{}, err
	}
	out := protocol.SessionList[*protocol.Session]{Sessions: sessions}
	if out.Sessions == nil {
		out.Sessions = []*protocol.Session{}
	}
	if len(sessions) == f.Limit {
		out.NextCursor = sessions[len(sessions)-1].ID
	}
	return out, nil
}

// AdminSession is session id as the operator sees it.
func (a *App) AdminSession(ctx context.Context, id string) (*protocol.Session, error) {
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	return a.st.AdminSession(ctx, id)
}

// AdminEvents is a page of session id's complete, unfiltered event log.
func (a *App) AdminEvents(ctx context.Context, id string, p Page) (protocol.EventsPage, error) {
	if _, err := a.AdminSession(ctx, id); err != nil {
		return protocol.EventsPage{}, err
	}
	evs, err := a.st.EventsAfter(ctx, id, p.After, p.Limit+1)
	if err != nil {
		return protocol.EventsPage{}, err
	}
	more := len(evs) > p.Limit
	if more {
		evs = evs[:p.Limit]
	}
	return eventsPage(evs, more), nil
}

// ExportRequest selects what an export holds: one session (Session), or
// every session matching Filter.
type ExportRequest struct {
	Filter  SessionFilter
	Session string
}

// Export writes the selected sessions' events, each session's in sequence
// order, to emit. begin is called once the request is found valid and
// before the first event; an error returned before begin is a refusal, one
// after it a failure midway. It returns how many events were emitted.
func (a *App) Export(ctx context.Context, req ExportRequest, begin func(), emit func(body []byte) error) (int, error) {
	f := req.Filter.store()
	f.Limit = 0
	if id := req.Session; id != "" {
		if !protocol.ValidSessionID(id) {
			return 0, protocol.Invalid("session must be a session id")
		}
		if _, err := a.st.AdminSession(ctx, id); err != nil {
			return 0, err
		}
		f = store.SessionFilter{Only: id}
	}
	begin()
	n := 0
	err := a.st.ExportEvents(ctx, f, func(e *store.StoredEvent) error {
		n++
		return emit(e.Body)
	})
	return n, err
}
