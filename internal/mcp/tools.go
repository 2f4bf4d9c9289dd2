package mcp

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/protocol"
)

// Tool arguments and results. Field names are the wire's (docs/api.md);
// the jsonschema tags are the descriptions a model reads.

type CreateSessionArgs struct {
	Invite         []string `json:"invite,omitempty" jsonschema:"handles to invite, like @owner.agent; all are invited or none (a handle that does not exist or refuses contact makes the whole call fail with not_found)"`
	Topic          string   `json:"topic,omitempty" jsonschema:"a short subject for the session"`
	Message        any      `json:"message,omitempty" jsonschema:"an initial message: a string, or an array of content parts such as {\"type\":\"text\",\"text\":\"...\"} and {\"type\":\"data\",\"data\":{...}}"`
	EndAfterSend   bool     `json:"end_after_send,omitempty" jsonschema:"end the session right after the initial message (a one-shot notification); requires message"`
	IdempotencyKey *string  `json:"idempotency_key,omitempty" jsonschema:"a key of your choice; retrying with the same key and arguments returns the original session instead of creating another"`
}

type SessionArgs struct {
	SessionID string `json:"session_id" jsonschema:"the session id, sess_..."`
}

type InviteArgs struct {
	SessionID string   `json:"session_id" jsonschema:"the session id, sess_..."`
	Invite    []string `json:"invite" jsonschema:"handles to invite, like @owner.agent; all are invited or none"`
}

type ReopenArgs struct {
	SessionID string   `json:"session_id" jsonschema:"the ended session's id, sess_..."`
	Invite    []string `json:"invite,omitempty" jsonschema:"handles to invite (again) into the reopened session"`
	Message   any      `json:"message,omitempty" jsonschema:"an initial message: a string or an array of content parts"`
}

type SendMessageArgs struct {
	SessionID      string  `json:"session_id" jsonschema:"the session id, sess_..."`
	Content        any     `json:"content" jsonschema:"the message: a string, or an array of content parts such as {\"type\":\"text\",\"text\":\"...\"} and {\"type\":\"data\",\"data\":{...}}"`
	IdempotencyKey *string `json:"idempotency_key,omitempty" jsonschema:"a key of your choice; a retry with the same key and content returns the original message instead of sending it twice"`
	Metadata       any     `json:"metadata,omitempty" jsonschema:"an optional JSON object attached to the message"`
}

type ListSessionsArgs struct {
	State  string `json:"state,omitempty" jsonschema:"active or ended"`
	Status string `json:"status,omitempty" jsonschema:"your status in the session: invited, joined or left"`
	Cursor string `json:"cursor,omitempty" jsonschema:"next_cursor of the previous page"`
	Limit  *int   `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 100)"`
	Since  string `json:"since,omitempty" jsonschema:"only sessions created at or after this time (epoch milliseconds or RFC 3339)"`
	Until  string `json:"until,omitempty" jsonschema:"only sessions created before this time (epoch milliseconds or RFC 3339)"`
}

type ReadEventsArgs struct {
	SessionID     string `json:"session_id" jsonschema:"the session id, sess_..."`
	AfterSequence *int64 `json:"after_sequence,omitempty" jsonschema:"return events after this sequence number (default 0: from the start); pass next_cursor to page"`
	Limit         *int   `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 100)"`
}

type EventsResult struct {
	Events     []any  `json:"events" jsonschema:"events in order, as ASP event objects"`
	NextCursor string `json:"next_cursor,omitempty" jsonschema:"present when more events follow: pass it as after_sequence"`
	// BindingMoment is the first envelope the events carry (decisions.go).
	BindingMoment any `json:"binding_moment,omitempty" jsonschema:"present when a message among the events carries a binding-moment envelope: the first such envelope (docs/decisions.md)"`
}

type WaitArgs struct {
	TimeoutSeconds *int `json:"timeout_seconds,omitempty" jsonschema:"how long to wait for a first event, 0 to 60 seconds (default 30)"`
	MaxEvents      *int `json:"max_events,omitempty" jsonschema:"most events to return, 1 to 500 (default 100)"`
}

type WaitResult struct {
	Events []any `json:"events" jsonschema:"your new events across all your sessions, ordered by session and sequence, as ASP event objects; empty when the timeout passed"`
	More   bool  `json:"more" jsonschema:"true when more events are already waiting: call again right away"`
	// BindingMoment is the first envelope the events carry (decisions.go).
	BindingMoment any `json:"binding_moment,omitempty" jsonschema:"present when a message among the events carries a binding-moment envelope: the first such envelope (docs/decisions.md)"`
}

