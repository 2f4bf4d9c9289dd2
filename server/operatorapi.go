package server

import (
	"crypto/subtle"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/internal/app"
	"github.com/aspd/aspd/protocol"
)

// Operator authentication, scopes and the audit log's entry, and the
// operator's own routes: named operator tokens, whoami and the audit log
// (docs/operators.md). The rules are internal/app's (operator_tokens.go).

// routeScope is the operator token scope rt needs: the route's own, or by
// the method rule: a route that is not GET or HEAD changes something and
// needs admin.
func routeScope(rt *route) string {
	if rt.scope != "" {
		return rt.scope
	}
	if rt.method == http.MethodGet || rt.method == http.MethodHead {
		return protocol.ScopeRead
	}
	return protocol.ScopeAdmin
}

// operatorAuth authenticates the operator token: the bootstrap token by its
// configured hash in constant time, any other by the store's lookup (a
// store outage is 503 store_unavailable, never 401). Then it checks the
// token's scope against the route's (routeScope: 403 insufficient_scope),
// and for a route that names an action, puts the change's audit entry in
// the request's context: the store writes it in the change's transaction.
func (s *Server) operatorAuth(c echo.Context, rt *route) error {
	op, err := s.authenticateOperator(c)
	if err != nil {
		if pe := app.Answer(err); pe.Status == http.StatusUnauthorized {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="aspd-admin"`)
		}
		return err
	}
	if !op.Allows(routeScope(rt)) {
		return app.InsufficientScope(op.Scope)
	}
	state(c).operator = op
	if rt.action != "" {
		target, detail := pathTarget(c)
		req := c.Request()
		c.SetRequest(req.WithContext(app.WithAudit(req.Context(), app.AuditRequest{
			Actor: op.Name, Action: rt.action, Target: target, RequestID: requestID(c), Detail: detail})))
	}
	return nil
}

func (s *Server) authenticateOperator(c echo.Context) (app.Operator, error) {
	tok := bearer(c.Request())
	if tok == "" {
		return app.Operator{}, app.Unauthorized()
	}
	if len(s.cfg.AdminTokenHash) > 0 && subtle.ConstantTimeCompare(HashToken(tok), s.cfg.AdminTokenHash) == 1 {
		return app.Bootstrap(), nil
	}
	return s.app.AuthenticateOperator(c.Request().Context(), tok)
}

// operator is the authenticated operator token.
func operator(c echo.Context) app.Operator { return state(c).operator }

// pathTarget is an audited change's target, the first path parameter (an
// agent's handle, a session id, a token's name), and the others as detail
// (a blocked handle, a delivery id). A change the path does not name (a
// creation) has its target set by the application.
func pathTarget(c echo.Context) (string, map[string]any) {
	var target string
	var detail map[string]any
	for i, name := range c.ParamNames() {
		v, err := url.PathUnescape(c.ParamValues()[i])
		if err != nil {
			v = c.ParamValues()[i]
		}
		if i == 0 {
			target = v
			continue
		}
		if detail == nil {
			detail = map[string]any{}
		}
		detail[name] = v
	}
	return target, detail
}

func (s *Server) whoami(c echo.Context) error {
	op := operator(c)
	return c.JSON(http.StatusOK, protocol.Whoami{Name: op.Name, Scope: op.Scope})
}

func (s *Server) createOperatorToken(c echo.Context) error {
	var req protocol.CreateOperatorTokenRequest
	if err := s.decode(c, &req); err != nil {
		return err
	}
	t, err := s.app.CreateOperatorToken(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, t)
}

func (s *Server) listOperatorTokens(c echo.Context) error {
	list, err := s.app.OperatorTokens(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, list)
}

// pathName is the :name path parameter (a token's name).
func pathName(c echo.Context) (string, error) {
	n, err := url.PathUnescape(c.Param("name"))
	if err != nil {
		return "", protocol.NotFound()
	}
	return n, nil
}

func (s *Server) rotateOperatorToken(c echo.Context) error {
	n, err := pathName(c)
	if err != nil {
		return err
	}
	t, err := s.app.RotateOperatorToken(c.Request().Context(), n)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (s *Server) revokeOperatorToken(c echo.Context) error {
	n, err := pathName(c)
	if err != nil {
		return err
	}
	if err := s.app.RevokeOperatorToken(c.Request().Context(), n); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) auditLog(c echo.Context) error {
	q, err := query(c)
	if err != nil {
		return err
	}
	page, err := s.app.Audit(c.Request().Context(), app.AuditQuery{Limit: q.Get("limit"), Before: q.Get("before"),
		Actor: q.Get("actor"), Action: q.Get("action"), Target: q.Get("target")})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, page)
}
