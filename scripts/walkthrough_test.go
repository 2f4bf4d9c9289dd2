// Package scripts holds no code: its tests check the scripts beside them.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// The walkthrough (doc-walkthrough.sh) itself is run on the real docs by
// .ci/run and `make walkthrough`. These tests run it on small documents in
// testdata/walkthrough and check that it catches each kind of drift, and
// names the line.

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// bins builds aspd and aspctl once, for WALK_BIN_DIR.
func bins(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "walkthrough-bin")
		if binErr != nil {
			return
		}
		for _, cmd := range []string{"aspd", "aspctl"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, cmd), "github.com/aspd/aspd/cmd/"+cmd).CombinedOutput()
			if err != nil {
				binErr = err
				t.Logf("%s", out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatalf("building aspd and aspctl: %v", binErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// needTools skips (or, with ASPD_REQUIRE_WALKTHROUGH=1, fails) without the
// script's tools.
func needTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bash", "curl", "jq", "python3", "setsid", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := "*** " + tool + " not found: the doc walkthrough script is not tested."
			if os.Getenv("ASPD_REQUIRE_WALKTHROUGH") == "1" {
				t.Fatal(msg + " ASPD_REQUIRE_WALKTHROUGH=1: failing instead of skipping.")
			}
			t.Skip(msg)
		}
	}
}

// walk runs the script on one test document from the repository root.
func walk(t *testing.T, doc string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "scripts/doc-walkthrough.sh", "scripts/testdata/walkthrough/"+doc)
	cmd.Dir = ".."
	// TMPDIR: a failing run keeps its directory for inspection; here the
	// test's own directory holds it, and is removed.
	cmd.Env = append(os.Environ(), append([]string{"WALK_BIN_DIR=" + bins(t), "TMPDIR=" + t.TempDir()}, env...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestWalkthroughPasses(t *testing.T) {
	needTools(t)
	t.Parallel() // every run has its own aspd, port and directory
	out, err := walk(t, "pass.md")
	if err != nil {
		t.Fatalf("pass.md failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"== doc walkthrough: 3 blocks ran, 1 skipped",
		"skipped scripts/testdata/walkthrough/pass.md:32\tthe script must not run this",
		"starting aspd --log-level debug",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestWalkthroughCatchesDrift(t *testing.T) {
	needTools(t)
	t.Parallel()
	for _, tc := range []struct {
		doc  string
		env  []string
		want string // a regular expression the output must match
	}{
		{"fail-undocumented.md", nil, `(?s)FAIL scripts/testdata/walkthrough/fail-undocumented\.md \(block at line 3\): curl .* answered 404 not_found, which the block does not show.*` +
			`FAIL scripts/testdata/walkthrough/fail-undocumented\.md:7 \(block at line 3\)`},
		{"fail-unseen.md", nil, `FAIL scripts/testdata/walkthrough/fail-unseen\.md \(block at line 3\): the block shows error not_found, but none of its commands answered it`},
		{"fail-command.md", nil, `FAIL scripts/testdata/walkthrough/fail-command\.md:9 .*a command failed \(exit 1\)`},
		{"fail-unset.md", nil, `SESSION_NOBODY_SET: unbound variable`},
		{"fail-annotation.md", nil, `fail-annotation\.md:4: unknown annotation: skipp \(typo\)`},
		{"fail-timeout.md", []string{"WALK_FILE_TIMEOUT=2"}, `FAIL scripts/testdata/walkthrough/fail-timeout\.md: timed out after 2s`},
		{"fail-go.md", nil, `'go test \./\.\.\.' is not run by the walkthrough`},
	} {
		t.Run(tc.doc, func(t *testing.T) {
			t.Parallel()
			out, err := walk(t, tc.doc, tc.env...)
			if err == nil {
				t.Fatalf("%s passed; want a failure:\n%s", tc.doc, out)
			}
			if !regexp.MustCompile(tc.want).MatchString(out) {
				t.Fatalf("output does not match %q:\n%s", tc.want, out)
			}
			if strings.Contains(out, "not reached") {
				t.Fatalf("the block went on after its failure:\n%s", out)
			}
		})
	}
}
