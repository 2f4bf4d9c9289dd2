// Package deploy holds no code: its tests check the deployment files beside
// them: nginx.cluster.conf (and its copy in docs/cluster.md), so that neither
// routes a node-local path round-robin; and the operations kit (opskit_test.go),
// whose alert rules and dashboard may name only metrics aspd exports.
package deploy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// location is one nginx location block: its modifier ("", "=", "~", "~*",
// "^~"), its argument and the upstream its proxy_pass names.
type location struct {
	modifier, arg, upstream string
	re                      *regexp.Regexp
}

var (
	locationLine = regexp.MustCompile(`^\s*location\s+(?:(=|~\*|~|\^~)\s+)?(\S+)\s*\{`)
	proxyPass    = regexp.MustCompile(`^\s*proxy_pass\s+https?://([A-Za-z0-9_.-]+)`)
)

// parseLocations reads the location blocks of an nginx configuration (flat
// ones, as ours are: no nested location).
func parseLocations(t *testing.T, conf string) []location {
	t.Helper()
	var locs []location
	var cur *location
	sc := bufio.NewScanner(strings.NewReader(conf))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if m := locationLine.FindStringSubmatch(line); m != nil {
			locs = append(locs, location{modifier: m[1], arg: m[2]})
			cur = &locs[len(locs)-1]
			if cur.modifier == "~" || cur.modifier == "~*" {
				expr := cur.arg
				if cur.modifier == "~*" {
					expr = "(?i)" + expr
				}
				// nginx uses PCRE; these expressions are in the subset RE2 shares.
				re, err := regexp.Compile(expr)
				if err != nil {
					t.Fatalf("location %s %s: %v", cur.modifier, cur.arg, err)
				}
				cur.re = re
			}
			continue
		}
		if m := proxyPass.FindStringSubmatch(line); m != nil && cur != nil && cur.upstream == "" {
			cur.upstream = m[1]
		}
		if strings.TrimSpace(line) == "}" {
			cur = nil
		}
	}
	if len(locs) == 0 {
		t.Fatal("no location block found")
	}
	return locs
}

// route picks the location nginx picks for uri (ngx_http_core_module,
// "location"): an exact match; else the longest prefix, final if it is ^~;
// else the first matching regular expression in file order; else the
// longest prefix.
func route(locs []location, uri string) string {
	var longest *location
	for i := range locs {
		l := &locs[i]
		switch l.modifier {
		case "=":
			if uri == l.arg {
				return l.upstream
			}
		case "", "^~":
			if strings.HasPrefix(uri, l.arg) && (longest == nil || len(l.arg) > len(longest.arg)) {
				longest = l
			}
		}
	}
	if longest != nil && longest.modifier == "^~" {
		return longest.upstream
	}
	for _, l := range locs {
		if l.re != nil && l.re.MatchString(uri) {
			return l.upstream
		}
	}
	if longest == nil {
		return ""
	}
	return longest.upstream
}

// nodeLocal are the paths whose state lives in one node's memory
// (docs/cluster.md, "Per-node state"): the frame streams, their roster,
// frame submissions, and MCP, whose post_frame and get_roster reach the same
// in-memory fan-out. Every other path reads the shared database.
var (
	nodeLocal = []string{"/stream", "/stream/roster", "/frames", "/mcp"}
	shared    = []string{"/", "/sessions", "/sessions/sess_01J/events", "/sessions/sess_01J/messages",
		"/decisions/pending", "/decisions/msg_01J/await", "/admin/v1/agents", "/admin/v1/sessions/sess_01J/events/live",
		"/healthz", "/readyz", "/metrics", "/console", "/chorus/callback/tok",
		"/streams", "/stream/other", "/stream/roster/x", "/framesx", "/mcp/x", "/x/stream"}
)

