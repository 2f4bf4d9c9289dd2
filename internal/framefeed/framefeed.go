// Package framefeed holds the live per-handle Server-Sent Events subscriptions
// of agent-channel frames: it expands a recipient scope against them at
// delivery time, emits each frame once per matching stream, and keeps a
// small, bounded retention so a re-opened stream can resume after
// Last-Event-ID. Nothing here is durable: frames on this path are ephemeral
// by design (draft "Agent-Channel Fan-Out" §8.3); durable frames ride in
// session messages instead.
package framefeed

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
)

// Config bounds retention and per-stream buffering.
type Config struct {
	RetainCount int           // frames kept per handle for Last-Event-ID resumption
	RetainAge   time.Duration // and for at most this long
	RetainBytes int64         // and at most this many frame bytes over all handles (0 = no byte bound)
	Buffer      int           // frames queued per stream before it is closed as too slow
}

// Delivery is one frame as emitted on a stream.
type Delivery struct {
	ID   string // SSE id: "<epoch>-<n>", n increasing per handle
	Kind string // SSE event name: the frame kind
	Data []byte // the frame, compact JSON
}

// Target says which streams a frame goes to, after the scope is authorised.
type Target struct {
	Handles          []string // handles whose streams are candidates
	InstrumentPrefix string   // with PrefixOnly: instrument must begin with this
	PrefixOnly       bool
	Instrument       string // with Exact: one stream
	Session          string
	Exact            bool
	Org              string // set for org: scopes (matches the org filter axis)
}

// Replayed is a retained frame due to a resuming stream, with its sender so
// that the caller can decide, at replay time, whether it may still be shown.
type Replayed struct {
	Delivery
	Sender string // the frame's sender_handle
}

// Subscription is one open stream.
type Subscription struct {
	Handle     string
	Instrument string
	Session    string
	Filter     frame.Filter
	Since      time.Time

	// Replay holds the retained frames after Last-Event-ID that this stream
	// would have received, oldest first, taken under the same lock that
	// registered the stream: they all precede anything on C. The caller
	// writes (the ones it still allows of) them before reading C. Replay is
	// not sent on C so that the caller can check each sender without
	// holding the registry's lock.
	Replay []Replayed

	C       chan Delivery // emitted frames, in order
	dropped chan struct{} // closed when the registry drops the stream (too slow)
	once    sync.Once
}

// Dropped is closed when the stream fell Buffer frames behind and was cut off.
func (s *Subscription) Dropped() <-chan struct{} { return s.dropped }

func (s *Subscription) matches(t *Target, fr *frame.Frame) bool {
	switch {
	case t.Exact && (s.Instrument != t.Instrument || s.Session != t.Session):
		return false
	case t.PrefixOnly && !strings.HasPrefix(s.Instrument, t.InstrumentPrefix):
		return false
	}
	return matchFilter(s.Filter, fr, t.Org)
}

// matchFilter applies the subscriber's filter (all clauses must match).
// The org axis depends on the delivery, not on the frame: an org clause
// matches frames delivered through an org: scope of that owner. The tool
// axis names a tool class no frame member carries, so it matches nothing: a
// clause that cannot be evaluated narrows, never widens (draft §9).
func matchFilter(f frame.Filter, fr *frame.Frame, org string) bool {
	for _, c := range f.Clauses() {
		var ok bool
		switch c.Axis {
		case frame.AxisKind:
			ok = fr.Kind == c.Value
		case frame.AxisSender:
			ok = fr.SenderHandle == c.Value
		case frame.AxisContentType:
			ok = fr.ContentType != "" && fr.ContentType == c.Value
		case frame.AxisOrg:
			ok = org != "" && org == c.Value
		}
		if !ok {
			return false
		}
	}
	return true
}

type retained struct {
	n      uint64
	at     time.Time
	target *Target
	frame  frame.Frame // only the fields filters read: kind, sender, content type
	d      Delivery
}

