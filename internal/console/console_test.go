package console

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestHandler(t *testing.T) {
	h := Handler("/console")

	rec := get(t, h, "GET", "/console", nil)
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/console/" {
		t.Fatalf("/console: %d Location %q", rec.Code, rec.Header().Get("Location"))
	}

	for path, ctype := range map[string]string{
		"/console/":            "text/html; charset=utf-8",
		"/console/index.html":  "text/html; charset=utf-8",
		"/console/main.js":     "text/javascript; charset=utf-8",
		"/console/api.js":      "text/javascript; charset=utf-8",
		"/console/console.css": "text/css; charset=utf-8",
		// The icon (no /favicon.ico 404) and the vendored chart library
		// with its licence.
		"/console/favicon.svg":              "image/svg+xml",
		"/console/vendor/uPlot.iife.min.js": "text/javascript; charset=utf-8",
		"/console/vendor/uPlot.min.css":     "text/css; charset=utf-8",
		"/console/vendor/uPlot.LICENSE.txt": "text/plain; charset=utf-8",
	} {
		rec := get(t, h, "GET", path, nil)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != ctype || rec.Body.Len() == 0 {
			t.Fatalf("%s: %d %q, %d bytes", path, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len())
		}
		for k, v := range securityHeaders {
			if rec.Header().Get(k) != v {
				t.Fatalf("%s: %s = %q", path, k, rec.Header().Get(k))
			}
		}
		if rec.Header().Get("Cache-Control") != "no-cache" || rec.Header().Get("ETag") == "" {
			t.Fatalf("%s: cache headers %v", path, rec.Header())
		}
		again := get(t, h, "GET", path, map[string]string{"If-None-Match": rec.Header().Get("ETag")})
		if again.Code != http.StatusNotModified || again.Body.Len() != 0 {
			t.Fatalf("%s with its ETag: %d", path, again.Code)
		}
		if stale := get(t, h, "GET", path, map[string]string{"If-None-Match": `"stale"`}); stale.Code != http.StatusOK {
			t.Fatalf("%s with a stale ETag: %d", path, stale.Code)
		}
	}
	csp := securityHeaders["Content-Security-Policy"]
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Fatalf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-") {
		t.Fatalf("CSP allows unsafe sources: %q", csp)
	}

	for _, path := range []string{"/console/nope.js", "/console/assets/main.js", "/console/../server.go", "/consolex", "/console/x/"} {
		if rec := get(t, h, "GET", path, nil); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"not_found"`) {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
	if rec := get(t, h, "POST", "/console/", nil); rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", rec.Code)
	}
	if rec := get(t, h, "HEAD", "/console/main.js", nil); rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Fatalf("HEAD: %d, %d bytes", rec.Code, rec.Body.Len())
	}
}

// TestAssetsStayText is a static guard over the embedded files: no API
// that parses a string as HTML or code, and no inline script or handler
// (the CSP would refuse them anyway; this keeps them from being written).
func TestAssetsStayText(t *testing.T) {
	banned := regexp.MustCompile(`\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function\(|createContextualFragment|setTimeout\(['"]`)
	inline := regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]|\son[a-z]+\s*=|javascript:`)
	n := 0
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		switch {
		case strings.HasSuffix(p, ".js"):
			if m := banned.Find(b); m != nil {
				t.Errorf("%s uses %s", p, m)
			}
		case strings.HasSuffix(p, ".html"):
			if m := inline.Find(b); m != nil {
				t.Errorf("%s has inline script or a handler: %s", p, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 7 {
		t.Fatalf("only %d assets embedded", n)
	}
}
