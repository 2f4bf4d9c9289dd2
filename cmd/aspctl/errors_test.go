package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// Client errors read as sentences that say what is wrong and what to do.
func TestClientErrorsAreSentences(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, tc := range []struct {
		server string
		code   int
		want   []string
	}{
		{"localhost:8080", 2, []string{`--server "localhost:8080" is not an aspd address`, "did you mean --server http://localhost:8080?"}},
		{"ht!tp:/garbage", 2, []string{"is not an aspd address", "e.g. --server http://127.0.0.1:8080"}},
		{"ftp://example.test", 2, []string{"is not an aspd address"}},
		{down, 1, []string{"nothing answers at " + down + " (connection refused)", "is aspd running there?", "--server URL"}},
	} {
		for _, cmd := range [][]string{{"session", "list"}, {"listen"}} {
			var out, errb bytes.Buffer
			args := append([]string{"--server", tc.server, "--token", "tok"}, cmd...)
			code := run(args, &out, &errb)
			msg := errb.String()
			if code != tc.code {
				t.Errorf("%v: exit %d, want %d (%s)", args, code, tc.code, msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%v: %q lacks %q", args, msg, w)
				}
			}
			if strings.Contains(msg, "dial tcp") || strings.Contains(msg, "Get \"") {
				t.Errorf("%v: a raw Go error: %s", args, msg)
			}
		}
	}
}
