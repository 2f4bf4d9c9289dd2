// Package protocol holds the ASP wire types, identifiers and request
// validation. It performs no I/O: everything here is a pure function of its
// input, so the server, the store and the tests share one definition of what
// is valid on the wire.
package protocol
