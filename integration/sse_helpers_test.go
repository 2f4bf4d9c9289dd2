package integration

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sseItem is one item read from a Server-Sent Events stream: either a
// dispatched event (its id, event and data fields) or a comment line.
type sseItem struct {
	Comment   string // the comment text after ':' (leading space trimmed)
	IsComment bool
	ID        string
	Event     string
	Data      string // data lines joined with "\n"
}

// sseClient reads GET /stream: a reader goroutine parses the response body
// line by line and sends every event and comment on items, in order.
type sseClient struct {
	t      testing.TB
	resp   *http.Response
	items  chan sseItem
	done   chan struct{} // closed when the reader goroutine ends
	cancel context.CancelFunc
}

// sseDial sends GET path (e.g. "/stream?instrument=cc-1") with the token and
// the extra headers. On 200 it returns the client with its reader running
// and a nil body; otherwise a nil client and the status and error body.
func sseDial(t testing.TB, s *server, token, path string, header map[string]string) (*sseClient, int, []byte) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+path, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	// No client timeout: the response is long-lived. The dial is bounded by
	// the server being on loopback; the body by cancel.
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return nil, resp.StatusCode, body
	}
	c := &sseClient{t: t, resp: resp, items: make(chan sseItem, 10000), done: make(chan struct{}), cancel: cancel}
	go c.read()
	t.Cleanup(c.close)
	return c, resp.StatusCode, nil
}

// sseOpen opens a stream that must succeed, and waits for the server's
// opening comment, which is written after the stream is registered: frames
// submitted after sseOpen returns reach it.
func sseOpen(t testing.TB, s *server, token, path string, header map[string]string) *sseClient {
	t.Helper()
	c, code, body := sseDial(t, s, token, path, header)
	if c == nil {
		t.Fatalf("GET %s: status %d: %s", path, code, body)
	}
	if ct := c.resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	first := c.nextItem()
	if !first.IsComment {
		t.Fatalf("GET %s: first item is not the opening comment: %+v", path, first)
	}
	return c
}

func (c *sseClient) read() {
	defer close(c.done)
	defer close(c.items)
	br := bufio.NewReaderSize(c.resp.Body, 1<<16)
	var cur sseItem
	var data []string
	has := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return // EOF, cancelled, or the server closed the stream
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		switch {
		case line == "":
			if has {
				cur.Data = strings.Join(data, "\n")
				c.items <- cur
			}
			cur, data, has = sseItem{}, nil, false
		case strings.HasPrefix(line, ":"):
			c.items <- sseItem{IsComment: true, Comment: strings.TrimPrefix(line[1:], " ")}
		default:
			name, val, _ := strings.Cut(line, ":")
			val = strings.TrimPrefix(val, " ")
			has = true
			switch name {
			case "id":
				cur.ID = val
			case "event":
				cur.Event = val
			case "data":
				data = append(data, val)
			default:
				c.t.Errorf("SSE: unexpected field line %q", line)
			}
		}
	}
}

// close ends the request; the server sees the stream close.
func (c *sseClient) close() {
	c.cancel()
	c.resp.Body.Close()
	<-c.done
}

// nextItem returns the next event or comment within 10s.
func (c *sseClient) nextItem() sseItem {
	c.t.Helper()
	select {
	case it, ok := <-c.items:
		if !ok {
			c.t.Fatalf("SSE stream closed while waiting")
		}
		return it
	case <-time.After(10 * time.Second):
		c.t.Fatalf("no SSE item within 10s")
	}
	return sseItem{}
}

// next returns the next event, skipping comments.
func (c *sseClient) next() sseItem {
	c.t.Helper()
	for {
		if it := c.nextItem(); !it.IsComment {
			return it
		}
	}
}

// quiet asserts that no event (comments are fine) arrives within d.
func (c *sseClient) quiet(d time.Duration) {
	c.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case it, ok := <-c.items:
			if !ok {
				return
			}
			if !it.IsComment {
				c.t.Fatalf("unexpected SSE event: %+v", it)
			}
		case <-deadline:
			return
		}
	}
}
