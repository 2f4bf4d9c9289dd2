package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/url"
	"strings"

	"github.com/aspd/aspd/protocol"
)

// agentCommands are the agent commands, in usage order.
var agentCommands = []*command{
	{name: "session create", args: "[--invite @a.b,@c.d] [--topic T] [--message TEXT] [--data JSON] [--end-after-send] [--idempotency-key K]",
		desc: "open a session (you are joined; invitees get session.invited)", run: sessionCreate},
	{name: "session list", args: "[--state active|ended] [--status invited|joined|left] [--limit N] [--all]",
		desc: "list your sessions, newest first", run: sessionList},
	{name: "session get", args: "ID", desc: "show a session you take or took part in", run: agentCall(1, 1, func(p []string) request {
		return request{"GET", sessionPath(p[0], ""), nil}
	})},
	{name: "send", args: "ID [TEXT...] [--data JSON] [--content JSON] [--metadata JSON] [--idempotency-key K]",
		desc: "send a message (text, a data part, or raw content)", run: send},
	{name: "join", args: "ID", desc: "accept an invitation", run: agentCall(1, 1, func(p []string) request {
		return request{"POST", sessionPath(p[0], "/join"), struct{}{}}
	})},
	{name: "invite", args: "ID HANDLE...", desc: "invite agents into a session you joined", run: agentCall(2, -1, func(p []string) request {
		return request{"POST", sessionPath(p[0], "/invite"), protocol.InviteRequest{Invite: splitList(p[1:]...)}}
	})},
	{name: "leave", args: "ID", desc: "leave a session", run: agentCall(1, 1, func(p []string) request {
		return request{"POST", sessionPath(p[0], "/leave"), struct{}{}}
	})},
	{name: "end", args: "ID", desc: "end a session for everyone", run: agentCall(1, 1, func(p []string) request {
		return request{"POST", sessionPath(p[0], "/end"), struct{}{}}
	})},
	{name: "reopen", args: "ID [--invite @a.b,...] [--message TEXT] [--data JSON]",
		desc: "reopen an ended session you were joined in", run: reopen},
	{name: "history", args: "ID [--after N] [--limit N] [--all]", desc: "the session events you may see (GET /sessions/{id}/events)", run: history},
	{name: "listen", args: "[--pretty] [--reconnect]", desc: "stream your events (WS /connect) as JSON lines until interrupted", run: listen},
}

func sessionPath(id, suffix string) string {
	return "/sessions/" + pathEscape(id) + suffix
}

// agentCall is an agent command without flags taking minArgs..maxArgs positional
// arguments (maxArgs < 0: any number) and making one call.
func agentCall(minArgs, maxArgs int, build func(pos []string) request) runFunc {
	return oneCall((*app).agentClient, minArgs, maxArgs, build)
}

// contentFlags are the ways to give message content on the command line.
type contentFlags struct {
	data    *string
	content *string
}

func addContentFlags(fs *flag.FlagSet, withRaw bool) contentFlags {
	cf := contentFlags{data: fs.String("data", "", "a data part: a JSON object, sent as {\"type\":\"data\",\"data\":JSON}")}
	if withRaw {
		cf.content = fs.String("content", "", "raw content JSON: a string or an array of parts (excludes TEXT and --data)")
	}
	return cf
}

// build returns the content: TEXT alone is a plain string; --data alone is
// one data part; both are a text part then a data part; --content is sent
// as given. No content at all is nil.
func (cf contentFlags) build(text string, hasText bool) (json.RawMessage, error) {
	if cf.content != nil && *cf.content != "" {
		if hasText || *cf.data != "" {
			return nil, usageErrorf("--content cannot be combined with TEXT or --data")
		}
		if !json.Valid([]byte(*cf.content)) {
			return nil, usageErrorf("--content is not valid JSON")
		}
		return json.RawMessage(*cf.content), nil
	}
	var parts []any
	if *cf.data != "" {
		d := bytes.TrimSpace([]byte(*cf.data))
		if !json.Valid(d) || d[0] != '{' {
			return nil, usageErrorf("--data must be a JSON object")
		}
		if hasText {
			parts = append(parts, textPart{Type: "text", Text: text})
		}
		parts = append(parts, dataPart{Type: "data", Data: json.RawMessage(d)})
		return json.Marshal(parts)
	}
	if hasText {
		return json.Marshal(text)
	}
	return nil, nil
}

