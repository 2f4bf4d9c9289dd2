package store

import (
	"sync"
	"time"
)

// The message path reads each session's participants to check the sender
// and to compute who hears of the message. Participants change rarely
// (joins, leaves, invitations, presence) and messages often, so the store
// keeps each session's participants in memory, versioned by the session
// row's members_version. Every write of a participant row bumps that
// version in the same transaction (sessionTx.save), so a transaction that
// holds the session's lock and reads members_version equal to a cached
// snapshot's knows the snapshot is the participants table as of its lock.
// Another node's change, or this node's, shows up as a different version
// and the participants are read again. Nothing else invalidates an entry,
// and nothing but the version makes it valid: a stale entry costs a read,
// never a wrong answer.

// memberCacheSize bounds the sessions whose participants are kept. When it
// is full an arbitrary entry makes room: the cost is one read of that
// session's participants on its next message.
const memberCacheSize = 16384

// members is one session's participants as of one members_version. It is
// never changed once cached: sessionTx shares its map until it needs to
// change a participant (sessionTx.participant copies it first).
type members struct {
	version int64
	parts   map[string]*participant
	order   []string
}

// memberCache holds members by session id.
type memberCache struct {
	mu   sync.Mutex
	m    map[string]*members
	rows map[string]sessionRow
}

func newMemberCache() *memberCache {
	return &memberCache{m: map[string]*members{}, rows: map[string]sessionRow{}}
}

// has reports whether id has members cached, of any version.
func (c *memberCache) has(id string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id] != nil
}

// get returns id's members if they are of version v.
func (c *memberCache) get(id string, v int64) *members {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[id]; e != nil && e.version == v {
		return e
	}
	return nil
}

// put caches e for id unless a newer version is cached (versions only grow).
func (c *memberCache) put(id string, e *members) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[id]; old != nil && old.version >= e.version {
		return
	}
	if len(c.m) >= memberCacheSize {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[id] = e
}

// forget drops id (a purged session).
func (c *memberCache) forget(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.m, id)
	delete(c.rows, id)
	c.mu.Unlock()
}

// The session rows the message path last wrote, for appendCached
// (fastappend.go): with them and the members of their version, a lone
// message needs no lock read. Like the members, a row is only a guess: the
// append that uses it checks last_seq, members_version and state in its
// own UPDATE, and a wrong guess costs a round trip, never a wrong answer.

// rowMissPause: after a guess failed (another node wrote the session: this
// node's other paths drop the row instead), the session's messages take
// the locking path for this long, doubled after every further failed
// guess up to rowMissPauseMax, and back to no pause after a guess that
// held. Two nodes writing one session then lose a round trip about once
// per pause, not once per message: with a pause of one second, two nodes
// under the chat load (bench/run.sh chat-2nodes) failed 1,690 guesses and
// hit 1,000 in ten seconds.
const (
	rowMissPause    = 30 * time.Second
	rowMissPauseMax = 5 * time.Minute
)

// sessionRow is the part of a session row a guessed append reads: its
// state (the rule accepts only an active session), last sequence and
// members_version, the three its UPDATE checks.
type sessionRow struct {
	state          string
	lastSeq        int64
	membersVersion int64
	pausedUntil    int64 // unix ms; set by rowMissed
	misses         int   // failed guesses since the last that held
}

// putRow records t's row as its transaction leaves it; guessed says that
// a guess on the row held (appendCached), which ends any pause.
func (c *memberCache) putRow(t *sessionTx, guessed bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := sessionRow{state: t.state, lastSeq: t.lastSeq, membersVersion: t.membersVersion}
	if old, ok := c.rows[t.id]; ok {
		if !guessed {
			r.pausedUntil, r.misses = old.pausedUntil, old.misses
		}
	} else if len(c.rows) >= memberCacheSize {
		for k := range c.rows {
			delete(c.rows, k)
			break
		}
	}
	c.rows[t.id] = r
}

// rowTx returns a sessionTx for id built from its cached row and the
// members of the row's version, or nil when either is missing or the
// session is paused. It holds what appending a message reads (not the
// topic, creator or end time, which no message needs).
func (c *memberCache) rowTx(id string, now int64) *sessionTx {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.rows[id]
	if !ok || now < r.pausedUntil {
		return nil
	}
	m := c.m[id]
	if m == nil || m.version != r.membersVersion {
		return nil
	}
	return &sessionTx{now: now, id: id, state: r.state, lastSeq: r.lastSeq, membersVersion: r.membersVersion,
		parts: m.parts, order: m.order, sharedParts: true}
}

// rowMissed pauses id's guesses after one failed, longer after each.
func (c *memberCache) rowMissed(id string, now int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.rows[id]; ok {
		pause := rowMissPause << min(r.misses, 10)
		r.pausedUntil = now + min(pause, rowMissPauseMax).Milliseconds()
		r.misses++
		c.rows[id] = r
	}
}

// forgetRows drops the rows of ids, which a path other than the message
// path is about to change (its own change would make the next guess fail).
func (c *memberCache) forgetRows(ids []string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		delete(c.rows, id)
	}
}
