package framefeed

import (
	"testing"
	"time"

	"github.com/aspd/aspd/protocol/frame"
)

func filter(t *testing.T, s string) frame.Filter {
	t.Helper()
	f, err := frame.ParseFilter(s)
	if err != nil {
		t.Fatalf("filter %q: %v", s, err)
	}
	return f
}

func fr(kind, sender, contentType string) *frame.Frame {
	return &frame.Frame{Kind: kind, SenderHandle: sender, RecipientHandle: "@alice.cc", ContentType: contentType}
}

// drain returns the ids of a subscription's replay, then those queued on
// it, without blocking.
func drain(s *Subscription) []string {
	var ids []string
	for _, d := range s.Replay {
		ids = append(ids, d.ID)
	}
	s.Replay = nil
	for {
		select {
		case d := <-s.C:
			ids = append(ids, d.ID)
		default:
			return ids
		}
	}
}

func TestEmitMatchesScopeAndFilter(t *testing.T) {
	r := New(Config{RetainCount: 10, RetainAge: time.Minute, Buffer: 8})
	all, _ := r.Open("@alice.cc", "cc-1", "", frame.Filter{}, "", 0)
	prefix, _ := r.Open("@alice.cc", "cc-2", "", filter(t, "kind:agent_advisory"), "", 0)
	ide, _ := r.Open("@alice.cc", "ide", "s1", filter(t, "content_type:text/plain"), "", 0)
	other, _ := r.Open("@bob.x", "cc-1", "", frame.Filter{}, "", 0)

	adv := fr(frame.KindAgentAdvisory, "@alice.cc", "")
	if n := r.Emit(&Target{Handles: []string{"@alice.cc"}}, adv, []byte(`{}`)); n != 2 {
		t.Fatalf("handle scope reached %d streams, want 2 (ide's content_type filter must not match a frame without content_type)", n)
	}
	if n := r.Emit(&Target{Handles: []string{"@alice.cc"}, PrefixOnly: true, InstrumentPrefix: "cc-"}, fr(frame.KindAgentQuery, "@alice.cc", ""), nil); n != 1 {
		t.Fatalf("prefix scope with kind filter reached %d, want 1 (cc-1 only)", n)
	}
	if n := r.Emit(&Target{Handles: []string{"@alice.cc"}, Exact: true, Instrument: "ide", Session: "s1"}, fr(frame.KindAgentQuery, "@alice.cc", "text/plain"), nil); n != 1 {
		t.Fatalf("exact scope reached %d, want 1", n)
	}
	if got := len(drain(all)); got != 2 {
		t.Errorf("cc-1 got %d frames, want 2", got)
	}
	if got := len(drain(prefix)); got != 1 {
		t.Errorf("cc-2 got %d frames, want 1", got)
	}
	if got := len(drain(ide)); got != 1 {
		t.Errorf("ide got %d frames, want 1", got)
	}
	if got := len(drain(other)); got != 0 {
		t.Errorf("another handle's stream got %d frames, want 0", got)
	}
}

func TestOrgFilterAxisMatchesOnlyOrgDeliveries(t *testing.T) {
	r := New(Config{RetainCount: 10, RetainAge: time.Minute, Buffer: 8})
	s, _ := r.Open("@acme.a", "x", "", filter(t, "org:acme"), "", 0)
	if n := r.Emit(&Target{Handles: []string{"@acme.a"}}, fr(frame.KindAgentBroadcast, "@acme.a", ""), nil); n != 0 {
		t.Fatalf("a handle-scoped frame matched an org filter")
	}
	if n := r.Emit(&Target{Handles: []string{"@acme.a"}, Org: "acme"}, fr(frame.KindAgentBroadcast, "@acme.b", ""), nil); n != 1 {
		t.Fatalf("an org-scoped frame did not match its org filter")
	}
	if n := r.Emit(&Target{Handles: []string{"@acme.a"}, Org: "other"}, fr(frame.KindAgentBroadcast, "@acme.b", ""), nil); n != 0 {
		t.Fatalf("another org's frame matched")
	}
	if got := len(drain(s)); got != 1 {
		t.Fatalf("got %d frames, want 1", got)
	}
}

