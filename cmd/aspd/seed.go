package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/server"
	"github.com/aspd/aspd/store"
)

// seedAgent is one entry of a seed file; a bare string is the token with
// policy open.
type seedAgent struct {
	Token         string   `json:"token"`
	InboundPolicy string   `json:"inbound_policy"`
	Allowlist     []string `json:"allowlist"`
}

// parseSeed reads {"@alice.test": {"token": ..., "inbound_policy": ..., "allowlist": [...]}, "@bob.test": "tok_bob"}.
func parseSeed(b []byte) (map[string]seedAgent, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("seed: not a JSON object of handles: %w", err)
	}
	out := make(map[string]seedAgent, len(raw))
	for h, v := range raw {
		if !protocol.ValidHandle(h) {
			return nil, fmt.Errorf("seed: %q is not a handle", h)
		}
		var a seedAgent
		v = bytes.TrimSpace(v)
		if len(v) > 0 && v[0] == '"' {
			if err := json.Unmarshal(v, &a.Token); err != nil {
				return nil, fmt.Errorf("seed: %s: %w", h, err)
			}
			a.InboundPolicy = protocol.PolicyOpen
		} else {
			dec := json.NewDecoder(bytes.NewReader(v))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&a); err != nil {
				return nil, fmt.Errorf("seed: %s: %w", h, err)
			}
			if a.InboundPolicy == "" {
				a.InboundPolicy = protocol.PolicyOpen
			}
		}
		if a.Token == "" {
			return nil, fmt.Errorf("seed: %s: token is required", h)
		}
		if a.InboundPolicy != protocol.PolicyOpen && a.InboundPolicy != protocol.PolicyAllowlist {
			return nil, fmt.Errorf("seed: %s: inbound_policy must be open or allowlist", h)
		}
		for _, e := range a.Allowlist {
			if !protocol.ValidAllowlistEntry(e) {
				return nil, fmt.Errorf("seed: %s: allowlist entry %q is not a handle or @owner.* glob", h, e)
			}
		}
		out[h] = a
	}
	return out, nil
}

// seed provisions the agents of a seed file, idempotently.
func seed(ctx context.Context, st *store.Store, path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("seed: %w", err)
	}
	agents, err := parseSeed(b)
	if err != nil {
		return 0, err
	}
	handles := make([]string, 0, len(agents))
	for h := range agents {
		handles = append(handles, h)
	}
	sort.Strings(handles)
	for _, h := range handles {
		a := agents[h]
		if err := st.UpsertSeedAgent(ctx, store.NewAgent{Handle: h, InboundPolicy: a.InboundPolicy, Allowlist: a.Allowlist,
			TokenHash: server.HashToken(a.Token)}); err != nil {
			return 0, err
		}
	}
	return len(agents), nil
}
