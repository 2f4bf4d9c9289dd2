package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// runFunc is the implementation of a command.
type runFunc func(a *app, c *command, args []string) error

// request is one API call built from a command's positional arguments.
type request struct {
	method string
	path   string
	body   any
}

// adminCommands are the operator commands, in usage order.
var adminCommands = []*command{
	{name: "agent create", args: "HANDLE [--policy open|allowlist] [--allow ENTRY,...] [--roles ROLE,...]",
		desc: "create an agent; prints it with its token (shown only once)", run: agentCreate},
	{name: "agent list", args: "[--owner OWNER]", desc: "list agents, optionally those of one owner", run: agentList},
	{name: "agent get", args: "HANDLE", desc: "show an agent", run: adminCall(1, 1, func(p []string) request {
		return request{"GET", agentPath(p[0], ""), nil}
	})},
	{name: "agent delete", args: "HANDLE", desc: "delete an agent (it leaves its sessions; its connections close)", run: adminCall(1, 1, func(p []string) request {
		return request{"DELETE", agentPath(p[0], ""), nil}
	})},
	{name: "agent policy", args: "HANDLE open|allowlist", desc: "set an agent's inbound policy", run: agentPolicy},
	{name: "agent allow", args: "HANDLE ENTRY...", desc: "add allowlist entries (handles or @owner.* globs)", run: adminCall(2, -1, func(p []string) request {
		return request{"POST", agentPath(p[0], "/allowlist"), map[string][]string{"entries": splitList(p[1:]...)}}
	})},
	{name: "agent disallow", args: "HANDLE ENTRY...", desc: "remove allowlist entries", run: adminCall(2, -1, func(p []string) request {
		return request{"DELETE", agentPath(p[0], "/allowlist"), map[string][]string{"entries": splitList(p[1:]...)}}
	})},
	{name: "agent allowlist", args: "HANDLE [ENTRY...]", desc: "replace the allowlist (no entries: empty it)", run: adminCall(1, -1, func(p []string) request {
		return request{"PUT", agentPath(p[0], "/allowlist"), map[string][]string{"entries": splitList(p[1:]...)}}
	})},
	{name: "agent roles", args: "HANDLE [ROLE...]", desc: "replace an agent's roles (no roles: clear them)", run: adminCall(1, -1, func(p []string) request {
		return request{"PUT", agentPath(p[0], "/roles"), map[string][]string{"roles": splitList(p[1:]...)}}
	})},
	{name: "agent block", args: "HANDLE BLOCKED", desc: "make HANDLE block BLOCKED (BLOCKED leaves their shared sessions)", run: adminCall(2, 2, func(p []string) request {
		return request{"POST", agentPath(p[0], "/blocks"), map[string]string{"handle": p[1]}}
	})},
	{name: "agent unblock", args: "HANDLE BLOCKED", desc: "remove HANDLE's block of BLOCKED", run: adminCall(2, 2, func(p []string) request {
		return request{"DELETE", agentPath(p[0], "/blocks/"+pathEscape(p[1])), nil}
	})},
	{name: "agent rotate-token", args: "HANDLE", desc: "issue a new token (printed once); the old one stops working", run: adminCall(1, 1, func(p []string) request {
		return request{"POST", agentPath(p[0], "/token"), struct{}{}}
	})},
	{name: "agent revoke-token", args: "HANDLE", desc: "revoke an agent's token; its connections close", run: adminCall(1, 1, func(p []string) request {
		return request{"DELETE", agentPath(p[0], "/token"), nil}
	})},
	{name: "sessions list", args: "[--participant H] [--state active|ended] [--since T] [--until T] [--limit N] [--all]",
		desc: "list sessions, newest first (--all follows next_cursor)", run: sessionsList},
	{name: "sessions get", args: "ID", desc: "show a session and its participants", run: adminCall(1, 1, func(p []string) request {
		return request{"GET", "/sessions/" + pathEscape(p[0]), nil}
	})},
	{name: "sessions events", args: "ID [--after N] [--limit N] [--all]", desc: "a session's complete, unfiltered event log", run: sessionsEvents},
	{name: "export", args: "[--session ID | --participant H --state S --since T --until T] [-o FILE]",
		desc: "export events as JSON Lines (streamed; stdout by default)", run: export},
	searchCommand,
}