func TestResumeAfterLastEventID(t *testing.T) {
	now := time.Unix(1000, 0)
	r := New(Config{RetainCount: 3, RetainAge: time.Minute, Buffer: 16})
	r.now = func() time.Time { return now }
	first, _ := r.Open("@alice.cc", "cc-1", "", frame.Filter{}, "", 0)
	tgt := &Target{Handles: []string{"@alice.cc"}}
	for i := 0; i < 5; i++ {
		r.Emit(tgt, fr(frame.KindAgentAdvisory, "@alice.cc", ""), nil)
	}
	ids := drain(first)
	r.Close(first)
	if len(ids) != 5 {
		t.Fatalf("got %d ids", len(ids))
	}

	// Inside retention (3 kept: ids 3, 4, 5): resuming after id 3 yields 4 and 5, no gap.
	s, gap := r.Open("@alice.cc", "cc-1", "", frame.Filter{}, ids[2], 0)
	if gap {
		t.Fatal("resume inside retention reported a gap")
	}
	if got := drain(s); len(got) != 2 || got[0] != ids[3] || got[1] != ids[4] {
		t.Fatalf("resumed %v, want %v", got, ids[3:])
	}
	r.Close(s)

	// Aged out by count: after id 1, id 2 is gone: a gap, then what is retained.
	s, gap = r.Open("@alice.cc", "cc-1", "", frame.Filter{}, ids[0], 0)
	if !gap {
		t.Fatal("resume beyond retention did not report a gap")
	}
	if got := drain(s); len(got) != 3 || got[0] != ids[2] {
		t.Fatalf("after a gap got %v, want the 3 retained", got)
	}
	r.Close(s)

	// Aged out by time: nothing retained, and the id is old.
	now = now.Add(2 * time.Minute)
	s, gap = r.Open("@alice.cc", "cc-1", "", frame.Filter{}, ids[3], 0)
	if !gap || len(drain(s)) != 0 {
		t.Fatal("resume after the retention age must report a gap and replay nothing")
	}
	r.Close(s)

	// The newest id with nothing after it is a clean resume even when retention is empty.
	s, gap = r.Open("@alice.cc", "cc-1", "", frame.Filter{}, ids[4], 0)
	if gap {
		t.Fatal("resuming at the newest id reported a gap")
	}
	r.Close(s)

	// An id from another process (epoch) is a gap.
	if _, gap := r.Open("@alice.cc", "cc-1", "", frame.Filter{}, "zzz-1", 0); !gap {
		t.Fatal("foreign id was not a gap")
	}
}

func TestSlowStreamIsDropped(t *testing.T) {
	r := New(Config{RetainCount: 0, RetainAge: time.Minute, Buffer: 2})
	s, _ := r.Open("@alice.cc", "cc-1", "", frame.Filter{}, "", 0)
	tgt := &Target{Handles: []string{"@alice.cc"}}
	for i := 0; i < 3; i++ {
		r.Emit(tgt, fr(frame.KindAgentAdvisory, "@alice.cc", ""), nil)
	}
	select {
	case <-s.Dropped():
	default:
		t.Fatal("a stream over its buffer was not dropped")
	}
	if r.Streams("@alice.cc") != 0 {
		t.Fatal("dropped stream still registered")
	}
}

func TestRosterIsPerHandle(t *testing.T) {
	r := New(Config{RetainCount: 1, RetainAge: time.Minute, Buffer: 1})
	r.Open("@alice.cc", "cc-1", "", frame.Filter{}, "", 0)
	r.Open("@alice.cc", "ide", "s9", frame.Filter{}, "", 0)
	r.Open("@bob.x", "secret", "", frame.Filter{}, "", 0)
	got := r.Roster("@alice.cc")
	if len(got) != 2 {
		t.Fatalf("roster %+v", got)
	}
	for _, s := range got {
		if s.Instrument == "secret" {
			t.Fatal("roster leaked another agent's stream")
		}
	}
}

func TestOpenEnforcesStreamLimit(t *testing.T) {
	r := New(Config{RetainCount: 1, RetainAge: time.Minute, Buffer: 1})
	for i := 0; i < 2; i++ {
		if s, _ := r.Open("@alice.cc", "cc", "", frame.Filter{}, "", 2); s == nil {
			t.Fatalf("open %d refused under the limit", i)
		}
	}
	if s, _ := r.Open("@alice.cc", "cc", "", frame.Filter{}, "", 2); s != nil {
		t.Fatal("third stream opened past a limit of 2")
	}
	if s, _ := r.Open("@bob.x", "cc", "", frame.Filter{}, "", 2); s == nil {
		t.Fatal("another agent's stream refused: the limit is per agent")
	}
}

func TestRetentionByteBudget(t *testing.T) {
	now := time.Unix(1000, 0)
	r := New(Config{RetainCount: 100, RetainAge: time.Minute, RetainBytes: 250, Buffer: 16})
	r.now = func() time.Time { return now }
	tgt := &Target{Handles: []string{"@a.x"}}
	big := make([]byte, 100)
	for i := 0; i < 3; i++ {
		r.Emit(tgt, fr(frame.KindAgentAdvisory, "@a.x", ""), big)
	}
	if got := r.RetainedBytes(); got != 200 {
		t.Fatalf("retained %d bytes, want 200 (the third frame is over the 250-byte budget)", got)
	}
	// Age expiry reclaims the budget even when the handle is never touched again.
	now = now.Add(2 * time.Minute)
	r.ExpireAll()
	if got := r.RetainedBytes(); got != 0 {
		t.Fatalf("retained %d bytes after the retention age, want 0", got)
	}
	r.Emit(tgt, fr(frame.KindAgentAdvisory, "@a.x", ""), big)
	if got := r.RetainedBytes(); got != 100 {
		t.Fatalf("retained %d bytes, want 100", got)
	}
}