type handleState struct {
	subs   map[*Subscription]struct{}
	base   uint64 // ids of this state start after base (see Registry.issued)
	next   uint64 // the last id assigned
	recent []retained
}

// Registry is every open stream of this node.
type Registry struct {
	cfg   Config
	epoch string // distinguishes ids across restarts
	now   func() time.Time

	mu       sync.Mutex
	handles  map[string]*handleState
	retained int64 // bytes of retained frames, bounded by RetainBytes
	// issued is the highest id assigned to any handle. A handle's state is
	// dropped once it has no open stream and no retained frame (release);
	// a later state for it starts above issued, so ids never repeat.
	issued uint64
}

// New returns an empty registry.
func New(cfg Config) *Registry {
	return &Registry{cfg: cfg, epoch: strconv.FormatInt(time.Now().UnixNano()/1e6, 36), now: time.Now, handles: map[string]*handleState{}}
}

func (r *Registry) state(h string) *handleState {
	st, ok := r.handles[h]
	if !ok {
		st = &handleState{subs: map[*Subscription]struct{}{}, base: r.issued, next: r.issued}
		r.handles[h] = st
	}
	return st
}

// release drops h's state when nothing needs it: no open stream and no
// retained frame. Called with r.mu held, after expire.
func (r *Registry) release(h string, st *handleState) {
	if len(st.subs) == 0 && len(st.recent) == 0 {
		delete(r.handles, h)
	}
}

// Open registers a stream. If lastEventID is set, the frames retained after
// it that this stream would have received (at most Buffer of them) are put
// in sub.Replay, for the caller to write before anything from sub.C; gap reports
// that the id could not be honoured (unknown, from before a restart, or aged
// out of retention), which the caller must tell the subscriber.
//
// A handle may hold at most maxStreams open streams (0 = no limit); beyond
// that Open returns a nil subscription, checked under the same lock that
// registers the stream, so concurrent opens cannot exceed it.
func (r *Registry) Open(handle, instrument, session string, f frame.Filter, lastEventID string, maxStreams int) (sub *Subscription, gap bool) {
	sub = &Subscription{Handle: handle, Instrument: instrument, Session: session, Filter: f, Since: r.now(),
		C: make(chan Delivery, r.cfg.Buffer), dropped: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(handle)
	if maxStreams > 0 && len(st.subs) >= maxStreams {
		return nil, false
	}
	r.expire(st)
	if lastEventID != "" {
		n, ok := r.parseID(lastEventID)
		start := -1
		if ok {
			for i, rt := range st.recent {
				if rt.n > n {
					start = i
					break
				}
			}
			if start < 0 {
				start = len(st.recent)
			}
			// Clean resumption needs the frame after n to be retained or
			// not yet emitted (st.next is the last id assigned), and n to
			// be from this state: an id below base was assigned before the
			// handle's previous state was dropped, with frames after it
			// that are gone. (base itself was the highest id issued when
			// the state was made: nothing after it was missed.)
			clean := n >= st.base && n <= st.next && (n == st.next || (len(st.recent) > 0 && n+1 >= st.recent[0].n))
			ok = clean
		}
		gap = !ok
		if !ok {
			start = 0 // best effort: everything still retained
		}
		for _, rt := range st.recent[start:] {
			if sub.matches(rt.target, &rt.frame) && len(sub.Replay) < r.cfg.Buffer {
				sub.Replay = append(sub.Replay, Replayed{Delivery: rt.d, Sender: rt.frame.SenderHandle})
			}
		}
	}
	st.subs[sub] = struct{}{}
	return sub, gap
}

func (r *Registry) parseID(id string) (uint64, bool) {
	epoch, num, ok := strings.Cut(id, "-")
	if !ok || epoch != r.epoch {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return n, err == nil
}

// expire drops retained frames beyond the count and age limits.
func (r *Registry) expire(st *handleState) {
	cut := 0
	oldest := r.now().Add(-r.cfg.RetainAge)
	for cut < len(st.recent) && (len(st.recent)-cut > r.cfg.RetainCount || st.recent[cut].at.Before(oldest)) {
		cut++
	}
	if cut > 0 {
		for _, rt := range st.recent[:cut] {
			r.retained -= int64(len(rt.d.Data))
		}
		st.recent = append(st.recent[:0:0], st.recent[cut:]...)
	}
}

// ExpireAll drops retained frames past the count and age limits on every
// handle, including handles nobody touches any more. Run it periodically.
func (r *Registry) ExpireAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for h, st := range r.handles {
		r.expire(st)
		r.release(h, st)
	}
}

// RetainedBytes is the size of all retained frames.
func (r *Registry) RetainedBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retained
}

