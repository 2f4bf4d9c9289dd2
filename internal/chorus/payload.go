package chorus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aspd/aspd/protocol"
)

// Payload is the Chorus delivery body (Chorus §2).
type Payload struct {
	Channel  Channel  `json:"channel"`
	Message  Message  `json:"message"`
	Callback string   `json:"callback"`
	MCP      *MCPInfo `json:"mcp,omitempty"`
}

// Channel is the session the event belongs to.
type Channel struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Service string `json:"service,omitempty"`
	Context string `json:"context,omitempty"`
}

// Message is the event, rendered. Content is readable text; Type, Sequence
// and Event (the ASP event exactly as the WebSocket delivers it, with the
// structured content) are aspd's additions, which Chorus agents may ignore.
type Message struct {
	ID       string          `json:"id"`
	Sender   string          `json:"sender"`
	Content  string          `json:"content"`
	Type     string          `json:"type"`
	Sequence int64           `json:"sequence"`
	Event    json.RawMessage `json:"event"`
}

// MCPInfo is the MCP configuration handed to the agent.
type MCPInfo struct {
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// wireEvent is the part of an ASP event that rendering reads.
type wireEvent struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	EventID   string `json:"event_id"`
	Sequence  int64  `json:"sequence"`
	Payload   struct {
		// session.message
		ID      string          `json:"id"`
		Sender  string          `json:"sender"`
		Content json.RawMessage `json:"content"`
		// the other types
		Invitee        string            `json:"invitee"`
		By             string            `json:"by"`
		Topic          string            `json:"topic"`
		InitialMessage *protocol.Message `json:"initial_message"`
		Agent          string            `json:"agent"`
		Reason         string            `json:"reason"`
		EndedBy        string            `json:"ended_by"`
		ReopenedBy     string            `json:"reopened_by"`
	} `json:"payload"`
}

// actor returns the agent that caused an event ("" for none).
func (e *wireEvent) actor() string {
	p := &e.Payload
	switch e.Type {
	case protocol.EventMessage:
		return p.Sender
	case protocol.EventInvited:
		return p.By
	case protocol.EventJoined, protocol.EventLeft, protocol.EventDisconnected, protocol.EventReconnected:
		return p.Agent
	case protocol.EventEnded:
		return p.EndedBy
	case protocol.EventReopened:
		return p.ReopenedBy
	}
	return ""
}

// parseEvent reads an event's body for rendering.
func parseEvent(body []byte) (*wireEvent, error) {
	var e wireEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("chorus: event body: %w", err)
	}
	return &e, nil
}

// SelfCaused reports whether the recipient caused the event itself (its
// own message, join, leave, presence change). Those are not delivered: each
// Chorus delivery is a prompt to act, and an agent prompted by its own
// words would talk to itself.
func SelfCaused(body []byte, recipient string) bool {
	e, err := parseEvent(body)
	return err == nil && e.actor() == recipient
}

// render builds the message part of a delivery to recipient.
func render(body []byte, recipient string) (Message, error) {
	e, err := parseEvent(body)
	if err != nil {
		return Message{}, err
	}
	m := Message{ID: e.EventID, Sender: e.actor(), Type: e.Type, Sequence: e.Sequence, Event: json.RawMessage(body)}
	p := &e.Payload
	switch e.Type {
	case protocol.EventMessage:
		m.ID = p.ID
		m.Content = RenderContent(p.Content)
	case protocol.EventInvited:
		who := p.Invitee
		if p.Invitee == recipient {
			who = "you (" + recipient + ")"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s invited %s to this session", p.By, who)
		if p.Topic != "" {
			fmt.Fprintf(&b, " (topic: %q)", p.Topic)
		}
		b.WriteString(".")
		if p.Invitee == recipient {
			b.WriteString(" To take part, call the join_session tool of the MCP server in this delivery with this session id; you see the conversation once you have joined.")
		}
		if p.InitialMessage != nil {
			fmt.Fprintf(&b, "\n\nFirst message from %s:\n%s", p.InitialMessage.Sender, RenderContent(p.InitialMessage.Content))
		}
		m.Content = b.String()
	case protocol.EventJoined:
		m.Content = p.Agent + " joined the session."
	case protocol.EventLeft:
		m.Content = p.Agent + " left the session"
		if p.Reason != "" {
			m.Content += " (" + strings.ReplaceAll(p.Reason, "_", " ") + ")"
		}
		m.Content += "."
	case protocol.EventDisconnected:
		m.Content = p.Agent + " disconnected; it stays in the session for the grace window."
	case protocol.EventReconnected:
		m.Content = p.Agent + " reconnected."
	case protocol.EventEnded:
		if p.EndedBy != "" {
			m.Content = "The session was ended by " + p.EndedBy + "."
		} else {
			m.Content = "The session ended: every participant left."
		}
	case protocol.EventReopened:
		m.Content = "The session was reopened by " + p.ReopenedBy + "."
	default:
		m.Content = "Session event " + e.Type + "."
	}
	if m.Sender == "" {
		m.Sender = "aspd"
	}
	return m, nil
}

// RenderContent renders ASP message content as text: a string as it is;
// parts one per paragraph, text as its text, images and files as a
// bracketed line naming them, data parts as their compact JSON.
func RenderContent(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	var parts []map[string]json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	out := make([]string, 0, len(parts))
	str := func(p map[string]json.RawMessage, k string) string {
		var s string
		_ = json.Unmarshal(p[k], &s)
		return s
	}
	for _, p := range parts {
		switch str(p, "type") {
		case "text":
			out = append(out, str(p, "text"))
		case "image":
			out = append(out, "[image: "+firstOf(str(p, "name"), str(p, "url"), str(p, "mime_type"), "inline")+"]")
		case "file":
			desc := firstOf(str(p, "name"), str(p, "url"))
			if mt := str(p, "mime_type"); mt != "" {
				desc += " (" + mt + ")"
			}
			if u := str(p, "url"); u != "" && u != desc {
				desc += " " + u
			}
			out = append(out, "[file: "+desc+"]")
		case "data":
			var b bytes.Buffer
			if json.Compact(&b, p["data"]) != nil {
				b.Write(p["data"])
			}
			out = append(out, "[data: "+b.String()+"]")
		}
	}
	return strings.Join(out, "\n\n")
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// channelContext describes the session for the agent: service, state and
// participants.
func channelContext(s *protocol.Session, recipient string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "An Agent Session Protocol session on aspd. You are %s. The session is %s.", recipient, s.State)
	if len(s.Participants) > 0 {
		b.WriteString(" Participants: ")
		for i, p := range s.Participants {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s (%s)", p.Handle, p.Status)
		}
		b.WriteString(".")
	}
	b.WriteString(" Reply through the callback URL; use the MCP tools to join, read the history or act in the session.")
	return b.String()
}
