package main

import (
	"bufio"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// chorusCommands manage an agent's Chorus webhook (docs/chorus.md).
var chorusCommands = []*command{
	{name: "chorus set", args: "HANDLE [--file FILE]",
		desc: "set (or rotate) an agent's connection string, read from stdin or FILE (never an argument: it is a secret); prints the signing secret once", run: chorusSet},
	{name: "chorus get", args: "HANDLE", desc: "show an agent's webhook state (failing, last success, last error)", run: adminCall(1, 1, func(p []string) request {
		return request{"GET", agentPath(p[0], "/chorus"), nil}
	})},
	{name: "chorus delete", args: "HANDLE", desc: "remove an agent's webhook; nothing more is delivered to it", run: adminCall(1, 1, func(p []string) request {
		return request{"DELETE", agentPath(p[0], "/chorus"), nil}
	})},
	{name: "chorus deliveries", args: "HANDLE [--limit N]", desc: "an agent's recent webhook delivery records, newest first", run: chorusDeliveries},
	{name: "chorus redeliver", args: "HANDLE DELIVERY_ID", desc: "queue a delivery again (same webhook-id)", run: adminCall(2, 2, func(p []string) request {
		return request{"POST", agentPath(p[0], "/chorus/deliveries/"+pathEscape(p[1])+"/redeliver"), struct{}{}}
	})},
}

// stdin is where chorus set reads the connection string (tests replace it).
var stdin io.Reader = os.Stdin

func chorusSet(a *app, c *command, args []string) error {
	fs := a.flags(c)
	file := fs.String("file", "", "read the connection string from this file instead of stdin")
	pos, err := a.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	var r io.Reader = stdin
	if *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	line, err := bufio.NewReader(io.LimitReader(r, 8192)).ReadString('\n')
	if err != nil && err != io.EOF {
		return err
	}
	conn := strings.TrimSpace(line)
	if conn == "" {
		return usageErrorf("no connection string on %s", map[bool]string{true: *file, false: "stdin"}[*file != ""])
	}
	cl, err := a.adminClient()
	if err != nil {
		return err
	}
	if err := a.show(cl, "PUT", agentPath(pos[0], "/chorus"), nil, map[string]string{"connection_string": conn}); err != nil {
		return err
	}
	a.stderr.Write([]byte("aspctl: the signing secret is shown only once; give it to the agent now\n"))
	return nil
}

func chorusDeliveries(a *app, c *command, args []string) error {
	fs := a.flags(c)
	limit := fs.Int("limit", 50, "most records to show (1-500)")
	pos, err := a.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	cl, err := a.adminClient()
	if err != nil {
		return err
	}
	return a.show(cl, "GET", agentPath(pos[0], "/chorus/deliveries"), url.Values{"limit": {strconv.Itoa(*limit)}}, nil)
}
