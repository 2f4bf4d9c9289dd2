// Package console is aspd's web console: an operator's pages (agents,
// sessions with live transcripts, search, health) as plain ES modules,
// HTML and CSS embedded in the binary. There is no build step: the files
// in assets/ are what the browser runs. The pages hold no authority of
// their own; every call they make goes to the operator API (/admin/v1) with
// the operator token as a bearer header (docs/console.md).
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// securityHeaders go on every answer of the console. The policy allows
// only the console's own files: no inline script or style, no other
// origin, no framing (clickjacking), no plugins, no <base> rewriting.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
		"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options":       "nosniff",
	"Referrer-Policy":              "no-referrer",
	"X-Frame-Options":              "DENY",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
	"Permissions-Policy":           "camera=(), microphone=(), geolocation=()",
}

// contentTypes are the types of the files the console serves, by extension.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".txt":  "text/plain; charset=utf-8", // vendored licences
}

// file is one embedded asset, with its strong ETag.
type file struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the console under prefix (e.g. "/console"): prefix
// redirects to prefix+"/", which is index.html, and prefix+"/name" is the
// asset of that name. Anything else is 404. Every answer is revalidated
// (Cache-Control: no-cache with an ETag), so an upgraded aspd never serves
// a stale module next to a fresh one, and an unchanged one costs a 304.
func Handler(prefix string) http.Handler {
	files := map[string]file{}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		files[strings.TrimPrefix(p, "assets/")] = file{body: b, ctype: contentTypes[path.Ext(p)], etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		panic("console: reading embedded assets: " + err.Error()) // the binary is broken
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for k, v := range securityHeaders {
			h.Set(k, v)
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
			return
		}
		if r.URL.Path == prefix {
			http.Redirect(w, r, prefix+"/", http.StatusMovedPermanently)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, prefix+"/")
		if !ok {
			writeError(w, http.StatusNotFound, "not_found", "not found")
			return
		}
		if name == "" {
			name = "index.html"
		}
		f, ok := files[name]
		if !ok || f.ctype == "" {
			writeError(w, http.StatusNotFound, "not_found", "not found")
			return
		}
		h.Set("Content-Type", f.ctype)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		if match := r.Header.Get("If-None-Match"); match != "" && match == f.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(f.body)
	})
}

// writeError answers in the operator API's error shape.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"` + msg + `"}}`))
}
