package chorus

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"

	"code.dny.dev/ssrf"
)

// newClient returns the one HTTP client deliveries use. Its dialer checks
// every address it connects to (net.Dialer.Control, after DNS resolution),
// so a name that resolves, or re-resolves, to a private, loopback,
// link-local or metadata address is refused (code.dny.dev/ssrf's deny list
// of the IANA special-purpose registries). Redirects are not followed, no
// proxy is taken from the environment, and every phase has a timeout.
func newClient(cfg Config) *http.Client {
	var opts []ssrf.Option
	opts = append(opts, ssrf.WithAnyPort())
	if cfg.AllowLoopback {
		opts = append(opts, ssrf.WithAllowedV4Prefixes(netip.MustParsePrefix("127.0.0.0/8")),
			ssrf.WithAllowedV6Prefixes(netip.MustParsePrefix("::1/128")))
	}
	guard := ssrf.New(opts...)
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, Control: guard.Safe}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, past the guard
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// refused reports whether err is the guard refusing an address.
func refused(err error) bool {
	return errors.Is(err, ssrf.ErrProhibitedIP) || errors.Is(err, ssrf.ErrProhibitedNetwork) || errors.Is(err, ssrf.ErrProhibitedPort)
}
