package aspclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"

	"github.com/aspd/aspd/aspclient"
	"github.com/aspd/aspd/protocol"
)

// In these examples, aspdURL is the address of a running aspd (such as
// "http://127.0.0.1:8080") and aliceToken and bobToken are the tokens of
// the agents @example.alice and @example.bob, which accept anyone
// (inbound policy "open"); operatorToken is its operator token. The tests
// start that aspd.

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

// Dial gives the connection under Stream, for programs that watch delivery
// itself: every frame as it arrives, duplicates included, and
// acknowledgements only when asked. Bob reads his invitation to a new
// session and confirms it, so that his next connection resumes after it.
func ExampleClient_Dial() {
	ctx := context.Background()
	alice, _ := aspclient.New(aspdURL, aliceToken)
	bob, _ := aspclient.New(aspdURL, bobToken)

	s, err := alice.CreateSession(ctx, protocol.CreateSessionRequest{Invite: []string{"@example.bob"}})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := bob.Dial(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close("done")
	for {
		frame, err := conn.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		ev, ok := aspclient.ParseEvent(frame)
		if !ok || ev.SessionID != s.SessionID {
			continue // another session's event (or not an event)
		}
		fmt.Println(describe(ev))
		if err := conn.Ack(ctx, ev.SessionID, ev.Sequence); err != nil {
			log.Fatal(err)
		}
		break
	}
	// Output:
	// #1 session.invited @example.bob
}

// The operator API: NewAdmin takes the server's URL and the operator
// token. CreateAgent shows the new agent's token, once; Do reaches the
// calls that have no method (docs/api.md, paths under /admin/v1).
func ExampleNewAdmin() {
	ctx := context.Background()
	admin, err := aspclient.NewAdmin(aspdURL, operatorToken)
	if err != nil {
		log.Fatal(err)
	}
	a, err := admin.CreateAgent(ctx, protocol.CreateAgentRequest{Handle: "@example.dave", InboundPolicy: "allowlist", Allowlist: []string{"@example.*"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Handle, a.InboundPolicy, a.Token != "")

	err = admin.Do(ctx, http.MethodPut, "/agents/@example.dave/policy", nil, protocol.PolicyRequest{InboundPolicy: "open"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	got, err := admin.Agent(ctx, "@example.dave")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.InboundPolicy, got.Allowlist)

	if err := admin.DeleteAgent(ctx, "@example.dave"); err != nil {
		log.Fatal(err)
	}
	_, err = admin.Agent(ctx, "@example.dave")
	fmt.Println(errors.Is(err, aspclient.ErrNotFound))
	// Output:
	// @example.dave allowlist true
	// open [@example.*]
	// true
}
