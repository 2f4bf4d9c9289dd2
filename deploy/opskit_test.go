package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The operations kit (docs/operators.md) names aspd's metrics in PromQL:
// the alerting rules (prometheus/aspd-rules.yml) and the dashboard
// (grafana/aspd-dashboard.json). A metric renamed in the code, or a typo
// in a query, would leave an alert that never fires and a panel that stays
// empty, silently: these tests name every metric each query uses and
// require each to be one aspd registers. promtool (scripts/check-deploy.sh)
// checks the rules' syntax and behaviour; it cannot know aspd's names.

// metricKinds are the metric names aspd's source registers (a prometheus
// Name: option or a NewDesc), each with whether it is a histogram.
func metricKinds(t *testing.T) map[string]bool {
	t.Helper()
	// Name: "aspd_..." in an Opts literal, or the first argument of NewDesc.
	named := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(aspd_[a-z0-9_]+)"`)
	kinds := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range named.FindAllSubmatchIndex(src, -1) {
			name := string(src[m[2]:m[3]])
			// A histogram's options literal opens shortly before its name.
			before := string(src[max(0, m[0]-80):m[0]])
			kinds[name] = kinds[name] || strings.Contains(before, "HistogramOpts")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The parse must find what aspd is known to export, or it proves nothing.
	for name, hist := range map[string]bool{"aspd_http_request_duration_seconds": true, "aspd_delivery_latency_seconds": true,
		"aspd_slow_consumers_total": false, "aspd_chorus_outbox_pending": false, "aspd_cluster_peers": false} {
		if h, ok := kinds[name]; !ok || h != hist {
			t.Fatalf("the source's metrics %v: %s missing or not of its kind (histogram %v)", kinds, name, hist)
		}
	}
	return kinds
}

// otherMetrics are the series a query may name that are not aspd's own:
// Prometheus's scrape health, and the Go runtime and process collectors
// aspd registers (server/metrics.go).
var otherMetrics = map[string]bool{"up": true, "go_goroutines": true, "process_resident_memory_bytes": true}

// knownMetric reports whether a series name is one aspd exports.
func knownMetric(kinds map[string]bool, name string) bool {
	if otherMetrics[name] {
		return true
	}
	if _, ok := kinds[name]; ok {
		return true
	}
	base := seriesBase(name)
	return base != name && kinds[base] // a histogram's series
}

// seriesBase is a histogram series' metric (name without _bucket, _sum,
// _count); other names are their own.
func seriesBase(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			return base
		}
	}
	return name
}

var (
	promString    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^{}]*\}`)
	promRange     = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promVariable  = regexp.MustCompile(`\$\{?\w+\}?`)
	promNumber    = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:ms|s|m|h|d|w|y)*\b`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(?:\s*\()?`)
	promOperators = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
)

// queryMetrics are the metric names a PromQL expression (or a Grafana
// label_values query) selects: its identifiers that are neither functions,
// keywords, label names (in matchers and groupings) nor Grafana variables.
func queryMetrics(expr string) []string {
	e := promVariable.ReplaceAllString(expr, " ")
	e = promString.ReplaceAllString(e, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRange.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	e = promNumber.ReplaceAllString(e, " ")
	// label_values(metric, label): the label is not a metric.
	e = regexp.MustCompile(`label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*\w+\s*\)`).ReplaceAllString(e, "$1")
	var names []string
	for _, id := range promIdent.FindAllString(e, -1) {
		if strings.HasSuffix(id, "(") || promOperators[strings.ToLower(id)] {
			continue // a function call, an operator
		}
		names = append(names, id)
	}
	return names
}

// TestQueryMetricsParse: the parser finds the metrics of a query and
// nothing else, so the checks below can fail.
func TestQueryMetricsParse(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (instance) (rate(aspd_x_total{status="5xx", route!="/a b"}[5m])) / sum without (le) (aspd_y) > 0.05`: {"aspd_x_total", "aspd_y"},
		`histogram_quantile(0.99, sum by (le) (rate(aspd_h_bucket{instance=~"$instance"}[$__rate_interval])))`:       {"aspd_h_bucket"},
		`aspd_a < scalar(count(up{job="aspd"})) - 1 or aspd_b offset 5m`:                                             {"aspd_a", "up", "aspd_b"},
		`label_values(aspd_build_info, instance)`:                                                                    {"aspd_build_info"},
	} {
		if got := queryMetrics(expr); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", expr, got, want)
		}
	}
	kinds := map[string]bool{"aspd_h": true, "aspd_c_total": false}
	for name, want := range map[string]bool{"aspd_h_bucket": true, "aspd_h_count": true, "aspd_c_total": true,
		"aspd_c_total_count": false, "aspd_nope": false, "up": true} {
		if knownMetric(kinds, name) != want {
			t.Errorf("knownMetric(%s) = %v", name, !want)
		}
	}
}

