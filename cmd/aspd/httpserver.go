package main

import (
	"net/http"
)

// newHTTPServer returns the HTTP server for handler with the per-connection
// bounds of cfg.
//
// ReadTimeout (--http-read-timeout) bounds reading one whole request,
// headers and body, so that a client trickling a body cannot hold a
// connection, and a file descriptor, for ever: when it expires the body read
// fails and the connection is closed. It bounds reading the request only.
// net/http lifts the connection's read deadline once the request has been
// read (when it starts watching for the client going away: at once for a
// request without a body, else when the body has been read to the end), and
// a hijacked connection (WebSocket /connect) gets none. So long-lived
// responses (SSE /stream, a streamed export) and WebSockets are not cut by
// it; TestSlowHTTPClientsAreCut checks both.
//
// There is no server-wide write timeout: it would cut every stream and long
// export after that time. Streams bound each write instead
// (--ws-write-timeout, and the SSE write deadline).
func newHTTPServer(cfg httpConfig, handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadTimeout:       cfg.readTimeout,
		ReadHeaderTimeout: cfg.readHeaderTimeout,
		IdleTimeout:       cfg.idleTimeout,
		MaxHeaderBytes:    cfg.maxHeaderBytes,
	}
}