// textPart and dataPart are content parts (common.json), fields in schema order.
type textPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type dataPart struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// jsonFlag validates an optional JSON flag value.
func jsonFlag(name, v string) (json.RawMessage, error) {
	if v == "" {
		return nil, nil
	}
	if !json.Valid([]byte(v)) {
		return nil, usageErrorf("--%s is not valid JSON", name)
	}
	return json.RawMessage(v), nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// initialMessage builds the optional initial message of create and reopen.
func initialMessage(text string, cf contentFlags) (*protocol.InitialMessage, error) {
	content, err := cf.build(text, text != "")
	if err != nil || content == nil {
		return nil, err
	}
	return &protocol.InitialMessage{Content: content}, nil
}

func sessionCreate(a *app, c *command, args []string) error {
	fs := a.flags(c)
	invite := fs.String("invite", "", "comma-separated handles to invite")
	topic := fs.String("topic", "", "session topic")
	message := fs.String("message", "", "initial message text")
	cf := addContentFlags(fs, false)
	endAfter := fs.Bool("end-after-send", false, "end the session right after the initial message (invitees get it inline)")
	key := fs.String("idempotency-key", "", "retry key: the same key and body returns the original session")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	initial, err := initialMessage(*message, cf)
	if err != nil {
		return err
	}
	cl, err := a.agentClient()
	if err != nil {
		return err
	}
	req := protocol.CreateSessionRequest{Invite: splitList(*invite), Topic: *topic, InitialMessage: initial,
		EndAfterSend: *endAfter, IdempotencyKey: optional(*key)}
	return a.show(cl, "POST", "/sessions", nil, req)
}

func sessionList(a *app, c *command, args []string) error {
	fs := a.flags(c)
	state := fs.String("state", "", "only active or ended sessions")
	status := fs.String("status", "", "only sessions where you are invited, joined or left")
	limit := fs.Int("limit", 0, "sessions per page, 1-1000 (server default 100)")
	all := fs.Bool("all", false, "follow next_cursor and print every session")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	cl, err := a.agentClient()
	if err != nil {
		return err
	}
	q := url.Values{}
	if *state != "" {
		q.Set("state", *state)
	}
	if *status != "" {
		q.Set("status", *status)
	}
	return a.listSessions(cl, q, *limit, *all)
}

func send(a *app, c *command, args []string) error {
	fs := a.flags(c)
	cf := addContentFlags(fs, true)
	metadata := fs.String("metadata", "", "message metadata, a JSON object")
	key := fs.String("idempotency-key", "", "retry key: the same key and body returns the original message")
	pos, err := a.parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	content, err := cf.build(strings.Join(pos[1:], " "), len(pos) > 1)
	if err != nil {
		return err
	}
	if content == nil {
		return usageErrorf("send needs TEXT, --data or --content")
	}
	meta, err := jsonFlag("metadata", *metadata)
	if err != nil {
		return err
	}
	cl, err := a.agentClient()
	if err != nil {
		return err
	}
	req := protocol.SendMessageRequest{Content: content, Metadata: meta, IdempotencyKey: optional(*key)}
	return a.show(cl, "POST", sessionPath(pos[0], "/messages"), nil, req)
}

func reopen(a *app, c *command, args []string) error {
	fs := a.flags(c)
	invite := fs.String("invite", "", "comma-separated handles to (re-)invite")
	message := fs.String("message", "", "a message to append after the reopening")
	cf := addContentFlags(fs, false)
	pos, err := a.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	initial, err := initialMessage(*message, cf)
	if err != nil {
		return err
	}
	cl, err := a.agentClient()
	if err != nil {
		return err
	}
	req := protocol.ReopenRequest{Invite: splitList(*invite), InitialMessage: initial}
	return a.show(cl, "POST", sessionPath(pos[0], "/reopen"), nil, req)
}

// history is the agent's eligible events of a session.
var history = eventsCommand((*app).agentClient)
