package store

import "sync"

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
	mu sync.Mutex
	m  map[string]*members
}

func newMemberCache() *memberCache { return &memberCache{m: map[string]*members{}} }

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
	c.mu.Unlock()
}
