package mcp

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
)

// Binding moments as tools (docs/decisions.md). A tool whose result may
// carry a binding_moment envelope advertises it in its tools/list entry
// with the boolean emits_binding_moment (draft "Binding-Moment Envelope",
// section 7.2). The SDK's ToolAnnotations has no such field and the MCP
// schema closes annotations to its own hints, so the flag is in the tool's
// _meta, the member MCP leaves to implementations.
var emitsBindingMoment = mcp.Meta{"emits_binding_moment": true}

type RequestDecisionArgs struct {
	SessionID     string `json:"session_id" jsonschema:"the session to ask in, sess_...; your principal must be a participant"`
	BindingMoment any    `json:"binding_moment" jsonschema:"the briefing-and-binding envelope: {synopsis (one answer-first sentence that commits to a position), findings [strings], recommendations [strings], offer (string), question {stem (one neutral sentence), options [2 to 4 {label, reasoning}], recommended_idx (index of the one option you recommend), hatches {free_text: true, dialogue: true}}, meta? {decision_class?, calibration_note?}}"`
	Resolver      string `json:"resolver,omitempty" jsonschema:"the one handle allowed to resolve, normally your principal (@owner.agent); when absent any joined participant but you may"`
}

type RequestDecisionResult struct {
	MomentID      string `json:"moment_id" jsonschema:"the moment's id (the message id of its envelope); pass it to await_decision"`
	Sequence      int64  `json:"sequence" jsonschema:"the envelope message's sequence in the session"`
	BindingMoment any    `json:"binding_moment" jsonschema:"the envelope as sent, for surfaces that render it"`
}

type AwaitDecisionArgs struct {
	MomentID       string `json:"moment_id" jsonschema:"the moment id request_decision returned, msg_..."`
	TimeoutSeconds *int   `json:"timeout_seconds,omitempty" jsonschema:"how long to wait for the resolution, 0 to 60 seconds (default 30)"`
}

type ResolveDecisionArgs struct {
	MomentID  string `json:"moment_id" jsonschema:"the moment to resolve, msg_..."`
	Outcome   string `json:"outcome" jsonschema:"selected (pick an option by option_idx), answered (free_text hatch: your own answer), or referred_back (dialogue hatch: reject the question, with an optional objection)"`
	OptionIdx *int   `json:"option_idx,omitempty" jsonschema:"the zero-based index of the chosen option; only with selected"`
	Answer    string `json:"answer,omitempty" jsonschema:"your answer in your own words; only with answered"`
	Objection string `json:"objection,omitempty" jsonschema:"why the question is wrong or premature; only with referred_back"`
}

// DecisionResult is a moment in structured content; its envelope is the
// top-level binding_moment of the result where a tool returns one moment.
type DecisionResult struct {
	MomentID      string               `json:"moment_id"`
	SessionID     string               `json:"session_id"`
	Sequence      int64                `json:"sequence"`
	Emitter       string               `json:"emitter" jsonschema:"the agent that asked"`
	Resolver      string               `json:"resolver,omitempty" jsonschema:"the one handle that may resolve; absent: any joined participant but the emitter"`
	CreatedAt     int64                `json:"created_at"`
	Status        string               `json:"status" jsonschema:"open or resolved"`
	BindingMoment any                  `json:"binding_moment" jsonschema:"the envelope"`
	Resolution    *protocol.Resolution `json:"resolution,omitempty" jsonschema:"present once resolved: outcome selected (option_idx), answered (answer) or referred_back (objection)"`
}

type PendingResult struct {
	Decisions     []DecisionResult `json:"decisions" jsonschema:"open moments you may resolve, oldest first (at most 100)"`
	BindingMoment any              `json:"binding_moment,omitempty" jsonschema:"the oldest pending moment's envelope, for surfaces that render one"`
}

func decisionResult(d *protocol.Decision) (DecisionResult, error) {
	env, err := decodeJSON(d.BindingMoment)
	return DecisionResult{MomentID: d.MomentID, SessionID: d.SessionID, Sequence: d.Sequence, Emitter: d.Emitter, Resolver: d.Resolver,
		CreatedAt: d.CreatedAt, Status: d.Status, BindingMoment: env, Resolution: d.Resolution}, err
}

