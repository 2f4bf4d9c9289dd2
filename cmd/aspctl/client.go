package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/aspd/aspd/aspclient"
)

// requestTimeout bounds one API call (not export or listen, which stream).
const requestTimeout = 60 * time.Second

// apiError is an error answered by the server:
// {"error": {"code": "...", "message": "..."}}, decoded by aspclient.
type apiError = aspclient.Error

// api is what aspctl uses of aspclient's Client (agent API) and Admin
// (operator API): every call goes through one of them, so aspctl sends and
// decodes requests exactly as the Go client does.
type api interface {
	Do(ctx context.Context, method, path string, query url.Values, body, out any) error
	Open(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error)
}

// client calls one aspd API with one bearer token.
type client struct {
	server string // --server, for listen and error sentences
	token  string
	api    api
}

// agentClient is the client of the agent API, authenticated by --token.
func (a *app) agentClient() (*client, error) {
	tok, err := a.resolveToken()
	if err != nil {
		return nil, err
	}
	if tok == "" {
		return nil, usageErrorf("this command needs an agent token: --token, --token-file, ASPCTL_TOKEN or ASPCTL_TOKEN_FILE")
	}
	ac, err := aspclient.New(a.server, tok, aspclient.WithTimeout(requestTimeout))
	if err != nil {
		return nil, usageErrorf("--server %q: %v", a.server, err)
	}
	return &client{server: a.server, token: tok, api: ac}, nil
}

// adminClient is the client of the operator API, authenticated by the
// admin token.
func (a *app) adminClient() (*client, error) {
	tok, err := a.resolveAdminToken()
	if err != nil {
		return nil, err
	}
	ad, err := aspclient.NewAdmin(a.server, tok, aspclient.WithTimeout(requestTimeout))
	if err != nil {
		return nil, usageErrorf("--server %q: %v", a.server, err)
	}
	return &client{server: a.server, token: tok, api: ad}, nil
}

// resolveAdminToken picks the operator token, first found wins:
// --admin-token, --admin-token-file, ASPCTL_ADMIN_TOKEN,
// ASPCTL_ADMIN_TOKEN_FILE, ./aspd-data/admin.token. A token and a token file
// at the same level (both flags, or both variables) are a mistake.
func (a *app) resolveAdminToken() (string, error) {
	tok, err := pickToken("admin-token", "ASPCTL_ADMIN_TOKEN", a.adminToken, a.adminTokenFile, a.adminFromFlag, a.fileFromFlag)
	if tok != "" || err != nil {
		return tok, err
	}
	if _, err := os.Stat(defaultAdminTokenFile); err == nil {
		return readTokenFile(defaultAdminTokenFile, "the default admin token file ./"+defaultAdminTokenFile)
	}
	return "", usageErrorf("this command needs the operator token: --admin-token, --admin-token-file, ASPCTL_ADMIN_TOKEN or ASPCTL_ADMIN_TOKEN_FILE (./%s does not exist)", defaultAdminTokenFile)
}

// readTokenFile reads a token from the file at path, named by source for
// errors (the flag or variable and the path, never the contents); a file
// that cannot be read or holds nothing is a usage error.
func readTokenFile(path, source string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", usageErrorf("%s: cannot read the file: %v", source, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", usageErrorf("%s: the file is empty; write the token in it", source)
	}
	return tok, nil
}

// call sends one request with an optional JSON body and returns the JSON
// answer; an error status becomes an *apiError.
func (c *client) call(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	var raw json.RawMessage
	if err := c.api.Do(ctx, method, path, query, body, &raw); err != nil {
		return nil, explain(ctx, err)
	}
	return raw, nil
}

// open sends one request and returns the response of a successful status
// for the caller to read and close.
func (c *client) open(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	resp, err := c.api.Open(ctx, method, path, query, body)
	if err != nil {
		return nil, explain(ctx, err)
	}
	return resp, nil
}

// explain turns a request that got no answer into a sentence (reachError);
// answers of the server (*apiError) and interruptions stay as they are.
func explain(ctx context.Context, err error) error {
	var ue *url.Error
	if ctx.Err() == context.Canceled || !errors.As(err, &ue) {
		return err
	}
	server := ue.URL
	if u, perr := url.Parse(ue.URL); perr == nil {
		server = u.Scheme + "://" + u.Host
	}
	return reachError(server, ue.Err)
}

// printJSON writes a JSON document pretty-printed (two-space indent).
func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("the server answered something that is not JSON: %q", truncate(raw, 200))
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// show performs a call and prints its answer.
func (a *app) show(c *client, method, path string, query url.Values, body any) error {
	out, err := c.call(a.ctx, method, path, query, body)
	if err != nil {
		return err
	}
	if len(out) == 0 {
		return nil // 204 No Content: success says nothing
	}
	return printJSON(a.stdout, out)
}

// pageAll follows next_cursor through a paginated listing: page(cursor)
// fetches one page ("" = the first), and the items under key are merged
// into one document {key: [...]}.
func (a *app) pageAll(key string, page func(cursor string) ([]byte, error)) error {
	items := []json.RawMessage{}
	cursor := ""
	for {
		raw, err := page(cursor)
		if err != nil {
			return err
		}
		var p map[string]json.RawMessage
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("decoding a page: %w", err)
		}
		var batch []json.RawMessage
		if err := json.Unmarshal(p[key], &batch); err != nil {
			return fmt.Errorf("decoding a page's %s: %w", key, err)
		}
		items = append(items, batch...)
		var next string
		if c, ok := p["next_cursor"]; ok {
			if err := json.Unmarshal(c, &next); err != nil {
				return fmt.Errorf("decoding next_cursor: %w", err)
			}
		}
		if next == "" || len(batch) == 0 {
			break
		}
		if next == cursor {
			return errors.New("the server returned the same next_cursor twice")
		}
		cursor = next
	}
	out, err := json.Marshal(map[string][]json.RawMessage{key: items})
	if err != nil {
		return err
	}
	return printJSON(a.stdout, out)
}

// pathEscape escapes one path segment (a handle or a session id).
func pathEscape(s string) string { return url.PathEscape(s) }

// checkServer refuses a --server that is not an http or https URL with a
// host, before any request is made.
func checkServer(server string) error {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		hint := ""
		if err == nil && !strings.Contains(server, "://") {
			hint = fmt.Sprintf(" (did you mean --server http://%s?)", server)
		}
		return usageErrorf("--server %q is not an aspd address: give its URL with the scheme, e.g. --server http://127.0.0.1:8080, or set ASPCTL_SERVER%s", server, hint)
	}
	return nil
}

// reachErr is a request that got no answer from the server: the message
// says what went wrong and what to do.
type reachErr struct {
	msg string
	err error
}

func (e *reachErr) Error() string { return e.msg }
func (e *reachErr) Unwrap() error { return e.err }

// reachError turns a transport error of a request to server into a
// sentence.
func reachError(server string, err error) error {
	var dns *net.DNSError
	var ne net.Error
	var msg string
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		msg = fmt.Sprintf("nothing answers at %s (connection refused): is aspd running there? Start it, or point aspctl at it with --server URL (or ASPCTL_SERVER)", server)
	case errors.As(err, &dns):
		msg = fmt.Sprintf("cannot find the host %q of %s: check the address given by --server (or ASPCTL_SERVER)", dns.Name, server)
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		msg = fmt.Sprintf("aspd at %s did not answer in time: check that it is up and reachable from here", server)
	default:
		msg = fmt.Sprintf("cannot reach aspd at %s (%v): check --server (or ASPCTL_SERVER) and that aspd is running", server, err)
	}
	return &reachErr{msg: msg, err: err}
}