func checkRouting(t *testing.T, name, conf string) {
	t.Helper()
	locs := parseLocations(t, conf)
	for _, p := range nodeLocal {
		if got := route(locs, p); got != "aspd_frames" {
			t.Errorf("%s: %s goes to upstream %q, want aspd_frames (its state is in one node's memory)", name, p, got)
		}
	}
	for _, p := range shared {
		if got := route(locs, p); got != "aspd" {
			t.Errorf("%s: %s goes to upstream %q, want aspd", name, p, got)
		}
	}
	if got := route(locs, "/connect"); got != "aspd" {
		t.Errorf("%s: /connect goes to upstream %q, want aspd", name, got)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// nginxBlock returns the ```nginx block of docs/cluster.md.
func nginxBlock(t *testing.T) string {
	t.Helper()
	doc := readFile(t, filepath.Join("..", "docs", "cluster.md"))
	_, rest, ok := strings.Cut(doc, "\n```nginx\n")
	if !ok {
		t.Fatal("docs/cluster.md has no ```nginx block")
	}
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatal("docs/cluster.md: unterminated ```nginx block")
	}
	return block
}

func TestClusterConfigRoutesNodeLocalPaths(t *testing.T) {
	checkRouting(t, "deploy/nginx.cluster.conf", readFile(t, "nginx.cluster.conf"))
	checkRouting(t, "docs/cluster.md", nginxBlock(t))
}

// The routing emulation itself: a location that matched only /stream (the
// old configuration) must be caught.
func TestRouteCatchesTheOldLocation(t *testing.T) {
	old := "location / {\n proxy_pass http://aspd;\n}\nlocation ~ ^/(stream|frames)$ {\n proxy_pass http://aspd_frames;\n}\n"
	locs := parseLocations(t, old)
	if got := route(locs, "/stream/roster"); got != "aspd" {
		t.Fatalf("old config: /stream/roster -> %q, want aspd (round-robin: the bug)", got)
	}
	if got := route(locs, "/stream"); got != "aspd_frames" {
		t.Fatalf("old config: /stream -> %q", got)
	}
	exact := "location = /connect {\n proxy_pass http://ws;\n}\nlocation ^~ /admin {\n proxy_pass http://adm;\n}\nlocation ~ ^/admin/x$ {\n proxy_pass http://re;\n}\n"
	locs = parseLocations(t, exact)
	for uri, want := range map[string]string{"/connect": "ws", "/admin/x": "adm", "/connectx": ""} {
		if got := route(locs, uri); got != want {
			t.Errorf("%s -> %q, want %q", uri, got, want)
		}
	}
}

// TestClusterConfigInNginx runs deploy/nginx.cluster.conf in a real nginx
// (nginx -t, then serving), with the two node names pointed at two stub
// backends, and checks which backend answers each path: node-local paths
// always reach the first node, the rest both. Without an nginx binary
// (Debian package nginx-light) it skips loudly; ASPD_REQUIRE_NGINX=1 makes
// that a failure.
func TestClusterConfigInNginx(t *testing.T) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr == nil {
			bin, err = "/usr/sbin/nginx", nil
		}
	}
	if err != nil {
		msg := "*** nginx not found (Debian package nginx-light): the configuration is not run in nginx."
		if os.Getenv("ASPD_REQUIRE_NGINX") == "1" {
			t.Fatal(msg + " ASPD_REQUIRE_NGINX=1: failing instead of skipping.")
		}
		t.Skip(msg)
	}

	backend := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s", name, r.URL.Path)
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	node1, node2 := backend("aspd-1"), backend("aspd-2")
	port := freePort(t)

	conf := readFile(t, "nginx.cluster.conf")
	for old, repl := range map[string]string{"aspd-1:8080": node1, "aspd-2:8080": node2, "listen 80;": "listen 127.0.0.1:" + port + ";"} {
		if !strings.Contains(conf, old) {
			t.Fatalf("nginx.cluster.conf no longer contains %q: update this test", old)
		}
		conf = strings.ReplaceAll(conf, old, repl)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cluster.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// The deploy file is an http-level include (conf.d/default.conf in the
	// nginx image); wrap it in a main configuration of our own.
	main := fmt.Sprintf(`daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events {}
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/cluster.conf;
}
`, dir)
	mainPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(mainPath, []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-t", "-p", dir, "-c", mainPath).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-p", dir, "-c", mainPath)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })

	base := "http://127.0.0.1:" + port
	get := func(path string) string {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s: %v\n%s", port, err, readFile(t, filepath.Join(dir, "error.log")))
		}
		time.Sleep(50 * time.Millisecond)
	}

	for _, p := range nodeLocal {
		for i := 0; i < 4; i++ {
			if got, want := get(p), "aspd-1 "+p; got != want {
				t.Fatalf("GET %s (request %d) answered %q, want %q: node-local state must stay on one node", p, i+1, got, want)
			}
		}
	}
	for _, p := range []string{"/sessions", "/decisions/pending", "/streams"} {
		seen := map[string]bool{}
		for i := 0; i < 4; i++ {
			node, _, _ := strings.Cut(get(p), " ")
			seen[node] = true
		}
		if !seen["aspd-1"] || !seen["aspd-2"] {
			t.Errorf("GET %s reached %v in 4 requests, want both nodes (round-robin)", p, seen)
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}
