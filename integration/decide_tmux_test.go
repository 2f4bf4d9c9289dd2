package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/internal/dbtest"
)

// TestDecideInTmux drives `aspctl decide` in a real terminal: tmux runs the
// built aspctl against a real aspd, send-keys moves and chooses, and
// capture-pane checks what the principal sees (draft section 8.1: every
// briefing slot, the recommended marker, both hatches) and that the choice
// reached the server. Without tmux it skips loudly; with
// ASPD_REQUIRE_TMUX=1 (CI) that is a failure.
func TestDecideInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("ASPD_REQUIRE_TMUX") == "1" {
			t.Fatalf("tmux is required (ASPD_REQUIRE_TMUX=1) but not found: %v", err)
		}
		t.Skip("SKIPPED: tmux is not installed, so aspctl decide is not tested in a terminal (set ASPD_REQUIRE_TMUX=1 to make this a failure)")
	}
	bin := aspctlBin(t)
	// The store does not matter to a terminal test; decisions_test.go runs
	// both.
	s := startServer(t, dbtest.SQLite(t))
	bot := s.provision("@nick.assistant", "open")
	nick := s.provision("@nick.human", "open")
	sid := bot.createSession(map[string]any{"invite": []string{nick.handle}})
	nick.join(sid)

	tm := newTmux(t)
	request := func(tag string) string {
		out := bot.must(http.StatusCreated, "POST", "/sessions/"+sid+"/messages", map[string]any{"content": []any{
			map[string]any{"type": "data", "data": map[string]any{"binding_moment": testEnvelope(tag), "resolver": nick.handle}}}}, "")
		var r struct {
			MessageID string `json:"message_id"`
		}
		mustUnmarshal(t, out, &r)
		return r.MessageID
	}
	run := func(window string) {
		// The token travels in the environment, not on a command line.
		tm.cmd("new-window", "-d", "-t", "decide", "-n", window, "-e", "ASPCTL_SERVER="+s.url, "-e", "ASPCTL_TOKEN="+nick.token,
			"sh", "-c", bin+` decide; echo "EXIT=$?"; sleep 120`)
	}

	// 1. Arrow keys: the cursor starts on the recommended option; Down and
	// Enter choose the second.
	m1 := request("fleet")
	run("pick")
	screen := tm.waitFor("pick", "enter: choose")
	env := testEnvelope("fleet")
	q := env["question"].(map[string]any)
	want := []string{"SYNOPSIS", env["synopsis"].(string), "FINDINGS", "RECOMMENDATIONS", "OFFER", env["offer"].(string), "QUESTION", q["stem"].(string),
		"a: answer in my own words", "r: refer the question back"}
	for _, f := range append(env["findings"].([]any), env["recommendations"].([]any)...) {
		want = append(want, f.(string))
	}
	for _, o := range q["options"].([]any) {
		want = append(want, o.(map[string]any)["label"].(string), o.(map[string]any)["reasoning"].(string))
	}
	for _, w := range want {
		if !strings.Contains(screen, w) {
			t.Fatalf("the screen lacks %q:\n%s", w, screen)
		}
	}
	// The recommended marker is on the recommended option's line, and only there.
	if n := strings.Count(screen, "[recommended]"); n != 1 || !strings.Contains(lineWith(screen, "Renew fleet"), "[recommended]") {
		t.Fatalf("recommended marker (%d) not on option 1:\n%s", n, screen)
	}
	if !strings.HasPrefix(strings.TrimSpace(lineWith(screen, "Renew fleet")), ">") {
		t.Fatalf("the cursor does not start on the recommended option:\n%s", screen)
	}
	tm.cmd("send-keys", "-t", "decide:pick", "Down")
	tm.waitFor("pick", "> 2. Tender fleet")
	tm.cmd("send-keys", "-t", "decide:pick", "Enter")
	tm.waitFor("pick", "EXIT=0")
	d := decisionOf(t, nick, m1)
	if d.Resolution == nil || d.Resolution.Outcome != "selected" || d.Resolution.OptionIdx == nil || *d.Resolution.OptionIdx != 1 {
		t.Fatalf("after Down, Enter: %+v", d.Resolution)
	}

	// 2. The question-space hatch is a key: r, an objection, Enter.
	m2 := request("office")
	run("refer")
	tm.waitFor("refer", "r: refer the question back")
	tm.cmd("send-keys", "-t", "decide:refer", "r")
	tm.waitFor("refer", "Why is this the wrong question?")
	tm.cmd("send-keys", "-t", "decide:refer", "-l", "Ask after the move")
	tm.waitFor("refer", "Ask after the move_")
	tm.cmd("send-keys", "-t", "decide:refer", "Enter")
	tm.waitFor("refer", "EXIT=0")
	d = decisionOf(t, nick, m2)
	if d.Resolution == nil || d.Resolution.Outcome != "referred_back" || d.Resolution.Objection != "Ask after the move" {
		t.Fatalf("after r: %+v", d.Resolution)
	}

	// 3. The answer-space hatch: a, an answer, Enter.
	m3 := request("cloud")
	run("answer")
	tm.waitFor("answer", "a: answer in my own words")
	tm.cmd("send-keys", "-t", "decide:answer", "a")
	tm.waitFor("answer", "Your answer:")
	tm.cmd("send-keys", "-t", "decide:answer", "-l", "Renew for one year")
	tm.waitFor("answer", "Renew for one year_")
	tm.cmd("send-keys", "-t", "decide:answer", "Enter")
	tm.waitFor("answer", "EXIT=0")
	d = decisionOf(t, nick, m3)
	if d.Resolution == nil || d.Resolution.Outcome != "answered" || d.Resolution.Answer != "Renew for one year" {
		t.Fatalf("after a: %+v", d.Resolution)
	}
}

func decisionOf(t *testing.T, a *agent, momentID string) decisionDoc {
	t.Helper()
	var d decisionDoc
	mustUnmarshal(t, a.must(http.StatusOK, "GET", "/decisions/"+momentID, nil, ""), &d)
	return d
}

func lineWith(screen, s string) string {
	for _, l := range strings.Split(screen, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// tmux is a tmux server of the test's own (-L socket), killed in Cleanup.
type tmux struct {
	t      *testing.T
	socket string
}

func newTmux(t *testing.T) *tmux {
	tm := &tmux{t: t, socket: fmt.Sprintf("aspd-decide-%d-%d", os.Getpid(), time.Now().UnixNano())}
	// A wide, tall window, so the whole moment fits on screen; the first
	// window only holds the session open.
	tm.cmd("new-session", "-d", "-s", "decide", "-x", "200", "-y", "60", "sleep 600")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, "tmux", "-L", tm.socket, "kill-server").Run()
	})
	return tm
}

// cmd runs one tmux command, bounded.
func (tm *tmux) cmd(args ...string) string {
	tm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "tmux", append([]string{"-L", tm.socket, "-f", "/dev/null"}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

// waitFor polls window's screen until it shows s (at most 20 s) and
// returns the screen.
func (tm *tmux) waitFor(window, s string) string {
	tm.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var screen string
	for time.Now().Before(deadline) {
		screen = tm.cmd("capture-pane", "-p", "-t", "decide:"+window)
		if strings.Contains(screen, s) {
			return screen
		}
		time.Sleep(100 * time.Millisecond)
	}
	tm.t.Fatalf("the screen never showed %q:\n%s", s, screen)
	return ""
}
