package server

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/internal/mcp"
	"github.com/aspd/aspd/protocol"
)

// The route table: every route aspd serves, in one static list that routes()
// registers (in this order) and that tests and documentation generators read
// without a running server. routes_test.go checks that the router and the
// table agree, so a route registered any other way fails a test.

// authClass is how a route authenticates its caller; it decides the
// middleware routes() puts in front of the handler.
type authClass int

const (
	// authNone: no authentication and no query check (health checks, the
	// console's static pages; every call the console makes goes to
	// /admin/v1 with the operator token).
	authNone authClass = iota
	// authAgent: an agent's bearer token (on /connect also ?token=), then
	// the strict query check, then the per-agent admission if any.
	authAgent
	// authOperator: the operator token, then the strict query check.
	authOperator
	// authChorusCallback: the path's callback token, checked by the handler
	// (an unknown or expired one is the 404 of an unknown path); the strict
	// query check first.
	authChorusCallback
	// authMCP: an agent's bearer token, checked by the MCP handler itself.
	authMCP
)

// route is one method and path and everything about it.
type route struct {
	method string
	path   string // echo pattern: ":name" is a path parameter, "*" the rest
	auth   authClass
	// query is what the route accepts in its query string (query.go);
	// the zero rule takes no parameters. Checked only by the auth classes
	// that run strictQuery (agent, operator, Chorus callback).
	query queryRule
	// admit is the per-agent rate-limited action taken before the path and
	// the body are looked at (gate, request.go); 0: none. Agent routes only.
	admit app.Action
	// request and response are zero values of the body types, for
	// documentation: nil when there is no body (or no JSON body: see
	// produces). struct{}{} is a request whose body, if any, is {}.
	request  any
	response any
	status   int    // the success status
	produces string // the success answer's media type; "": application/json
	summary  string
	// handler serves the route; mount instead builds, once per server and
	// path, a handler that serves every method of its path (an http.Handler
	// with state of its own, such as the MCP server or the console's assets).
	handler func(*Server, echo.Context) error
	mount   func(*Server) echo.HandlerFunc
	// action names an operator change for the audit log (dotted,
	// resource.verb: "agent.policy.set"); every operator route that is
	// not GET or HEAD has one (routes_test.go). Its store write goes
	// through the store's transaction, which writes the audit row.
	action string
	// scope is the operator token scope the route needs; "": by the
	// method rule (routeScope: GET and HEAD read, anything else admin).
	scope string
}

// Media types of answers that are not JSON.
const (
	mediaSSE    = "text/event-stream"
	mediaNDJSON = "application/x-ndjson"
)

// Answers that handlers write as ad-hoc maps, named here for documentation
// (routes_test.go decodes real answers into them strictly).
type (
	healthzBody struct {
		Status string `json:"status"` // "ok"
	}
	readyzBody struct {
		Status      string `json:"status"` // "ready"
		Store       string `json:"store"`  // the SQL dialect
		Connections int    `json:"connections"`
		Node        string `json:"node,omitempty"` // cluster mode only
	}
	agentList struct {
		Agents []*protocol.AdminAgent `json:"agents"`
	}
	streamList struct {
		Streams []protocol.StreamInfo `json:"streams"`
	}
	chorusDeliveryList struct {
		Deliveries []protocol.ChorusDelivery `json:"deliveries"`
	}
)

var (
	// pageQuery is the paging of an event log.
	pageQuery = queryRule{params: []string{"after_sequence", "cursor", "limit"}, aliases: [][2]string{{"after_sequence", "cursor"}}}
	// listingParams are the filters of every session listing and export.
	listingParams = []string{"state", "since", "until", "before"}
)

