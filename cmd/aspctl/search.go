package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/aspd/aspd/protocol"
)

// searchCommand is `aspctl search`, the operator's transcript search
// (GET /admin/v1/search, docs/search.md).
var searchCommand = &command{
	name: "search",
	args: "QUERY... [--session ID] [--sender H] [--participant H] [--type T] [--since T] [--until T] [--limit N] [--cursor C] [--json]",
	desc: "search message text in every session: hits newest first, with snippets",
	run:  searchRun,
}

func searchRun(a *app, c *command, args []string) error {
	fs := a.flags(c)
	session := fs.String("session", "", "only this session's events")
	sender := fs.String("sender", "", "only events sent by this handle")
	participant := fs.String("participant", "", "only sessions this handle takes or took part in")
	typ := fs.String("type", "", "only events of this type (session.message)")
	since := fs.String("since", "", "only events created at or after T (RFC 3339 or epoch ms)")
	until := fs.String("until", "", "only events created before T (RFC 3339 or epoch ms)")
	limit := fs.Int("limit", 0, "hits per page, 1-100 (server default 20)")
	cursor := fs.String("cursor", "", "the next page: a previous answer's next_cursor")
	asJSON := fs.Bool("json", false, "print the server's JSON answer instead of the readable listing")
	pos, err := a.parse(fs, args, 1, -1)
	if err != nil {
		return err
	}
	q := url.Values{"q": {strings.Join(pos, " ")}}
	for name, v := range map[string]string{"session": *session, "sender": *sender, "participant": *participant,
		"type": *typ, "since": *since, "until": *until, "cursor": *cursor} {
		if v != "" {
			q.Set(name, v)
		}
	}
	if *limit != 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	cl, err := a.adminClient()
	if err != nil {
		return err
	}
	raw, err := cl.call(a.ctx, "GET", "/search", q, nil)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(a.stdout, raw)
	}
	var res protocol.SearchResults
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("decoding the search answer: %w", err)
	}
	writeSearchResults(a, res)
	return nil
}

// writeSearchResults prints hits readably: one header line per hit
// (session/sequence, time, sender, type), then its snippet with each
// match in [[double brackets]]; then how to get the next page.
func writeSearchResults(a *app, res protocol.SearchResults) {
	if len(res.Hits) == 0 {
		fmt.Fprintln(a.stdout, "no hits")
		return
	}
	for _, h := range res.Hits {
		fmt.Fprintf(a.stdout, "%s/%d  %s  %s  %s\n", h.SessionID, h.Sequence, h.CreatedAt, h.Sender, h.Type)
		var b strings.Builder
		for _, p := range h.Snippet {
			if p.Match {
				b.WriteString("[[" + p.Text + "]]")
			} else {
				b.WriteString(p.Text)
			}
		}
		fmt.Fprintf(a.stdout, "    %s\n", b.String())
	}
	if res.NextCursor != "" {
		fmt.Fprintf(a.stdout, "more hits: add --cursor %s\n", res.NextCursor)
	}
}