// checkQuery fails the test for each metric of expr aspd does not export,
// and for a query that names none.
func checkQuery(t *testing.T, kinds map[string]bool, where, expr string) {
	t.Helper()
	names := queryMetrics(expr)
	if len(names) == 0 {
		t.Errorf("%s: %q names no metric", where, expr)
	}
	for _, n := range names {
		if !knownMetric(kinds, n) {
			t.Errorf("%s: %s is not a metric aspd exports (query %q)", where, n, expr)
		}
	}
}

// TestOpsKitNamesExistingMetrics: every alert expression and every
// dashboard query names only metrics aspd exports.
func TestOpsKitNamesExistingMetrics(t *testing.T) {
	kinds := metricKinds(t)

	// The rules file: each `expr:` (a one-line value or a "|" block).
	rules, err := os.ReadFile(filepath.Join("prometheus", "aspd-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	var alert string
	lines := strings.Split(string(rules), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if a, ok := strings.CutPrefix(line, "- alert:"); ok {
			alert = strings.TrimSpace(a)
			alerts++
			continue
		}
		expr, ok := strings.CutPrefix(line, "expr:")
		if !ok {
			continue
		}
		expr = strings.TrimSpace(expr)
		if expr == "|" {
			indent := len(lines[i+1]) - len(strings.TrimLeft(lines[i+1], " "))
			var block []string
			for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) >= indent) {
				i++
				block = append(block, lines[i])
			}
			expr = strings.Join(block, "\n")
		}
		checkQuery(t, kinds, "aspd-rules.yml "+alert, expr)
	}
	if alerts < 8 {
		t.Errorf("aspd-rules.yml: %d alerts found, want the 8 of docs/operators.md", alerts)
	}

	// The dashboard: valid JSON, unique panel ids, every target's expr
	// and every query variable.
	raw, err := os.ReadFile(filepath.Join("grafana", "aspd-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Type    string   `json:"type"`
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
	}
	var dash struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("aspd-dashboard.json: not valid JSON: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("aspd-dashboard.json: uid %q title %q", dash.UID, dash.Title)
	}
	ids := map[int]bool{}
	queries := 0
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkQuery(t, kinds, "panel "+p.Title, tg.Expr)
			queries++
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		checkQuery(t, kinds, "variable "+v.Name, q)
	}
	if queries < 10 {
		t.Errorf("aspd-dashboard.json: %d queries found", queries)
	}

	// Every alert's metrics are on the dashboard too, so that an alert can
	// be looked at: a metric of the rules no panel shows is reported.
	onDash := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range queryMetrics(tg.Expr) {
				onDash[seriesBase(n)] = true
			}
		}
	}
	for _, n := range regexp.MustCompile(`aspd_[a-z0-9_]+`).FindAllString(string(rules), -1) {
		if !onDash[seriesBase(n)] {
			t.Errorf("aspd-rules.yml uses %s, which no dashboard panel shows", n)
		}
	}
}
