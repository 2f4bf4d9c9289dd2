package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aspd/aspd/aspclient"
	"github.com/aspd/aspd/protocol"
)

func listen(a *app, c *command, args []string) error {
	fs := a.flags(c)
	pretty := fs.Bool("pretty", false, "human format: SESSION #SEQ TYPE details")
	reconnect := fs.Bool("reconnect", false, "reconnect with backoff (1s doubling to 30s) after the connection drops")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	cl, err := a.agentClient()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(a.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second interrupt during the close kills
	// Stream reconnects by itself; without --reconnect the first drop ends
	// listen with its error.
	ac, err := aspclient.New(cl.server, cl.token, aspclient.WithOnDisconnect(func(err error, wait time.Duration) error {
		if !*reconnect {
			return err
		}
		fmt.Fprintf(a.stderr, "aspctl: %v; reconnecting in %s\n", listenError(cl.server, err), wait)
		return nil
	}))
	if err != nil {
		return usageErrorf("--server %q: %v", cl.server, err)
	}
	l := &listener{pretty: *pretty, out: a.stdout}
	err = ac.Stream(ctx, l.print)
	if ctx.Err() != nil {
		return nil // interrupted: Stream closed the connection normally
	}
	return listenError(cl.server, err)
}

// listenError makes Stream's errors read like aspctl's other errors: an
// API error as an *apiError, a server that cannot be reached as a sentence.
func listenError(server string, err error) error {
	var ae *aspclient.Error
	var ce *aspclient.CloseError
	var dns *net.DNSError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ce):
		return err
	case errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &dns), errors.Is(err, context.DeadlineExceeded):
		return reachError(server, err)
	}
	return err
}

// listener prints the events of WS /connect, one line each. aspclient's
// Stream passes each (session_id, sequence) once (a join replays the
// transcript and a reconnection may resend events: delivery is at least
// once), and acknowledges it once printed, so that a reconnection resumes
// right after what was printed.
type listener struct {
	pretty bool
	out    io.Writer
}

// print writes one event.
func (l *listener) print(_ context.Context, ev protocol.Event) error {
	var line bytes.Buffer
	if l.pretty {
		line.WriteString(formatEvent(&ev))
		line.WriteByte('\n')
	} else {
		enc := json.NewEncoder(&line) // compact, one line, ending with \n
		enc.SetEscapeHTML(false)
		if err := enc.Encode(ev); err != nil {
			return err
		}
	}
	_, err := l.out.Write(line.Bytes())
	return err
}

// formatEvent is the --pretty line of an event:
// "sess_01J... #12 session.message @acme.support: hello".
func formatEvent(ev *protocol.Event) string {
	head := fmt.Sprintf("%s #%d %s", ev.SessionID, ev.Sequence, ev.Type)
	switch ev.Type {
	case protocol.EventMessage:
		var m protocol.Message
		_ = json.Unmarshal(ev.Payload, &m)
		return head + " " + m.Sender + ": " + contentText(m.Content)
	case protocol.EventInvited:
		var p protocol.InvitedPayload
		_ = json.Unmarshal(ev.Payload, &p)
		s := head + " " + p.Invitee + " by " + p.By
		if p.Topic != "" {
			s += " topic " + strconv.Quote(p.Topic)
		}
		if p.InitialMessage != nil {
			s += ": " + contentText(p.InitialMessage.Content)
		}
		return s
	case protocol.EventJoined, protocol.EventDisconnected, protocol.EventReconnected:
		var p protocol.AgentPayload
		_ = json.Unmarshal(ev.Payload, &p)
		return head + " " + p.Agent
	case protocol.EventLeft:
		var p protocol.LeftPayload
		_ = json.Unmarshal(ev.Payload, &p)
		if p.Reason != "" {
			return head + " " + p.Agent + " (" + p.Reason + ")"
		}
		return head + " " + p.Agent
	case protocol.EventEnded:
		var p protocol.EndedPayload
		_ = json.Unmarshal(ev.Payload, &p)
		if p.EndedBy == "" {
			return head + " (no participant left)"
		}
		return head + " by " + p.EndedBy
	case protocol.EventReopened:
		var p protocol.ReopenedPayload
		_ = json.Unmarshal(ev.Payload, &p)
		return head + " by " + p.ReopenedBy
	}
	var b bytes.Buffer
	_ = json.Compact(&b, ev.Payload)
	return head + " " + b.String()
}

// contentText renders message content on one line: text as is, data parts
// as compact JSON, images and files as [image NAME] / [file NAME].
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string          `json:"type"`
		Text string          `json:"text"`
		Data json.RawMessage `json:"data"`
		Name string          `json:"name"`
		URL  string          `json:"url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case "text":
			out = append(out, p.Text)
		case "data":
			var b bytes.Buffer
			_ = json.Compact(&b, p.Data)
			out = append(out, b.String())
		default:
			name := p.Name
			if name == "" {
				name = p.URL
			}
			out = append(out, "["+p.Type+" "+name+"]")
		}
	}
	return strings.Join(out, " ")
}
