package app

import (
	"context"
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

// Action names an action that a per-agent rate limit applies to.
type Action int

// The rate-limited actions.
const (
	ActCreateSession Action = iota + 1 // a contact attempt
	ActInvite                          // a contact attempt
	ActReopen                          // a contact attempt
	ActSendMessage                     // a message
	ActSubmitFrame                     // a frame submission
)

// admission marks a context whose request was admitted early (Admit).
type admission struct {
	caller string
	act    Action
}

type admissionKey struct{}

// Admit applies act's rate limit to caller now and returns a context that
// carries the admission: the action's method, given that context, does not
// take a second token. Every rate-limited method admits by itself; an
// adapter calls Admit only to refuse an over-rate caller before it reads
// the request (HTTP: after authentication and the query string, before the
// path and the body, the documented order of checks).
func (a *App) Admit(ctx context.Context, caller string, act Action) (context.Context, error) {
	if err := a.take(caller, act); err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, admissionKey{}, admission{caller, act}), nil
}

// admit applies act's rate limit to caller unless ctx was admitted for it.
func (a *App) admit(ctx context.Context, caller string, act Action) error {
	if adm, ok := ctx.Value(admissionKey{}).(admission); ok && adm == (admission{caller, act}) {
		return nil
	}
	return a.take(caller, act)
}

// take takes a token from act's bucket for caller, or refuses with 429
// naming what is limited. An unconfigured limit admits everything.
func (a *App) take(caller string, act Action) error {
	var l *rateLimiter
	var what string
	switch act {
	case ActCreateSession, ActInvite, ActReopen:
		l, what = a.contacts, "rate limit for contact attempts is %g per second"
	case ActSendMessage:
		l, what = a.messages, "rate limit for messages is %g per second"
	case ActSubmitFrame:
		l, what = a.frames, "frame submission rate limit is %g per second"
	}
	if l == nil {
		return nil
	}
	if wait, ok := l.allow(caller); !ok {
		return rateLimited(wait, what, l.rate)
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