// Close unregisters a stream.
func (r *Registry) Close(sub *Subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.handles[sub.Handle]; ok {
		delete(st.subs, sub)
		r.expire(st)
		r.release(sub.Handle, st)
	}
}

// Disconnect ends every open stream of handle (its token was rotated or
// revoked, or the agent deleted): each stream's Dropped channel is closed
// and it receives nothing further.
func (r *Registry) Disconnect(handle string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.handles[handle]; ok {
		for s := range st.subs {
			s.once.Do(func() { close(s.dropped) })
			delete(st.subs, s)
		}
		r.expire(st)
		r.release(handle, st)
	}
}

// Count returns how many streams t reaches for fr, without emitting.
func (r *Registry) Count(t *Target, fr *frame.Frame) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, h := range t.Handles {
		if st, ok := r.handles[h]; ok {
			for s := range st.subs {
				if s.matches(t, fr) {
					n++
				}
			}
		}
	}
	return n
}

// Emit delivers fr (whose compact JSON is data) to every stream t reaches,
// once each, and returns how many. It never blocks: a stream whose buffer is
// full is dropped (the subscriber re-opens with Last-Event-ID).
func (r *Registry) Emit(t *Target, fr *frame.Frame, data []byte) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	now := r.now()
	for _, h := range t.Handles {
		st := r.state(h)
		st.next++
		r.issued = max(r.issued, st.next)
		d := Delivery{ID: fmt.Sprintf("%s-%d", r.epoch, st.next), Kind: fr.Kind, Data: data}
		r.expire(st)
		if r.cfg.RetainCount > 0 && (r.cfg.RetainBytes <= 0 || r.retained+int64(len(data)) <= r.cfg.RetainBytes) {
			// Retention is best effort within its budget: over it, a frame
			// is still delivered live, only not kept for resumption.
			st.recent = append(st.recent, retained{n: st.next, at: now, target: t, d: d,
				frame: frame.Frame{Kind: fr.Kind, SenderHandle: fr.SenderHandle, ContentType: fr.ContentType}})
			r.retained += int64(len(data))
			r.expire(st)
		}
		for s := range st.subs {
			if !s.matches(t, fr) {
				continue
			}
			select {
			case s.C <- d:
				n++
			default:
				s.once.Do(func() { close(s.dropped) })
				delete(st.subs, s)
			}
		}
		r.release(h, st)
	}
	return n
}

// Roster lists handle's own open streams, oldest first.
func (r *Registry) Roster(handle string) []protocol.StreamInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []protocol.StreamInfo{}
	if st, ok := r.handles[handle]; ok {
		for s := range st.subs {
			out = append(out, protocol.StreamInfo{Instrument: s.Instrument, Session: s.Session, Since: s.Since.UnixMilli()})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Since != out[j].Since {
			return out[i].Since < out[j].Since
		}
		return out[i].Instrument+out[i].Session < out[j].Instrument+out[j].Session
	})
	return out
}

// Streams returns how many streams handle has open.
func (r *Registry) Streams(handle string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.handles[handle]; ok {
		return len(st.subs)
	}
	return 0
}
