package app

import (
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/aspd/aspd/protocol"
)

// RetryError is a refusal that the caller may retry after a while: 429
// rate_limited. Adapters tell the caller when (HTTP: Retry-After).
type RetryError struct {
	Err   *protocol.Error
	After time.Duration
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfterSeconds is After in whole seconds, rounded up.
func (e *RetryError) RetryAfterSeconds() int { return int(math.Ceil(e.After.Seconds())) }

func rateLimited(after time.Duration, format string, args ...any) *RetryError {
	return &RetryError{Err: protocol.Errorf(http.StatusTooManyRequests, protocol.CodeRateLimited, format, args...), After: after}
}

// admit takes a token from l for caller, or refuses with 429 naming what is
// limited. A nil limiter admits everything.
func admit(l *rateLimiter, caller, what string) error {
	if l == nil {
		return nil
	}
	if wait, ok := l.allow(caller); !ok {
		return rateLimited(wait, "rate limit for %s is %g per second", what, l.rate)
	}
	return nil
}

// rateLimiter is a token bucket per sender.
type rateLimiter struct {
	rate  float64
	burst float64
	mu    sync.Mutex
	b     map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newRateLimiter(rate float64, burst int) *rateLimiter {
	return &rateLimiter{rate: rate, burst: float64(burst), b: map[string]*bucket{}}
}

// allow takes a token for key, or says how long until one is available.
func (l *rateLimiter) allow(key string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	b, ok := l.b[key]
	if !ok {
		if len(l.b) > 100_000 {
			clear(l.b)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.b[key] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
}
