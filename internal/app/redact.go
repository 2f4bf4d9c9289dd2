package app

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/aspd/aspd/protocol"
)

// Redact removes the content of event seq of session id, as operator `by`
// (the operator token's name), and answers the event as every reader now
// sees it (docs/api.md, "Redacted events"). The store rewrites the stored
// body (so every read path that reads the store serves the tombstone);
// this layer then replaces the copies held in memory: this node's ring
// and, through the cluster, the other nodes'. Redacting a redacted event
// answers it as it is: the first redaction stands.
//
// The write goes through the store's transaction with ctx, so the audit
// entry the operator middleware puts in ctx is written with it.
func (a *App) Redact(ctx context.Context, id string, seq int64, by string, req protocol.RedactRequest) (json.RawMessage, error) {
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	if seq < 1 {
		return nil, protocol.NotFound()
	}
	reason := strings.TrimSpace(req.Reason)
	switch {
	case reason == "":
		return nil, protocol.Invalid("reason is required: say why the event is redacted")
	case len(reason) > protocol.MaxRedactReasonBytes:
		return nil, protocol.Invalid("reason is at most %d bytes", protocol.MaxRedactReasonBytes)
	}
	evs, changed, err := a.st.Redact(ctx, id, seq, by, reason)
	if err != nil {
		return nil, err
	}
	if changed {
		a.retention.Redacted.Add(1)
		a.hub.Rewritten(id, evs)
		if a.node != nil {
			a.node.Forget(id)
		}
		a.log.Info("event redacted", "session", id, "sequence", seq, "by", by, "copies", len(evs)-1)
	}
	return evs[0].Body, nil
}
