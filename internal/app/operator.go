package app

import (
	"context"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

// The operator's reads: every session, complete event logs, exports.

// AdminSessions lists the sessions matching f, newest first, each with its
// activity (message count, last activity) for the console's list.
func (a *App) AdminSessions(ctx context.Context, f SessionFilter) (protocol.SessionList[*protocol.AdminSession], error) {
	var none protocol.SessionList[*protocol.AdminSession]
	sessions, err := a.st.ListSessions(ctx, f.store())
	if err != nil {
		return none, err
	}
	ids := make([]string, len(sessions))
	for i, s := range sessions {
		ids[i] = s.ID
	}
	act, err := a.st.SessionsActivity(ctx, ids)
	if err != nil {
		return none, err
	}
	out := protocol.SessionList[*protocol.AdminSession]{Sessions: make([]*protocol.AdminSession, 0, len(sessions))}
	for _, s := range sessions {
		x := act[s.ID]
		out.Sessions = append(out.Sessions, &protocol.AdminSession{Session: *s,
			MessageCount: x.MessageCount, LastSequence: x.LastSequence, LastActivityAt: x.LastActivityAt})
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

// OperatorEnd ends active session id as the operator (the console's End
// session) and returns the session as it now is. An ended session is a
// conflict (session_ended).
func (a *App) OperatorEnd(ctx context.Context, id string) (*protocol.Session, error) {
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	commit, err := a.st.OperatorEnd(ctx, id)
	if err != nil {
		return nil, err
	}
	a.publish(commit)
	a.log.Info("session ended by the operator", "session", id)
	return a.st.AdminSession(ctx, id)
}

// RemoveParticipant takes handle (joined or invited) out of active session
// id as the operator; the session ends if no joined participant remains.
// A handle that is not a current participant is not found.
func (a *App) RemoveParticipant(ctx context.Context, id, handle string) (*protocol.Session, error) {
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	if err := checkHandle(handle); err != nil {
		return nil, err
	}
	commit, err := a.st.RemoveParticipant(ctx, id, handle)
	if err != nil {
		return nil, err
	}
	a.publish(commit)
	a.log.Info("participant removed by the operator", "session", id, "agent", handle)
	return a.st.AdminSession(ctx, id)
}

// Nodes lists the cluster's registered nodes (the console's overview).
func (a *App) Nodes(ctx context.Context) ([]store.NodeInfo, error) {
	return a.st.Nodes(ctx)
}

// AdminAgents lists agents (of one owner when owner is not empty) with how
// each is reached now: presence, last seen, its connections on this node,
// and its doors (WebSocket, Chorus with its health).
func (a *App) AdminAgents(ctx context.Context, owner string) ([]*protocol.AdminAgent, error) {
	agents, err := a.Agents(ctx, owner)
	if err != nil {
		return nil, err
	}
	handles := make([]string, len(agents))
	for i, ag := range agents {
		handles[i] = ag.Handle
	}
	presence, err := a.st.AgentsPresence(ctx, handles)
	if err != nil {
		return nil, err
	}
	chorus, healthy := map[string]bool{}, map[string]bool{}
	if a.ChorusEnabled() {
		for _, list := range []struct {
			set  map[string]bool
			read func(context.Context) ([]string, error)
		}{{chorus, a.st.ChorusHandles}, {healthy, a.st.ChorusHealthyHandles}} {
			hs, err := list.read(ctx)
			if err != nil {
				return nil, err
			}
			for _, h := range hs {
				list.set[h] = true
			}
		}
	}
	out := make([]*protocol.AdminAgent, 0, len(agents))
	for _, ag := range agents {
		p := presence[ag.Handle]
		x := &protocol.AdminAgent{Agent: *ag, Online: p.Online, Connections: a.hub.ConnectionsOf(ag.Handle), Doors: []string{}}
		if !p.Online {
			x.LastSeenAt = p.OfflineSince
		}
		if x.Connections > 0 || p.Online && !chorus[ag.Handle] {
			x.Doors = append(x.Doors, "websocket")
		}
		if chorus[ag.Handle] {
			x.Doors = append(x.Doors, "chorus")
			x.Chorus = "failing"
			if healthy[ag.Handle] {
				x.Chorus = "healthy"
			}
		}
		out = append(out, x)
	}
	return out, nil
}