func agentPath(handle, suffix string) string {
	return "/agents/" + pathEscape(handle) + suffix
}

// adminCall is an operator command without flags taking minArgs..maxArgs
// positional arguments (maxArgs < 0: any number) and making one call.
func adminCall(minArgs, maxArgs int, build func(pos []string) request) runFunc {
	return oneCall((*app).adminClient, minArgs, maxArgs, build)
}

// oneCall is a command without flags that makes one call with the client
// that newClient returns.
func oneCall(newClient func(*app) (*client, error), minArgs, maxArgs int, build func(pos []string) request) runFunc {
	return func(a *app, c *command, args []string) error {
		pos, err := a.parse(a.flags(c), args, minArgs, maxArgs)
		if err != nil {
			return err
		}
		cl, err := newClient(a)
		if err != nil {
			return err
		}
		r := build(pos)
		return a.show(cl, r.method, r.path, nil, r.body)
	}
}

func agentCreate(a *app, c *command, args []string) error {
	fs := a.flags(c)
	policy := fs.String("policy", "", "inbound policy: open or allowlist (server default: allowlist)")
	allow := fs.String("allow", "", "comma-separated allowlist entries: handles and @owner.* globs")
	roles := fs.String("roles", "", "comma-separated roles")
	pos, err := a.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if err := checkPolicy(*policy, true); err != nil {
		return err
	}
	cl, err := a.adminClient()
	if err != nil {
		return err
	}
	body := map[string]any{"handle": pos[0], "allowlist": splitList(*allow), "roles": splitList(*roles)}
	if *policy != "" {
		body["inbound_policy"] = *policy
	}
	if err := a.show(cl, "POST", "/agents", nil, body); err != nil {
		return err
	}
	fmt.Fprintln(a.stderr, "aspctl: the token is shown only once; store it now")
	return nil
}

func checkPolicy(p string, emptyOK bool) error {
	if p == "open" || p == "allowlist" || p == "" && emptyOK {
		return nil
	}
	return usageErrorf("policy must be open or allowlist, not %q", p)
}

func agentList(a *app, c *command, args []string) error {
	fs := a.flags(c)
	owner := fs.String("owner", "", "only agents of this owner (acme for @acme.*)")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	cl, err := a.adminClient()
	if err != nil {
		return err
	}
	q := url.Values{}
	if o := strings.TrimSuffix(strings.TrimPrefix(*owner, "@"), ".*"); o != "" {
		q.Set("owner", o)
	}
	return a.show(cl, "GET", "/agents", q, nil)
}

func agentPolicy(a *app, c *command, args []string) error {
	pos, err := a.parse(a.flags(c), args, 2, 2)
	if err != nil {
		return err
	}
	if err := checkPolicy(pos[1], false); err != nil {
		return err
	}
	cl, err := a.adminClient()
	if err != nil {
		return err
	}
	return a.show(cl, "PUT", agentPath(pos[0], "/policy"), nil, map[string]string{"inbound_policy": pos[1]})
}

// sessionFilters are the listing filters shared by sessions list and export.
type sessionFilters struct {
	participant, state, since, until *string
}

func addSessionFilters(fs interface {
	String(name, value, usage string) *string
}) sessionFilters {
	return sessionFilters{
		participant: fs.String("participant", "", "only sessions this handle takes or took part in"),
		state:       fs.String("state", "", "only active or ended sessions"),
		since:       fs.String("since", "", "only sessions created at or after T (epoch ms or RFC 3339)"),
		until:       fs.String("until", "", "only sessions created before T (epoch ms or RFC 3339)"),
	}
}

func (f sessionFilters) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("participant", *f.participant)
	set("state", *f.state)
	set("since", *f.since)
	set("until", *f.until)
	return q
}

func sessionsList(a *app, c *command, args []string) error {
	fs := a.flags(c)
	filters := addSessionFilters(fs)
	limit := fs.Int("limit", 0, "sessions per page, 1-1000 (server default 100)")
	all := fs.Bool("all", false, "follow next_cursor and print every matching session")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	cl, err := a.adminClient()
	if err != nil {
		return err
	}
	return a.listSessions(cl, filters.query(), *limit, *all)
}