func decodeJSON(b []byte) (any, error) {
	out, err := events([]json.RawMessage{b})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// bindingMomentOf is the envelope carried by the first session.message
// among evs that carries a well-formed one (draft section 7.1: the result's
// top-level binding_moment, beside the events, which stay the conventional
// payload). A malformed one, such as a message stored before aspd checked
// envelopes, is skipped: it must not be rendered as a decision (section 4).
func bindingMomentOf(evs []any) any {
	for _, ev := range evs {
		e, _ := ev.(map[string]any)
		if e["type"] != protocol.EventMessage {
			continue
		}
		p, _ := e["payload"].(map[string]any)
		parts, _ := p["content"].([]any)
		for _, part := range parts {
			pm, _ := part.(map[string]any)
			data, _ := pm["data"].(map[string]any)
			env, ok := data[protocol.BindingMomentKey]
			if pm["type"] != "data" || !ok {
				continue
			}
			if b, err := json.Marshal(env); err == nil {
				if _, ferr := frame.ValidateBindingMoment(b); ferr == nil {
					return env
				}
			}
		}
	}
	return nil
}

// decisionTools registers request_decision, await_decision,
// pending_decisions and resolve_decision.
func decisionTools(s *mcp.Server, a *app.App) {
	tool(s, &mcp.Tool{Name: "request_decision", Annotations: annotations(false, false, false), Meta: emitsBindingMoment,
		Description: "Ask your principal (the human you act for) to decide something consequential before you act, as a briefing-and-binding envelope in a session. " +
			"Emit one only when you have synthesised a position: the synopsis commits to it, the stem asks neutrally, 2 to 4 options each carry their reasoning, " +
			"recommended_idx marks the one you recommend, and keep both hatches true unless one is genuinely inapplicable. A malformed envelope is refused (invalid, with the path of the bad member) and nothing is sent. " +
			"Then call await_decision with the moment_id." + notFoundNote},
		func(ctx context.Context, who string, in RequestDecisionArgs) (RequestDecisionResult, error) {
			env, err := raw(in.BindingMoment)
			if err != nil {
				return RequestDecisionResult{}, err
			}
			r, err := a.RequestDecision(ctx, who, in.SessionID, env, in.Resolver)
			if err != nil {
				return RequestDecisionResult{}, err
			}
			return RequestDecisionResult{MomentID: r.MessageID, Sequence: r.Sequence, BindingMoment: in.BindingMoment}, nil
		})

	tool(s, &mcp.Tool{Name: "await_decision", Annotations: annotations(true, false, true),
		Description: "Wait up to timeout_seconds (at most 60) for a binding moment to be resolved, and return it. status open means nobody resolved it yet: call again. " +
			"Once resolved, act on resolution.outcome: selected means proceed with option option_idx; answered means the principal accepted the question but answered in their own words (answer): incorporate it; " +
			"referred_back means the principal rejected the question itself (objection): reopen deliberation, and do not re-ask the same question or another forced choice without addressing the objection." + notFoundNote},
		func(ctx context.Context, who string, in AwaitDecisionArgs) (DecisionResult, error) {
			d, err := a.AwaitDecision(ctx, who, in.MomentID, in.TimeoutSeconds)
			if err != nil {
				return DecisionResult{}, err
			}
			return decisionResult(d)
		})

	tool(s, &mcp.Tool{Name: "pending_decisions", Annotations: annotations(true, false, true), Meta: emitsBindingMoment,
		Description: "List the open binding moments you may resolve (those naming you as resolver, or naming none, in sessions you are joined in), oldest first, each with its envelope. " +
			"Resolve one with resolve_decision."},
		func(ctx context.Context, who string, _ Empty) (PendingResult, error) {
			list, err := a.PendingDecisions(ctx, who)
			if err != nil {
				return PendingResult{}, err
			}
			out := PendingResult{Decisions: make([]DecisionResult, len(list.Decisions))}
			for i := range list.Decisions {
				if out.Decisions[i], err = decisionResult(&list.Decisions[i]); err != nil {
					return PendingResult{}, err
				}
			}
			if len(out.Decisions) > 0 {
				out.BindingMoment = out.Decisions[0].BindingMoment
			}
			return out, nil
		})

	tool(s, &mcp.Tool{Name: "resolve_decision", Annotations: annotations(false, false, false),
		Description: "Resolve a binding moment: select an option (outcome selected, option_idx), answer in your own words (answered, answer; only if its free_text hatch is open), " +
			"or reject the question (referred_back, optional objection; only if its dialogue hatch is open). The first resolution wins: a later one is refused with already_resolved. " +
			"not_resolver means the moment names another resolver, or that you emitted it." + notFoundNote},
		func(ctx context.Context, who string, in ResolveDecisionArgs) (protocol.SendMessageResponse, error) {
			return a.ResolveDecision(ctx, who, in.MomentID, protocol.ResolveRequest{Outcome: in.Outcome, OptionIdx: in.OptionIdx, Answer: in.Answer, Objection: in.Objection})
		})
}
