package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
)

// operatorCommands manage named operator tokens and read the audit log
// (docs/operators.md "Operator tokens", "Audit log").
var operatorCommands = []*command{
	{name: "operator-token create", args: "NAME [--scope read|admin]",
		desc: "create a named operator token (default scope read); prints it once", run: operatorTokenCreate},
	{name: "operator-token list", desc: "list the named operator tokens (never their secrets)", run: adminCall(0, 0, func([]string) request {
		return request{"GET", "/operator-tokens", nil}
	})},
	{name: "operator-token rotate", args: "NAME", desc: "issue a new secret for a named token (printed once); the old one stops working", run: operatorTokenRotate},
	{name: "operator-token revoke", args: "NAME", desc: "revoke a named operator token; it stops working at once", run: adminCall(1, 1, func(p []string) request {
		return request{"DELETE", "/operator-tokens/" + pathEscape(p[0]), nil}
	})},
	{name: "whoami", desc: "the operator token in use: its name and scope", run: adminCall(0, 0, func([]string) request {
		return request{"GET", "/whoami", nil}
	})},
	{name: "audit", args: "[--actor NAME] [--action A] [--target T] [--limit N] [--before ID] [--all]",
		desc: "the audit log of operator changes, newest first (--all follows next_before)", run: auditList},
}

func operatorTokenCreate(a *app, c *command, args []string) error {
	fs := a.flags(c)
	scope := fs.String("scope", "read", "read (queries and the console) or admin (everything)")
	pos, err := a.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *scope != "read" && *scope != "admin" {
		return usageErrorf("--scope must be read or admin, not %q", *scope)
	}
	cl, err := a.adminClient()
	if err != nil {
		return err
	}
	if err := a.show(cl, "POST", "/operator-tokens", nil, map[string]string{"name": pos[0], "scope": *scope}); err != nil {
		return err
	}
	fmt.Fprintln(a.stderr, "aspctl: the token is shown only once; store it now")
	return nil
}

func operatorTokenRotate(a *app, c *command, args []string) error {
	if err := adminCall(1, 1, func(p []string) request {
		return request{"POST", "/operator-tokens/" + pathEscape(p[0]) + "/rotate", struct{}{}}
	})(a, c, args); err != nil {
		return err
	}
	fmt.Fprintln(a.stderr, "aspctl: the token is shown only once; store it now")
	return nil
}

func auditList(a *app, c *command, args []string) error {
	fs := a.flags(c)
	actor := fs.String("actor", "", "only changes made with this token name (bootstrap: the --admin-token)")
	action := fs.String("action", "", "only this action (agent.delete, operator_token.create, ...)")
	target := fs.String("target", "", "only changes to this target (a handle, a session id, a token name)")
	limit := fs.Int("limit", 0, "entries per page, 1-500 (server default 50)")
	before := fs.Int64("before", 0, "only entries older than this id (a page's next_before)")
	all := fs.Bool("all", false, "follow next_before and print every matching entry")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]string{"actor": *actor, "action": *action, "target": *target} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *limit != 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	if *before != 0 {
		q.Set("before", strconv.FormatInt(*before, 10))
	}
	cl, err := a.adminClient()
	if err != nil {
		return err
	}
	if !*all {
		return a.show(cl, "GET", "/audit", q, nil)
	}
	items := []json.RawMessage{}
	for {
		raw, err := cl.call(a.ctx, "GET", "/audit", q, nil)
		if err != nil {
			return err
		}
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextBefore int64             `json:"next_before"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("decoding a page: %w", err)
		}
		items = append(items, page.Items...)
		if page.NextBefore == 0 || len(page.Items) == 0 {
			break
		}
		if q.Get("before") == strconv.FormatInt(page.NextBefore, 10) {
			return fmt.Errorf("the server returned the same next_before twice")
		}
		q.Set("before", strconv.FormatInt(page.NextBefore, 10))
	}
	out, err := json.Marshal(map[string][]json.RawMessage{"items": items})
	if err != nil {
		return err
	}
	return printJSON(a.stdout, out)
}