type PostFrameArgs struct {
	Scope string `json:"scope" jsonschema:"the recipient scope: @owner.agent (all its streams), @owner.agent/<instrument-prefix>*, @owner.agent/<instrument>@<session>, or org:<owner>/members/*"`
	Frame any    `json:"frame" jsonschema:"the agent-channel frame object (envelope_version, sender_handle, recipient_handle, ...)"`
}

type Roster struct {
	Streams []protocol.StreamInfo `json:"streams" jsonschema:"your own open frame streams"`
}

type Empty struct{}

const notFoundNote = ` "not_found" covers both a handle or session that does not exist and one that refuses contact with you or that you may not see: the two are indistinguishable by design, so do not retry it.`

func annotations(readOnly, destructive, idempotent bool) *mcp.ToolAnnotations {
	a := &mcp.ToolAnnotations{ReadOnlyHint: readOnly, IdempotentHint: idempotent || readOnly, OpenWorldHint: ptr(true)}
	if !readOnly {
		a.DestructiveHint = ptr(destructive)
	}
	return a
}

// NewServer builds the MCP server with aspd's tools over a.
func NewServer(a *app.App) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "aspd", Version: Version}, &mcp.ServerOptions{
		Instructions: "Agent Session Protocol: talk with other agents, each named by a handle like @owner.agent, in sessions. " +
			"Start a conversation with create_session, reply with send_message, and call wait_for_events to receive what others send " +
			"(each call confirms the events the previous call returned). Invitations arrive as session.invited events: call join_session to see the conversation.",
	})

	tool(s, &mcp.Tool{Name: "create_session", Annotations: annotations(false, false, false),
		Description: "Start a new session (a conversation) with other agents: invites the given handles and optionally sends a first message. " +
			"Invitees see the message once they join. Returns the session_id to use with the other tools." + notFoundNote},
		func(ctx context.Context, who string, in CreateSessionArgs) (protocol.CreateSessionResponse, error) {
			req := protocol.CreateSessionRequest{Invite: in.Invite, Topic: in.Topic, EndAfterSend: in.EndAfterSend, IdempotencyKey: in.IdempotencyKey}
			if in.Message != nil {
				c, err := raw(in.Message)
				if err != nil {
					return protocol.CreateSessionResponse{}, err
				}
				req.InitialMessage = &protocol.InitialMessage{Content: c}
			}
			return a.CreateSession(ctx, who, req)
		})

	tool(s, &mcp.Tool{Name: "invite_to_session", Annotations: annotations(false, false, true),
		Description: "Invite more agents into a session you are joined in. All handles are invited or none." + notFoundNote},
		func(ctx context.Context, who string, in InviteArgs) (protocol.InviteResponse, error) {
			return a.Invite(ctx, who, in.SessionID, protocol.InviteRequest{Invite: in.Invite})
		})

	tool(s, &mcp.Tool{Name: "join_session", Annotations: annotations(false, false, true),
		Description: "Accept an invitation (a session.invited event) and join the session. After joining, wait_for_events delivers the conversation so far and everything that follows." + notFoundNote},
		func(ctx context.Context, who string, in SessionArgs) (protocol.OK, error) {
			return protocol.OK{OK: true}, a.Join(ctx, who, in.SessionID)
		})

	tool(s, &mcp.Tool{Name: "leave_session", Annotations: annotations(false, true, false),
		Description: "Leave a session. The others stay and may continue; you stop receiving its events." + notFoundNote},
		func(ctx context.Context, who string, in SessionArgs) (protocol.OK, error) {
			return protocol.OK{OK: true}, a.Leave(ctx, who, in.SessionID)
		})

	tool(s, &mcp.Tool{Name: "end_session", Annotations: annotations(false, true, false),
		Description: "End a session for everyone, when the conversation is finished. It can be reopened later with reopen_session." + notFoundNote},
		func(ctx context.Context, who string, in SessionArgs) (protocol.OK, error) {
			return protocol.OK{OK: true}, a.End(ctx, who, in.SessionID)
		})

	tool(s, &mcp.Tool{Name: "reopen_session", Annotations: annotations(false, false, false),
		Description: "Reopen an ended session you took part in, optionally inviting agents and sending a first message." + notFoundNote},
		func(ctx context.Context, who string, in ReopenArgs) (protocol.OK, error) {
			req := protocol.ReopenRequest{Invite: in.Invite}
			if in.Message != nil {
				c, err := raw(in.Message)
				if err != nil {
					return protocol.OK{}, err
				}
				req.InitialMessage = &protocol.InitialMessage{Content: c}
			}
			return protocol.OK{OK: true}, a.Reopen(ctx, who, in.SessionID, req)
		})

	tool(s, &mcp.Tool{Name: "send_message", Annotations: annotations(false, false, false),
		Description: "Send a message in a session you are joined in. Content is a string or an array of content parts (text and data parts). " +
			"Pass an idempotency_key to make retries safe." + notFoundNote},
		func(ctx context.Context, who string, in SendMessageArgs) (protocol.SendMessageResponse, error) {
			c, err := raw(in.Content)
			if err != nil {
				return protocol.SendMessageResponse{}, err
			}
			if c == nil {
				return protocol.SendMessageResponse{}, protocol.Invalid("content is required")
			}
			m, err := raw(in.Metadata)
			if err != nil {
				return protocol.SendMessageResponse{}, err
			}
			return a.SendMessage(ctx, who, in.SessionID, protocol.SendMessageRequest{Content: c, Metadata: m, IdempotencyKey: in.IdempotencyKey})
		})

	tool(s, &mcp.Tool{Name: "get_session", Annotations: annotations(true, false, true),
		Description: "Get a session: its state (active or ended), topic and participants with their status." + notFoundNote},
		func(ctx context.Context, who string, in SessionArgs) (*protocol.Session, error) {
			return a.Session(ctx, who, in.SessionID)
		})

	tool(s, &mcp.Tool{Name: "list_sessions", Annotations: annotations(true, false, true),
		Description: "List your sessions, newest first, with your status in each, its participants (as get_session shows them to you) and its last sequence number. Page with cursor."},
		func(ctx context.Context, who string, in ListSessionsArgs) (protocol.SessionList[protocol.SessionSummary], error) {
			f, err := app.SessionQuery{State: in.State, Status: in.Status, Cursor: in.Cursor, Limit: itoa(in.Limit), Since: in.Since, Until: in.Until}.Filter()
			if err != nil {
				return protocol.SessionList[protocol.SessionSummary]{}, err
			}
			return a.Sessions(ctx, who, f)
		})

	tool(s, &mcp.Tool{Name: "read_events", Annotations: annotations(true, false, true), Meta: emitsBindingMoment,
		Description: "Read a session's event log (messages, joins, leaves, ...) that you may see, in order, one page at a time. " +
			"Use it to look back at a conversation; to receive new events, use wait_for_events." + notFoundNote},
		func(ctx context.Context, who string, in ReadEventsArgs) (EventsResult, error) {
			p, err := app.PageQuery{AfterSequence: itoa(in.AfterSequence), Limit: itoa(in.Limit)}.Page()
			if err != nil {
				return EventsResult{}, err
			}
			page, err := a.Events(ctx, who, in.SessionID, p)
			if err != nil {
				return EventsResult{}, err
			}
			evs, err := events(page.Events)
			return EventsResult{Events: evs, NextCursor: page.NextCursor, BindingMoment: bindingMomentOf(evs)}, err
		})

	tool(s, &mcp.Tool{Name: "wait_for_events", Annotations: annotations(false, false, false), Meta: emitsBindingMoment,
		Description: "Receive your new events across all your sessions (invitations, messages, joins, leaves, ends), waiting up to timeout_seconds (at most 60) for the first one. " +
			"Each call confirms the events the previous call returned, so call it again after handling them: an event is returned again only if you did not call again " +
			"(at-least-once; de-duplicate by session_id and sequence). Returns at most max_events (at most 500); more=true means call again at once."},
		func(ctx context.Context, who string, in WaitArgs) (WaitResult, error) {
			req := app.WaitRequest{TimeoutSeconds: in.TimeoutSeconds, MaxEvents: in.MaxEvents}
			res, err := a.WaitForEvents(ctx, who, req)
			if err != nil {
				return WaitResult{}, err
			}
			evs, err := events(res.Events)
			return WaitResult{Events: evs, More: res.More, BindingMoment: bindingMomentOf(evs)}, err
		})

	tool(s, &mcp.Tool{Name: "post_frame", Annotations: annotations(false, false, false),
		Description: "Send an ephemeral agent-channel frame to the live frame streams its scope reaches (docs/frames.md). Frames are not stored in sessions; use send_message with a data part for a durable one." + notFoundNote},
		func(ctx context.Context, who string, in PostFrameArgs) (protocol.FrameResult, error) {
			f, err := raw(in.Frame)
			if err != nil {
				return protocol.FrameResult{}, err
			}
			return a.SubmitFrame(ctx, who, protocol.FrameSubmission{Scope: in.Scope, Frame: f})
		})

	tool(s, &mcp.Tool{Name: "get_roster", Annotations: annotations(true, false, true),
		Description: "List your own open agent-channel frame streams (never anyone else's)."},
		func(_ context.Context, who string, _ Empty) (Roster, error) {
			return Roster{Streams: a.Roster(who)}, nil
		})
	decisionTools(s, a) // decisions.go
	return s
}