// routeTable is every route, in registration order.
var routeTable = []route{
	{method: http.MethodGet, path: "/healthz", auth: authNone,
		response: healthzBody{}, status: http.StatusOK,
		summary: "Liveness: the process answers.",
		handler: (*Server).healthz},
	{method: http.MethodGet, path: "/readyz", auth: authNone,
		response: readyzBody{}, status: http.StatusOK,
		summary: "Readiness: the store can serve (503 store_unavailable while it cannot).",
		handler: (*Server).readyz},
	{method: http.MethodGet, path: "/openapi.json", auth: authNone,
		response: json.RawMessage{}, status: http.StatusOK,
		summary: "This API's OpenAPI 3.1 description, generated from the route table (openapi.go).",
		handler: (*Server).openAPI},

	// The agent API (agentapi.go, ws.go, frameapi.go, sse.go, decisionapi.go).
	{method: http.MethodPost, path: "/sessions", auth: authAgent, admit: app.ActCreateSession,
		request: protocol.CreateSessionRequest{}, response: protocol.CreateSessionResponse{}, status: http.StatusCreated,
		summary: "Create a session, inviting agents and optionally sending a first message.",
		handler: (*Server).createSession},
	{method: http.MethodGet, path: "/sessions", auth: authAgent,
		query: queryRule{
			params:  append(slices.Clone(listingParams), "status", "cursor", "limit"),
			aliases: [][2]string{{"before", "cursor"}},
		},
		response: protocol.SessionList[protocol.SessionSummary]{}, status: http.StatusOK,
		summary: "List the caller's sessions, newest first.",
		handler: (*Server).listSessions},
	{method: http.MethodGet, path: "/sessions/:id", auth: authAgent,
		response: protocol.Session{}, status: http.StatusOK,
		summary: "Get a session the caller may see.",
		handler: (*Server).getSession},
	{method: http.MethodGet, path: "/sessions/:id/events", auth: authAgent, query: pageQuery,
		response: protocol.EventsPage{}, status: http.StatusOK,
		summary: "Page through the session's events the caller is eligible to see.",
		handler: (*Server).listEvents},
	{method: http.MethodPost, path: "/sessions/:id/join", auth: authAgent,
		request: struct{}{}, response: protocol.OK{}, status: http.StatusOK,
		summary: "Join a session the caller is invited to.",
		handler: (*Server).join},
	{method: http.MethodPost, path: "/sessions/:id/invite", auth: authAgent, admit: app.ActInvite,
		request: protocol.InviteRequest{}, response: protocol.InviteResponse{}, status: http.StatusOK,
		summary: "Invite agents to a session.",
		handler: (*Server).invite},
	{method: http.MethodPost, path: "/sessions/:id/messages", auth: authAgent, admit: app.ActSendMessage,
		request: protocol.SendMessageRequest{}, response: protocol.SendMessageResponse{}, status: http.StatusCreated,
		summary: "Send a message to a session.",
		handler: (*Server).sendMessage},
	{method: http.MethodPost, path: "/sessions/:id/leave", auth: authAgent,
		request: struct{}{}, response: protocol.OK{}, status: http.StatusOK,
		summary: "Leave a session.",
		handler: (*Server).leave},
	{method: http.MethodPost, path: "/sessions/:id/end", auth: authAgent,
		request: struct{}{}, response: protocol.OK{}, status: http.StatusOK,
		summary: "End a session.",
		handler: (*Server).end},
	{method: http.MethodPost, path: "/sessions/:id/reopen", auth: authAgent, admit: app.ActReopen,
		request: protocol.ReopenRequest{}, response: protocol.OK{}, status: http.StatusOK,
		summary: "Reopen an ended session.",
		handler: (*Server).reopen},
	{method: http.MethodGet, path: "/connect", auth: authAgent, query: queryRule{params: []string{"token"}},
		status:  http.StatusSwitchingProtocols,
		summary: "Open the WebSocket stream of every session event the caller may see: replay, then live.",
		handler: (*Server).connect},
	{method: http.MethodPost, path: "/frames", auth: authAgent, admit: app.ActSubmitFrame,
		request: protocol.FrameSubmission{}, response: protocol.FrameResult{}, status: http.StatusOK,
		summary: "Submit an ephemeral agent-channel frame to live streams.",
		handler: (*Server).submitFrame},
	{method: http.MethodGet, path: "/stream", auth: authAgent, query: queryRule{params: []string{"instrument", "session", "filter"}},
		status: http.StatusOK, produces: mediaSSE,
		summary: "Open the caller's stream of agent-channel frames (Server-Sent Events).",
		handler: (*Server).openStream},
	{method: http.MethodGet, path: "/stream/roster", auth: authAgent,
		response: streamList{}, status: http.StatusOK,
		summary: "List the caller's own live frame streams.",
		handler: (*Server).roster},
	{method: http.MethodGet, path: "/decisions/pending", auth: authAgent,
		response: protocol.DecisionList{}, status: http.StatusOK,
		summary: "List the open binding moments the caller may resolve, oldest first.",
		handler: (*Server).pendingDecisions},
	{method: http.MethodGet, path: "/decisions/:moment_id", auth: authAgent,
		response: protocol.Decision{}, status: http.StatusOK,
		summary: "Get a binding moment.",
		handler: (*Server).getDecision},
	{method: http.MethodGet, path: "/decisions/:moment_id/await", auth: authAgent, query: queryRule{params: []string{"timeout_seconds"}},
		response: protocol.Decision{}, status: http.StatusOK,
		summary: "Wait (up to timeout_seconds) for a binding moment to be resolved.",
		handler: (*Server).awaitDecision},
	{method: http.MethodPost, path: "/decisions/:moment_id/resolve", auth: authAgent, admit: app.ActSendMessage,
		request: protocol.ResolveRequest{}, response: protocol.SendMessageResponse{}, status: http.StatusCreated,
		summary: "Resolve a binding moment with a message sent on the caller's behalf.",
		handler: (*Server).resolveDecision},

	// MCP tools (internal/mcp): Streamable HTTP (JSON-RPC), one handler for
	// the three methods.
	{method: http.MethodGet, path: "/mcp", auth: authMCP, status: http.StatusOK,
		summary: "MCP Streamable HTTP endpoint (stateless).", mount: (*Server).mcpHandler},
	{method: http.MethodPost, path: "/mcp", auth: authMCP, status: http.StatusOK,
		summary: "MCP Streamable HTTP endpoint: a JSON-RPC request.", mount: (*Server).mcpHandler},
	{method: http.MethodDelete, path: "/mcp", auth: authMCP, status: http.StatusOK,
		summary: "MCP Streamable HTTP endpoint (stateless).", mount: (*Server).mcpHandler},

	// The operator API (adminapi.go, consoleapi.go, searchapi.go).
	{method: http.MethodPost, path: "/admin/v1/agents", auth: authOperator, action: "agent.create",
		request: protocol.CreateAgentRequest{}, response: protocol.AgentWithToken{}, status: http.StatusCreated,
		summary: "Create an agent and issue its token.",
		handler: (*Server).adminCreateAgent},
	{method: http.MethodGet, path: "/admin/v1/agents", auth: authOperator, query: queryRule{params: []string{"owner"}},
		response: agentList{}, status: http.StatusOK,
		summary: "List agents, optionally of one owner.",
		handler: (*Server).adminListAgents},
	{method: http.MethodGet, path: "/admin/v1/agents/:handle", auth: authOperator,
		response: protocol.Agent{}, status: http.StatusOK,
		summary: "Get an agent.",
		handler: (*Server).adminGetAgent},
	{method: http.MethodDelete, path: "/admin/v1/agents/:handle", auth: authOperator, action: "agent.delete",
		response: protocol.OK{}, status: http.StatusOK,
		summary: "Delete an agent.",
		handler: (*Server).adminDeleteAgent},
	{method: http.MethodPut, path: "/admin/v1/agents/:handle/policy", auth: authOperator, action: "agent.policy.set",
		request: protocol.PolicyRequest{}, response: protocol.Agent{}, status: http.StatusOK,
		summary: "Set an agent's inbound policy.",
		handler: (*Server).adminSetPolicy},
	{method: http.MethodPut, path: "/admin/v1/agents/:handle/allowlist", auth: authOperator, action: "agent.allowlist.set",
		request: protocol.AllowlistRequest{}, response: protocol.Agent{}, status: http.StatusOK,
		summary: "Replace an agent's allowlist.",
		handler: (*Server).adminAllowlistReplace},
	{method: http.MethodPost, path: "/admin/v1/agents/:handle/allowlist", auth: authOperator, action: "agent.allowlist.add",
		request: protocol.AllowlistRequest{}, response: protocol.Agent{}, status: http.StatusOK,
		summary: "Add entries to an agent's allowlist.",
		handler: (*Server).adminAllowlistAdd},
	{method: http.MethodDelete, path: "/admin/v1/agents/:handle/allowlist", auth: authOperator, action: "agent.allowlist.remove",
		request: protocol.AllowlistRequest{}, response: protocol.Agent{}, status: http.StatusOK,
		summary: "Remove entries from an agent's allowlist.",
		handler: (*Server).adminAllowlistRemove},
	{method: http.MethodPut, path: "/admin/v1/agents/:handle/roles", auth: authOperator, action: "agent.roles.set",
		request: protocol.RolesRequest{}, response: protocol.Agent{}, status: http.StatusOK,
		summary: "Set an agent's roles.",
		handler: (*Server).adminSetRoles},
	{method: http.MethodPost, path: "/admin/v1/agents/:handle/blocks", auth: authOperator, action: "agent.block.add",
		request: protocol.BlockRequest{}, response: protocol.Agent{}, status: http.StatusOK,
		summary: "Block a handle from contacting an agent.",
		handler: (*Server).adminBlock},
	{method: http.MethodDelete, path: "/admin/v1/agents/:handle/blocks/:blocked", auth: authOperator, action: "agent.block.remove",
		response: protocol.Agent{}, status: http.StatusOK,
		summary: "Lift a block.",
		handler: (*Server).adminUnblock},
	{method: http.MethodPost, path: "/admin/v1/agents/:handle/token", auth: authOperator, action: "agent.token.rotate",
		response: protocol.AgentWithToken{}, status: http.StatusOK,
		summary: "Rotate an agent's token; the old one stops working and its connections close.",
		handler: (*Server).adminRotateToken},
	{method: http.MethodDelete, path: "/admin/v1/agents/:handle/token", auth: authOperator, action: "agent.token.revoke",
		response: protocol.Agent{}, status: http.StatusOK,
		summary: "Revoke an agent's token.",
		handler: (*Server).adminRevokeToken},
	{method: http.MethodGet, path: "/admin/v1/sessions", auth: authOperator,
		query: queryRule{
			params:  append(slices.Clone(listingParams), "participant", "status", "cursor", "limit"),
			aliases: [][2]string{{"before", "cursor"}},
			needs:   map[string]string{"status": "participant"},
		},
		response: protocol.SessionList[*protocol.AdminSession]{}, status: http.StatusOK,
		summary: "List sessions, newest first.",
		handler: (*Server).adminListSessions},
	{method: http.MethodGet, path: "/admin/v1/sessions/:id", auth: authOperator,
		response: protocol.Session{}, status: http.StatusOK,
		summary: "Get a session.",
		handler: (*Server).adminGetSession},
	{method: http.MethodGet, path: "/admin/v1/sessions/:id/events", auth: authOperator, query: pageQuery,
		response: protocol.EventsPage{}, status: http.StatusOK,
		summary: "Page through a session's complete event log.",
		handler: (*Server).adminSessionEvents},
	{method: http.MethodGet, path: "/admin/v1/sessions/:id/events/live", auth: authOperator, query: queryRule{params: []string{"after_sequence"}},
		status: http.StatusOK, produces: mediaSSE,
		summary: "A session's log, then its new events as they commit (Server-Sent Events; data: an event).",
		handler: (*Server).adminLiveEvents},
	{method: http.MethodPost, path: "/admin/v1/sessions/:id/events/:sequence/redact", auth: authOperator, action: "event.redact",
		request: protocol.RedactRequest{}, response: protocol.RedactedEvent{}, status: http.StatusOK,
		summary: "Redact an event: its content is replaced by a tombstone everywhere it is read; its place in the log stays.",
		handler: (*Server).adminRedact},
	{method: http.MethodGet, path: "/admin/v1/sessions/:id/transcript", auth: authOperator,
		// One event per line, as the export's; offered as a download (Content-Disposition).
		response: protocol.Event{}, status: http.StatusOK, produces: mediaNDJSON,
		summary: "Download a session's complete log as JSON Lines (sess_….jsonl).",
		handler: (*Server).adminTranscript},
	{method: http.MethodPost, path: "/admin/v1/sessions/:id/end", auth: authOperator, action: "session.end",
		request: struct{}{}, response: protocol.Session{}, status: http.StatusOK,
		summary: "End an active session as the operator (session.ended without ended_by).",
		handler: (*Server).adminEndSession},
	{method: http.MethodDelete, path: "/admin/v1/sessions/:id/participants/:handle", auth: authOperator, action: "session.participant.remove",
		response: protocol.Session{}, status: http.StatusOK,
		summary: "Remove a joined or invited agent from an active session (session.left; the session ends when no one joined remains).",
		handler: (*Server).adminRemoveParticipant},
	{method: http.MethodGet, path: "/admin/v1/overview", auth: authOperator,
		response: Overview{}, status: http.StatusOK,
		summary: "The console's overview: version, uptime, store, cluster nodes, and the last 15 minutes of sampled series.",
		handler: (*Server).adminOverview},
	{method: http.MethodGet, path: "/admin/v1/health", auth: authOperator,
		response: protocol.OperatorHealth{}, status: http.StatusOK,
		summary: "A health sample: store, connections, delivery, Chorus.",
		handler: (*Server).adminHealth},
	{method: http.MethodGet, path: "/admin/v1/export", auth: authOperator,
		query: queryRule{
			params: append(slices.Clone(listingParams), "participant", "status", "session"),
			needs:  map[string]string{"status": "participant"},
			alone:  "session",
		},
		// One event per line; the outcome is in the Aspd-Export-Status trailer.
		response: protocol.Event{}, status: http.StatusOK, produces: mediaNDJSON,
		summary: "Export events as JSON Lines: one session, or every session matching the filters.",
		handler: (*Server).adminExport},
	{method: http.MethodGet, path: "/admin/v1/search", auth: authOperator, query: queryRule{params: app.SearchParams()},
		response: protocol.SearchResults{}, status: http.StatusOK,
		summary: "Search transcripts.",
		handler: (*Server).adminSearch},
	{method: http.MethodGet, path: "/metrics", auth: authOperator,
		status: http.StatusOK, produces: "text/plain", // Prometheus exposition, content-negotiated
		summary: "Prometheus metrics.",
		handler: (*Server).metricsHandler},

	// Operator tokens, whoami and the audit log (operatorapi.go). The
	// token routes need admin, their listing included.
	{method: http.MethodGet, path: "/admin/v1/whoami", auth: authOperator,
		response: protocol.Whoami{}, status: http.StatusOK,
		summary: "The calling operator token's name and scope.",
		handler: (*Server).whoami},
	{method: http.MethodPost, path: "/admin/v1/operator-tokens", auth: authOperator, action: "operator_token.create",
		request: protocol.CreateOperatorTokenRequest{}, response: protocol.OperatorTokenWithSecret{}, status: http.StatusCreated,
		summary: "Create a named operator token (scope read or admin); the answer is the only time it is shown.",
		handler: (*Server).createOperatorToken},
	{method: http.MethodGet, path: "/admin/v1/operator-tokens", auth: authOperator, scope: protocol.ScopeAdmin,
		response: protocol.OperatorTokenList{}, status: http.StatusOK,
		summary: "List the named operator tokens (never their secrets).",
		handler: (*Server).listOperatorTokens},
	{method: http.MethodPost, path: "/admin/v1/operator-tokens/:name/rotate", auth: authOperator, action: "operator_token.rotate",
		response: protocol.OperatorTokenWithSecret{}, status: http.StatusOK,
		summary: "Rotate a named operator token; the old secret stops working at once.",
		handler: (*Server).rotateOperatorToken},
	{method: http.MethodDelete, path: "/admin/v1/operator-tokens/:name", auth: authOperator, action: "operator_token.revoke",
		status:  http.StatusNoContent,
		summary: "Revoke a named operator token; it stops working at once.",
		handler: (*Server).revokeOperatorToken},
	{method: http.MethodGet, path: "/admin/v1/audit", auth: authOperator, query: queryRule{params: []string{"limit", "before", "actor", "action", "target"}},
		response: protocol.AuditPage{}, status: http.StatusOK,
		summary: "The audit log of operator changes, newest first (keyset paged by before=next_before).",
		handler: (*Server).auditLog},

	// Chorus webhooks (chorusapi.go).
	{method: http.MethodPut, path: "/admin/v1/agents/:handle/chorus", auth: authOperator, action: "agent.chorus.set",
		request: protocol.ChorusRequest{}, response: protocol.ChorusRegistration{}, status: http.StatusOK,
		summary: "Register (or rotate) an agent's Chorus webhook; answers a fresh signing secret.",
		handler: (*Server).adminSetChorus},
	{method: http.MethodGet, path: "/admin/v1/agents/:handle/chorus", auth: authOperator,
		response: protocol.ChorusInfo{}, status: http.StatusOK,
		summary: "Get an agent's Chorus registration.",
		handler: (*Server).adminGetChorus},
	{method: http.MethodDelete, path: "/admin/v1/agents/:handle/chorus", auth: authOperator, action: "agent.chorus.delete",
		response: protocol.OK{}, status: http.StatusOK,
		summary: "Delete an agent's Chorus registration.",
		handler: (*Server).adminDeleteChorus},
	{method: http.MethodGet, path: "/admin/v1/agents/:handle/chorus/deliveries", auth: authOperator, query: queryRule{params: []string{"limit"}},
		response: chorusDeliveryList{}, status: http.StatusOK,
		summary: "List an agent's recent Chorus deliveries.",
		handler: (*Server).adminChorusDeliveries},
	{method: http.MethodPost, path: "/admin/v1/agents/:handle/chorus/deliveries/:id/redeliver", auth: authOperator, action: "chorus.redeliver",
		response: protocol.OK{}, status: http.StatusAccepted,
		summary: "Queue a Chorus delivery again, due now.",
		handler: (*Server).adminChorusRedeliver},
	{method: http.MethodPost, path: "/chorus/callback/:token", auth: authChorusCallback,
		request: protocol.ChorusCallbackRequest{}, response: protocol.ChorusCallbackResponse{}, status: http.StatusOK,
		summary: "A Chorus agent's callback: a message, tool call or result into the session, or a delivery status or error.",
		handler: (*Server).chorusCallback},

	// The web console (internal/console).
	{method: http.MethodGet, path: "/console", auth: authNone,
		status:  http.StatusMovedPermanently,
		summary: "Redirect to /console/.", mount: (*Server).consoleHandler},
	{method: http.MethodGet, path: "/console/*", auth: authNone,
		status: http.StatusOK, produces: "text/html",
		summary: "The web console's pages and assets.", mount: (*Server).consoleHandler},
}

