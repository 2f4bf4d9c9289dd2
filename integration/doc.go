// Package integration holds aspd's end-to-end tests: each test builds and
// starts a real aspd process on a loopback port, on both store backends,
// and speaks HTTP and WebSocket to it like any client would, validating every
// response body and every delivered event against the ASP JSON schemas in
// protocol/schemas (copied unchanged, Apache-2.0, see the LICENSE there).
package integration
