package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aspd/aspd/protocol"
)

func waitSeqs(t *testing.T, a *App, h string, max int) ([]string, bool) {
	t.Helper()
	zero := 0
	res, err := a.WaitForEvents(ctx, h, WaitRequest{TimeoutSeconds: &zero, MaxEvents: &max})
	if err != nil {
		t.Fatalf("WaitForEvents: %v", err)
	}
	out := make([]string, len(res.Events))
	for i, b := range res.Events {
		var e struct {
			Type     string `json:"type"`
			Sequence int64  `json:"sequence"`
		}
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatal(err)
		}
		out[i] = fmt.Sprintf("%s#%d", e.Type, e.Sequence)
	}
	return out, res.More
}

// aliceInvitesBob: a session of @acme.alice that invites @acme.bob, with
// an initial message and three more (sequences 1, invitation 2, 3..5).
func aliceInvitesBob(t *testing.T, a *App) string {
	t.Helper()
	resp, err := a.CreateSession(ctx, "@acme.alice", protocol.CreateSessionRequest{Invite: []string{"@acme.bob"},
		InitialMessage: &protocol.InitialMessage{Content: content("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := a.SendMessage(ctx, "@acme.alice", resp.SessionID, protocol.SendMessageRequest{Content: content(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	return resp.SessionID
}

// TestWaitForEvents: bounds, confirmation by the next call, the join
// restart, and a pass cut by max_events that resumes without restarting.
func TestWaitForEvents(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		mkAgent(t, a, "@acme.alice")
		mkAgent(t, a, "@acme.bob")
		big, neg := 61, -1
		_, err := a.WaitForEvents(ctx, "@acme.bob", WaitRequest{TimeoutSeconds: &big})
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		_, err = a.WaitForEvents(ctx, "@acme.bob", WaitRequest{TimeoutSeconds: &neg})
		wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		for _, n := range []int{0, 501} {
			_, err = a.WaitForEvents(ctx, "@acme.bob", WaitRequest{MaxEvents: &n})
			wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
		}

		sid := aliceInvitesBob(t, a)
		// The invitee sees only its invitation; the next call confirms it.
		if got, _ := waitSeqs(t, a, "@acme.bob", 10); fmt.Sprint(got) != "[session.invited#2]" {
			t.Fatalf("invitee got %v", got)
		}
		if got, _ := waitSeqs(t, a, "@acme.bob", 10); len(got) != 0 {
			t.Fatalf("after confirmation: %v", got)
		}
		if cur, _ := a.st.Cursor(ctx, "@acme.bob", sid); cur != 5 {
			t.Fatalf("cursor %d, want 5 (past the invisible messages)", cur)
		}

		// The join restarts the pass at 1; cut at 2 events per call, it
		// resumes where it stopped and does not restart again.
		if err := a.Join(ctx, "@acme.bob", sid); err != nil {
			t.Fatal(err)
		}
		var all []string
		for {
			got, more := waitSeqs(t, a, "@acme.bob", 2)
			all = append(all, got...)
			if len(got) == 0 {
				break
			}
			if more && len(got) < 2 {
				t.Fatalf("more=%v with %v", more, got)
			}
		}
		want := "[session.message#1 session.invited#2 session.message#3 session.message#4 session.message#5 session.joined#6]"
		if fmt.Sprint(all) != want {
			t.Fatalf("after the join: %v, want %s", all, want)
		}

		// A wait returns when an event arrives: the publish path wakes it.
		// The fallback poll is an hour here, so only the wake-up can
		// deliver.
		a.waitPoll = time.Hour
		go func() {
			time.Sleep(300 * time.Millisecond)
			_, _ = a.SendMessage(ctx, "@acme.alice", sid, protocol.SendMessageRequest{Content: content("late")})
		}()
		// The call may wait 30 s, its context only 5: without a wake-up it
		// ends with the context's error.
		thirty := 30
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := a.WaitForEvents(wctx, "@acme.bob", WaitRequest{TimeoutSeconds: &thirty})
		if err != nil || len(res.Events) != 1 {
			t.Fatalf("long poll: %d events, err %v", len(res.Events), err)
		}
		if n := a.waits.waiting.Load(); n != 0 {
			t.Fatalf("%d waiting calls left registered", n)
		}
		if len(a.waits.wakers) != 0 {
			t.Fatalf("wakers left: %v", a.waits.wakers)
		}
	})
}

// TestWaitForEventsJoinedBeforeFirstCall: an agent that joined before its
// first call gets the transcript from 1 in one pass; cut by max_events, the
// pass resumes where it stopped and does not restart at the join.
func TestWaitForEventsJoinedBeforeFirstCall(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		mkAgent(t, a, "@acme.alice")
		mkAgent(t, a, "@acme.bob")
		sid := aliceInvitesBob(t, a)
		if err := a.Join(ctx, "@acme.bob", sid); err != nil {
			t.Fatal(err)
		}
		if _, err := a.SendMessage(ctx, "@acme.alice", sid, protocol.SendMessageRequest{Content: content("after")}); err != nil {
			t.Fatal(err)
		}
		var all []string
		for range 10 {
			got, _ := waitSeqs(t, a, "@acme.bob", 2)
			if len(got) == 0 {
				break
			}
			all = append(all, got...)
		}
		want := "[session.message#1 session.invited#2 session.message#3 session.message#4 session.message#5 session.joined#6 session.message#7]"
		if fmt.Sprint(all) != want {
			t.Fatalf("got %v, want %s", all, want)
		}
	})
}