// routeMiddleware is the one gate (request.go) rt's auth class implies, in order:
// authentication, the strict query check, the per-agent admission.
func (s *Server) routeMiddleware(rt *route) []echo.MiddlewareFunc {
	switch rt.auth {
	case authAgent:
		return []echo.MiddlewareFunc{s.gate(rt, s.agentAuth)}
	case authOperator:
		return []echo.MiddlewareFunc{s.gate(rt, func(c echo.Context) error { return s.operatorAuth(c, rt) })}
	case authChorusCallback:
		return []echo.MiddlewareFunc{s.gate(rt, nil)}
	default: // authNone, authMCP
		return nil
	}
}

// routeHandler is rt's handler on s. mounted holds the handlers built by
// mount, per path, so that every method of a path shares one.
func (s *Server) routeHandler(rt *route, mounted map[string]echo.HandlerFunc) echo.HandlerFunc {
	if rt.mount == nil {
		h := rt.handler
		return func(c echo.Context) error { return h(s, c) }
	}
	h, ok := mounted[rt.path]
	if !ok {
		h = rt.mount(s)
		mounted[rt.path] = h
	}
	return h
}

// mcpHandler serves /mcp (internal/mcp), which authenticates the agent
// token itself.
func (s *Server) mcpHandler() echo.HandlerFunc {
	return echo.WrapHandler(mcp.Handler(s.app, s.cfg.MaxBodyBytes))
}
