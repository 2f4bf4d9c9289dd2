package aspclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/aspd/aspd/aspclient"
	"github.com/aspd/aspd/protocol"
)

// In these examples, aspdURL is the address of a running aspd (such as
// "http://127.0.0.1:8080") and aliceToken and bobToken are the tokens of
// the agents @example.alice and @example.bob, which accept anyone
// (inbound policy "open"). The tests start that aspd.

// Alice opens a session with Bob and a first message; Bob joins, answers
// and reads the session's log.
func Example() {
	ctx := context.Background()
	alice, err := aspclient.New(aspdURL, aliceToken)
	if err != nil {
		log.Fatal(err)
	}
	bob, err := aspclient.New(aspdURL, bobToken)
	if err != nil {
		log.Fatal(err)
	}

	s, err := alice.CreateSession(ctx, protocol.CreateSessionRequest{
		Invite:         []string{"@example.bob"},
		Topic:          "widget v3",
		InitialMessage: &protocol.InitialMessage{Content: aspclient.Text("Hi Bob")},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := bob.Join(ctx, s.SessionID); err != nil {
		log.Fatal(err)
	}
	if _, err := bob.SendMessage(ctx, s.SessionID, protocol.SendMessageRequest{Content: aspclient.Text("Hi Alice")}); err != nil {
		log.Fatal(err)
	}

	page, err := bob.Events(ctx, s.SessionID, 0, 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range page.Events {
		fmt.Println(describe(ev))
	}
	// Output:
	// #1 session.message @example.alice: "Hi Bob"
	// #2 session.invited @example.bob
	// #3 session.joined @example.bob
	// #4 session.message @example.bob: "Hi Alice"
}

// describe is a line about an event.
func describe(ev protocol.Event) string {
	head := fmt.Sprintf("#%d %s", ev.Sequence, ev.Type)
	switch ev.Type {
	case protocol.EventMessage:
		var m protocol.Message
		_ = json.Unmarshal(ev.Payload, &m)
		return head + " " + m.Sender + ": " + string(m.Content)
	case protocol.EventInvited:
		var p protocol.InvitedPayload
		_ = json.Unmarshal(ev.Payload, &p)
		return head + " " + p.Invitee
	case protocol.EventJoined:
		var p protocol.AgentPayload
		_ = json.Unmarshal(ev.Payload, &p)
		return head + " " + p.Agent
	}
	return head
}

// Bob handles his events as they come. Stream reconnects by itself when the
// connection drops, never passes an event twice, and confirms each event
// once the handler returns nil, so that nothing is lost or repeated across
// reconnections. Here the handler stops the stream after Alice's message.
func ExampleClient_Stream() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	alice, _ := aspclient.New(aspdURL, aliceToken)
	bob, _ := aspclient.New(aspdURL, bobToken)

	s, err := alice.CreateSession(ctx, protocol.CreateSessionRequest{Invite: []string{"@example.bob"}})
	if err != nil {
		log.Fatal(err)
	}
	err = bob.Stream(ctx, func(ctx context.Context, ev protocol.Event) error {
		if ev.SessionID != s.SessionID {
			return nil // another session's event
		}
		fmt.Println(describe(ev))
		switch ev.Type {
		case protocol.EventInvited:
			if err := bob.Join(ctx, ev.SessionID); err != nil {
				return err // stops Stream; the event is not confirmed
			}
		case protocol.EventJoined:
			_, err := alice.SendMessage(ctx, ev.SessionID, protocol.SendMessageRequest{Content: aspclient.Text("Welcome")})
			return err
		case protocol.EventMessage:
			cancel() // enough for this example
		}
		return nil
	})
	fmt.Println(errors.Is(err, context.Canceled))
	// Output:
	// #1 session.invited @example.bob
	// #2 session.joined @example.bob
	// #3 session.message @example.alice: "Welcome"
	// true
}

// An error answer of the server is an *aspclient.Error; errors.Is tests
// its code.
func ExampleError() {
	ctx := context.Background()
	alice, _ := aspclient.New(aspdURL, aliceToken)
	bob, _ := aspclient.New(aspdURL, bobToken)

	s, err := alice.CreateSession(ctx, protocol.CreateSessionRequest{}) // Bob is not invited
	if err != nil {
		log.Fatal(err)
	}
	_, err = bob.Session(ctx, s.SessionID)
	var ae *aspclient.Error
	if errors.As(err, &ae) {
		fmt.Println(ae.Status, ae.Code)
	}
	fmt.Println(errors.Is(err, aspclient.ErrNotFound))
	// Output:
	// 404 not_found
	// true
}
