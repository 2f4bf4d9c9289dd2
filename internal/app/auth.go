package app

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/replay"
	"github.com/aspd/aspd/store"
)

// HashToken returns the SHA-256 of a bearer token. Tokens are >= 256-bit
// random strings, so a fast hash is what protects them at rest; a slow KDF
// would only slow every request.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// NewToken returns a fresh agent token: 256 random bits, URL-safe.
func NewToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return "asp_" + base64.RawURLEncoding.EncodeToString(b)
}

// Unauthorized is the answer to a missing or invalid agent token.
func Unauthorized() *protocol.Error {
	return protocol.Errorf(http.StatusUnauthorized, protocol.CodeUnauthorized, "missing or invalid bearer token")
}

// Authenticate returns the handle of the agent that token belongs to, or
// 401 unauthorized. Answers are cached (token hash -> handle) until the
// agent's token is rotated or revoked or the agent deleted.
func (a *App) Authenticate(ctx context.Context, token string) (string, error) {
	hash := HashToken(token)
	if h, ok := a.auth.get(hash); ok {
		return h, nil
	}
	if strings.HasPrefix(token, chorusMCPTokenPrefix) {
		// A short-lived MCP token handed to a webhook agent (chorus.go);
		// not cached, since it expires.
		return a.authenticateChorusMCP(ctx, hash)
	}
	gen := a.auth.generation() // before the read: see putIf
	h, err := a.st.Authenticate(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return "", Unauthorized()
	}
	if err != nil {
		return "", err
	}
	a.auth.putIf(hash, h, gen)
	return h, nil
}

// errRevoked: the token no longer belongs to the handle it authenticated.
var errRevoked = errors.New("token revoked")

// stillValid re-checks, against the store and not the cache, that token
// still belongs to handle. Long-lived streams call it after registering: a
// rotation, revocation or deletion that committed between authentication and
// registration is caught here, and any later one finds the stream
// registered and closes it. It returns nil if the token is valid,
// errRevoked if the store says it is not, and the store's error if the
// store could not say (an outage: the token may well be valid).
func (a *App) stillValid(handle, token string) error {
	h, err := a.st.Authenticate(context.Background(), HashToken(token))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errRevoked
	case err != nil:
		return err
	case h != handle:
		return errRevoked
	}
	return nil
}

// cutOff ends everything a handle's old credentials opened: cached
// authentications, WebSocket connections and frame streams.
func (a *App) cutOff(handle, reason string) {
	a.auth.evict(handle)
	a.dropChorusMCP(handle)
	a.hub.Disconnect(handle, replay.CloseUnauthorized, reason)
	a.streams.Disconnect(handle)
	if a.node != nil {
		a.node.CutOff(handle, reason) // every other node does the same
	}
}

// authCache maps token hashes to handles so authenticated requests cost no
// database round trip. Rotation, revocation and deletion evict the handle's
// entries at once; on several nodes, the others evict on the cut-off's
// notification, and entries expire after clusterAuthTTL in case one was
// missed.
type authCache struct {
	mu       sync.RWMutex
	byHash   map[[32]byte]string
	byHandle map[string][][32]byte
	gen      uint64 // bumped by every eviction
	// ttl, when set (several nodes: cluster.go), bounds how long an entry
	// is trusted, in case another node's cut-off notification was missed.
	ttl time.Duration
	at  map[[32]byte]time.Time
}

func newAuthCache() *authCache {
	return &authCache{byHash: map[[32]byte]string{}, byHandle: map[string][][32]byte{}, at: map[[32]byte]time.Time{}}
}

func (c *authCache) get(hash []byte) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k := [32]byte(hash)
	h, ok := c.byHash[k]
	if ok && c.ttl > 0 && time.Since(c.at[k]) > c.ttl {
		return "", false
	}
	return h, ok
}

// generation identifies the cache's eviction history.
func (c *authCache) generation() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// putIf caches hash -> handle unless an eviction happened since gen was
// read: a lookup that raced a rotation must not put the old token back.
func (c *authCache) putIf(hash []byte, handle string, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if len(c.byHash) > 100_000 {
		clear(c.byHash)
		clear(c.byHandle)
		clear(c.at)
	}
	k := [32]byte(hash)
	c.byHash[k] = handle
	if c.ttl > 0 {
		c.at[k] = time.Now()
	}
	c.byHandle[handle] = append(c.byHandle[handle], k)
}

func (c *authCache) evict(handle string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, k := range c.byHandle[handle] {
		delete(c.byHash, k)
		delete(c.at, k)
	}
	delete(c.byHandle, handle)
}
