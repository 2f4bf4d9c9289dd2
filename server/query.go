package server

import (
	"net/url"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/aspd/aspd/protocol"
)

// Query parameters are decoded as strictly as bodies: a parameter a route
// does not take, a repeated one, one that is empty, not properly escaped, not
// valid UTF-8 or holding a NUL, or one given without the parameter it depends
// on is 400 invalid_request naming it, and the request does nothing. A
// misspelt filter must never widen what a request reads (an export of one
// participant's sessions must not become an export of the network).

// queryRule is what one route accepts in its query string (its entry in
// the route table, routes.go). Every parameter takes exactly one value; the
// handler validates the value itself.
type queryRule struct {
	params  []string          // the accepted names
	aliases [][2]string       // two names of one parameter: give at most one
	needs   map[string]string // a parameter that means something only with another
	alone   string            // a parameter that excludes every other
}

// checkQuery decodes the request's query string and checks it against the
// route's rule.
func checkQuery(c echo.Context, rule queryRule) (url.Values, error) {
	q, err := parseQuery(c.Request().URL.RawQuery)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !slices.Contains(rule.params, name) {
			if len(rule.params) == 0 {
				return nil, protocol.Invalid("unknown query parameter %q: this endpoint takes no query parameters", name)
			}
			return nil, protocol.Invalid("unknown query parameter %q: this endpoint takes %s", name, strings.Join(rule.params, ", "))
		}
		vals := q[name]
		if len(vals) > 1 {
			return nil, protocol.Invalid("query parameter %s is given %d times; it takes one value", name, len(vals))
		}
		switch v := vals[0]; {
		case v == "":
			return nil, protocol.Invalid("query parameter %s has no value", name)
		case !utf8.ValidString(v):
			return nil, protocol.Invalid("query parameter %s is not valid UTF-8", name)
		case strings.IndexByte(v, 0) >= 0:
			return nil, protocol.Invalid("query parameter %s contains a NUL character", name)
		}
	}
	for _, pair := range rule.aliases {
		if q.Has(pair[0]) && q.Has(pair[1]) {
			return nil, protocol.Invalid("query parameters %s and %s are one parameter; give only one of them", pair[0], pair[1])
		}
	}
	for _, name := range names {
		if need, ok := rule.needs[name]; ok && !q.Has(need) {
			return nil, protocol.Invalid("query parameter %s requires %s", name, need)
		}
	}
	if rule.alone != "" && q.Has(rule.alone) && len(q) > 1 {
		return nil, protocol.Invalid("query parameter %s cannot be combined with other parameters", rule.alone)
	}
	return q, nil
}

// query returns the request's query parameters, as checked by strictQuery
// against the route's rule. On a route without strictQuery they are checked
// on first use against the zero rule: such a route takes no parameters.
// Every handler that can be reached with a query string calls it (or runs
// behind strictQuery) before anything else.
func query(c echo.Context) (url.Values, error) {
	if st := state(c); st.queried {
		return st.query, nil
	}
	return checkedQuery(c, queryRule{})
}

// checkedQuery checks the query string against rule and keeps the result
// for query.
func checkedQuery(c echo.Context, rule queryRule) (url.Values, error) {
	q, err := checkQuery(c, rule)
	if err != nil {
		return nil, err
	}
	st := state(c)
	st.query, st.queried = q, true
	return q, nil
}

// parseQuery splits a query string like url.ParseQuery, but refuses what
// url.ParseQuery (and so echo's QueryParam) would silently drop: a pair that
// is not properly percent-encoded, or a ";" separator.
func parseQuery(raw string) (url.Values, error) {
	q := url.Values{}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		if strings.Contains(pair, ";") {
			return nil, protocol.Invalid("query string: %q contains a \";\"; separate parameters with \"&\"", pair)
		}
		k, v, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			return nil, protocol.Invalid("query parameter name %q is not properly percent-encoded", k)
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return nil, protocol.Invalid("query parameter %q is not properly percent-encoded", name)
		}
		q[name] = append(q[name], value)
	}
	return q, nil
}
