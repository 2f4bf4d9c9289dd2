package store

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Location is the store a database URL names: PostgreSQL (URL set) or an
// embedded SQLite file (Path set).
type Location struct {
	Postgres bool
	URL      string // the PostgreSQL connection URL, scheme in lower case
	Path     string // the SQLite file
}

// AcceptedForms names the database URLs aspd takes, for error messages.
const AcceptedForms = "postgres://USER@HOST:PORT/DB or postgresql://... for PostgreSQL, sqlite:PATH or a plain file path for SQLite"

var (
	// urlScheme matches the scheme of an RFC 3986 URL ("mysql:", "file:").
	urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):`)
	// keywordDSN matches a PostgreSQL keyword/value connection string
	// ("host=db user=aspd password=..."), which would otherwise read as a
	// file name.
	keywordDSN = regexp.MustCompile(`(^|\s)(host|hostaddr|port|dbname|user|password|sslmode|service)\s*=`)
)

// ParseURL reads a database URL. postgres:// and postgresql:// select
// PostgreSQL; sqlite:PATH (sqlite:///abs/path too) or a path with no
// scheme selects SQLite. Anything else with a URL scheme is refused rather
// than taken for a file name: a mistyped or foreign URL (mysql://...) would
// otherwise become a new, empty SQLite store in a file named after it,
// password included. Errors show the URL redacted (RedactURL).
func ParseURL(s string) (Location, error) {
	if strings.TrimSpace(s) == "" {
		return Location{}, fmt.Errorf("store: empty database URL; give %s", AcceptedForms)
	}
	m := urlScheme.FindStringSubmatch(s)
	if m == nil || filepath.VolumeName(s) != "" { // no scheme, or a Windows drive (C:\...)
		if keywordDSN.MatchString(s) {
			return Location{}, fmt.Errorf("store: %q looks like a PostgreSQL keyword/value connection string; give it as a URL instead (%s)", RedactURL(s), AcceptedForms)
		}
		return Location{Path: s}, nil
	}
	scheme, rest := strings.ToLower(m[1]), s[len(m[0]):]
	switch scheme {
	case "postgres", "postgresql":
		if !strings.HasPrefix(rest, "//") {
			break
		}
		return Location{Postgres: true, URL: scheme + ":" + rest}, nil
	case "sqlite":
		path := rest
		if strings.HasPrefix(rest, "//") {
			// sqlite:///abs/path is an absolute path; sqlite://x has a host
			// part where a path was meant, and is ambiguous.
			if !strings.HasPrefix(rest, "///") {
				break
			}
			path = rest[2:]
		}
		if path == "" {
			break
		}
		return Location{Path: path}, nil
	}
	return Location{}, fmt.Errorf("store: unsupported database URL %q: give %s (a file name that contains a colon is written sqlite:NAME or ./NAME)",
		RedactURL(s), AcceptedForms)
}

// RedactURL returns s with the passwords of a URL's user information and of
// password= parameters (query or keyword/value form) replaced by xxxxx, for
// logs and error messages. It works on text that does not parse as a URL
// (several hosts, foreign schemes) and leaves s otherwise as it is.
func RedactURL(s string) string {
	s = redactUserinfo(s)
	return passwordParam.ReplaceAllString(s, "${1}xxxxx")
}

// passwordParam matches the value of a password parameter: password=...,
// sslpassword=... in a query string or a keyword/value string.
var passwordParam = regexp.MustCompile(`(?i)((?:^|[?&\s])(?:ssl)?password\s*=\s*)('[^']*'|[^&\s#]*)`)

// redactUserinfo hides the password in scheme://user:password@host. The
// user information ends at the last '@' of the authority (up to the first
// '/', '?' or '#'); with no '@' there, at the last '@' of the rest, since a
// password may hold an unescaped '/', '?' or '#'. That may hide more than
// the password, never less.
func redactUserinfo(s string) string {
	scheme := urlScheme.FindString(s)
	if scheme == "" || !strings.HasPrefix(s[len(scheme):], "//") {
		return s
	}
	start := len(scheme) + 2
	rest := s[start:]
	end := len(rest)
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		end = j
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		at = strings.LastIndex(rest, "@")
	}
	if at < 0 {
		return s
	}
	colon := strings.Index(rest[:at], ":")
	if colon < 0 {
		return s
	}
	return s[:start+colon+1] + "xxxxx" + rest[at:]
}