// listSessions prints one page of a session listing, or with all every page
// merged; the cursor of session listings is passed back as before=.
func (a *app) listSessions(cl *client, q url.Values, limit int, all bool) error {
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if !all {
		return a.show(cl, "GET", "/sessions", q, nil)
	}
	return a.pageAll("sessions", func(cursor string) ([]byte, error) {
		if cursor != "" {
			q.Set("before", cursor)
		}
		return cl.call(a.ctx, "GET", "/sessions", q, nil)
	})
}

// sessionsEvents is the operator's unfiltered event log of a session.
var sessionsEvents = eventsCommand((*app).adminClient)

// eventsCommand reads a session's events with the client newClient returns:
// the operator's (unfiltered log) or the agent's (eligible events only).
func eventsCommand(newClient func(*app) (*client, error)) runFunc {
	return func(a *app, c *command, args []string) error {
		fs := a.flags(c)
		after := fs.Int64("after", 0, "only events after this sequence")
		limit := fs.Int("limit", 0, "events per page, 1-1000 (server default 100)")
		all := fs.Bool("all", false, "follow next_cursor and print every event")
		pos, err := a.parse(fs, args, 1, 1)
		if err != nil {
			return err
		}
		cl, err := newClient(a)
		if err != nil {
			return err
		}
		return a.listEvents(cl, pos[0], *after, *limit, *all)
	}
}

// listEvents prints a page of GET /sessions/{id}/events, or with all every
// page merged; next_cursor is passed back as after_sequence.
func (a *app) listEvents(cl *client, id string, after int64, limit int, all bool) error {
	q := url.Values{}
	if after != 0 {
		q.Set("after_sequence", strconv.FormatInt(after, 10))
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/sessions/" + pathEscape(id) + "/events"
	if !all {
		return a.show(cl, "GET", path, q, nil)
	}
	return a.pageAll("events", func(cursor string) ([]byte, error) {
		if cursor != "" {
			q.Set("after_sequence", cursor)
		}
		return cl.call(a.ctx, "GET", path, q, nil)
	})
}

func export(a *app, c *command, args []string) error {
	fs := a.flags(c)
	session := fs.String("session", "", "export this one session")
	filters := addSessionFilters(fs)
	out := fs.String("o", "", "write to FILE (mode 0600) instead of stdout")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	q := filters.query()
	if *session != "" {
		if len(q) > 0 {
			return usageErrorf("--session cannot be combined with --participant, --state, --since or --until")
		}
		q.Set("session", *session)
	}
	cl, err := a.adminClient()
	if err != nil {
		return err
	}
	resp, err := cl.open(a.ctx, "GET", "/export", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := a.writeExport(resp.Body, *out); err != nil {
		return err
	}
	// The server reports the export's outcome in a trailer, readable once
	// the body has been consumed.
	if st := resp.Trailer.Get("Aspd-Export-Status"); st != "complete" {
		return fmt.Errorf("export incomplete: server reported %q after %s events (see the server log)", st, resp.Trailer.Get("Aspd-Export-Events"))
	}
	return nil
}

// writeExport copies the JSON Lines stream to stdout or to a file. The
// server cannot change the status once streaming, so a stream that stops in
// the middle of a line is reported as truncated.
func (a *app) writeExport(r io.Reader, path string) (err error) {
	w := a.stdout
	if path != "" {
		f, ferr := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if ferr != nil {
			return ferr
		}
		defer func() {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}()
		w = f
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	tail := &lastByte{w: bw}
	if _, err := io.Copy(tail, r); err != nil {
		return fmt.Errorf("export interrupted: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if tail.n > 0 && tail.last != '\n' {
		return errors.New("export truncated: the stream ended in the middle of a line (see the server log)")
	}
	return nil
}

// lastByte is a writer that remembers the last byte written.
type lastByte struct {
	w    io.Writer
	n    int64
	last byte
}

func (l *lastByte) Write(p []byte) (int, error) {
	if len(p) > 0 {
		l.last = p[len(p)-1]
	}
	n, err := l.w.Write(p)
	l.n += int64(n)
	return n, err
}