// TestResumeReplayCarriesSenders: a resumed stream's retained frames come in
// Replay, oldest first and each with its sender (the server re-checks trust
// per sender before writing them); frames emitted after the stream opened
// go to C only.
func TestResumeReplayCarriesSenders(t *testing.T) {
	r := New(Config{RetainCount: 10, RetainAge: time.Minute, Buffer: 8})
	first, _ := r.Open("@alice.cc", "cc-1", "", frame.Filter{}, "", 0)
	tgt := &Target{Handles: []string{"@alice.cc"}}
	r.Emit(tgt, fr(frame.KindAgentAdvisory, "@alice.cc", ""), nil)
	last := drain(first)[0]
	r.Close(first)
	r.Emit(tgt, fr(frame.KindAgentAdvisory, "@bob.x", ""), nil)
	r.Emit(tgt, fr(frame.KindAgentAdvisory, "@carol.y", ""), nil)

	s, gap := r.Open("@alice.cc", "cc-1", "", frame.Filter{}, last, 0)
	if gap {
		t.Fatal("resume inside retention reported a gap")
	}
	r.Emit(tgt, fr(frame.KindAgentAdvisory, "@dave.z", ""), nil)
	if len(s.Replay) != 2 || s.Replay[0].Sender != "@bob.x" || s.Replay[1].Sender != "@carol.y" || s.Replay[0].ID >= s.Replay[1].ID {
		t.Fatalf("replay %+v, want bob's then carol's frame", s.Replay)
	}
	if len(s.C) != 1 {
		t.Fatalf("%d frames on C, want only the one emitted after the stream opened", len(s.C))
	}
}

// TestHandleStateIsFreed: a handle's state is dropped once it has no open
// stream and no retained frame, and ids still never repeat afterwards (a
// stale Last-Event-ID is a gap, not a clean resumption).
func TestHandleStateIsFreed(t *testing.T) {
	now := time.Unix(1000, 0)
	r := New(Config{RetainCount: 10, RetainAge: time.Minute, Buffer: 8})
	r.now = func() time.Time { return now }
	handles := func() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.handles) }

	s, _ := r.Open("@alice.cc", "cc-1", "", frame.Filter{}, "", 0)
	for _, h := range []string{"@bob.x", "@bob.x", "@alice.cc", "@alice.cc", "@alice.cc"} {
		r.Emit(&Target{Handles: []string{h}}, fr(frame.KindAgentAdvisory, "@carol.x", ""), []byte(`{}`))
	}
	ids := drain(s)
	last := ids[len(ids)-1]
	r.Close(s)
	if got := handles(); got != 2 {
		t.Fatalf("%d handle states while frames are retained, want 2", got)
	}
	now = now.Add(2 * time.Minute) // every retained frame ages out
	r.ExpireAll()
	if got := handles(); got != 0 {
		t.Fatalf("%d handle states left with no stream and nothing retained, want 0", got)
	}
	if r.RetainedBytes() != 0 {
		t.Fatalf("retained bytes %d, want 0", r.RetainedBytes())
	}

	// Emitting to a handle without streams or retention keeps nothing.
	r0 := New(Config{RetainCount: 0, RetainAge: time.Minute, Buffer: 8})
	r0.Emit(&Target{Handles: []string{"@x.y"}}, fr(frame.KindAgentAdvisory, "@carol.x", ""), nil)
	r0.mu.Lock()
	n0 := len(r0.handles)
	r0.mu.Unlock()
	if n0 != 0 {
		t.Fatalf("%d handle states after an emit that nobody received or retained, want 0", n0)
	}

	// After the state was dropped, an old id is a gap, the newest one is a
	// clean resumption, and new frames get fresh ids, never reused. (A
	// newest id below what other handles were issued since is reported as
	// a gap: conservative, as the dropped state's last id is forgotten.)
	if s1, gap := r.Open("@alice.cc", "cc-1", "", frame.Filter{}, ids[0], 0); !gap {
		t.Fatal("resuming at an id whose successors expired must report a gap")
	} else {
		r.Close(s1)
	}
	s2, gap := r.Open("@alice.cc", "cc-1", "", frame.Filter{}, last, 0)
	if gap {
		t.Fatal("resuming at the newest id after the state was dropped reported a gap")
	}
	r.Emit(&Target{Handles: []string{"@alice.cc"}}, fr(frame.KindAgentAdvisory, "@carol.x", ""), []byte(`{}`))
	for _, id := range drain(s2) {
		for _, old := range ids {
			if id == old {
				t.Fatalf("id %s reused after the handle state was dropped", id)
			}
		}
	}
	r.Close(s2)
	// Disconnect frees the state too once nothing is retained.
	now = now.Add(2 * time.Minute)
	s3, _ := r.Open("@dave.x", "cc-1", "", frame.Filter{}, "", 0)
	_ = s3
	r.Disconnect("@dave.x")
	r.ExpireAll()
	if got := handles(); got != 0 {
		t.Fatalf("%d handle states left after disconnect and expiry, want 0", got)
	}
}
