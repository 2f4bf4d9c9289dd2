package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
)

const testEnvelopeJSON = `{"synopsis":"Ship v1.2 today.","findings":["CI is green.","No blockers."],"recommendations":["Tag v1.2.","Announce it."],
"offer":"Ask for detail on any item.","question":{"stem":"When should v1.2 ship?","options":[{"label":"Today","reasoning":"Nothing blocks it."},
{"label":"Monday","reasoning":"More soak time."},{"label":"Never","reasoning":"If the release is cancelled."}],"recommended_idx":1,
"hatches":{"free_text":true,"dialogue":false}}}`

func testDecision(t *testing.T) *decision {
	t.Helper()
	bm, ferr := frame.ValidateBindingMoment([]byte(testEnvelopeJSON))
	if ferr != nil {
		t.Fatal(ferr)
	}
	return &decision{Decision: protocol.Decision{MomentID: "msg_01A", SessionID: "sess_01A", Emitter: "@acme.bot",
		Status: protocol.DecisionOpen, BindingMoment: json.RawMessage(testEnvelopeJSON)}, envelope: bm}
}

// TestRenderSlots: the renderer contract of section 8.1 in text.
func TestRenderSlots(t *testing.T) {
	out := render(testDecision(t), 0, "")
	for _, want := range []string{"Ship v1.2 today.", "CI is green.", "No blockers.", "Tag v1.2.", "Announce it.", "Ask for detail on any item.",
		"When should v1.2 ship?", "1. Today", "why: Nothing blocks it.", "2. Monday", "why: More soak time.", "3. Never", "a: answer in my own words"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "refer the question back") {
		t.Errorf("a closed dialogue hatch is offered:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, recommendedMark) != strings.Contains(l, "2. Monday") {
			t.Errorf("recommended marker on the wrong line: %q", l)
		}
	}
}

func TestPromptDecision(t *testing.T) {
	for _, tc := range []struct {
		input string
		want  *protocol.ResolveRequest
	}{
		{"3\n", &protocol.ResolveRequest{Outcome: protocol.OutcomeSelected, OptionIdx: ptrInt(2)}},
		{"9\nr\nx\n1\n", &protocol.ResolveRequest{Outcome: protocol.OutcomeSelected, OptionIdx: ptrInt(0)}}, // r: the hatch is closed
		{"a\n\nSoon\n", &protocol.ResolveRequest{Outcome: protocol.OutcomeAnswered, Answer: "Soon"}},
		{"q\n", nil},
		{"", nil},
	} {
		var out bytes.Buffer
		got, err := promptDecision(&out, bufio.NewReader(strings.NewReader(tc.input)), testDecision(t))
		if err != nil || !sameResolution(got, tc.want) {
			t.Errorf("%q: got %+v, %v; want %+v\n%s", tc.input, got, err, tc.want, out.String())
		}
	}
}

func sameResolution(a, b *protocol.ResolveRequest) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func press(p *picker, keys ...tea.KeyPressMsg) *picker {
	for _, k := range keys {
		m, _ := p.Update(k)
		p = m.(*picker)
	}
	return p
}

func TestPickerKeys(t *testing.T) {
	down := tea.KeyPressMsg{Code: tea.KeyDown}
	up := tea.KeyPressMsg{Code: tea.KeyUp}
	enter := tea.KeyPressMsg{Code: tea.KeyEnter}
	letter := func(r rune) tea.KeyPressMsg { return tea.KeyPressMsg{Code: r, Text: string(r)} }
	// The cursor starts on the recommended option (index 1).
	if p := press(newPicker(testDecision(t)), down, enter); !sameResolution(p.result, &protocol.ResolveRequest{Outcome: protocol.OutcomeSelected, OptionIdx: ptrInt(2)}) {
		t.Errorf("down, enter: %+v", p.result)
	}
	if p := press(newPicker(testDecision(t)), up, up, enter); !sameResolution(p.result, &protocol.ResolveRequest{Outcome: protocol.OutcomeSelected, OptionIdx: ptrInt(2)}) {
		t.Errorf("up, up (wraps), enter: %+v", p.result)
	}
	p := press(newPicker(testDecision(t)), letter('a'), letter('O'), letter('k'), enter)
	if !sameResolution(p.result, &protocol.ResolveRequest{Outcome: protocol.OutcomeAnswered, Answer: "Ok"}) {
		t.Errorf("a, Ok, enter: %+v", p.result)
	}
	// r does nothing when the dialogue hatch is closed.
	if p := press(newPicker(testDecision(t)), letter('r'), enter); !sameResolution(p.result, &protocol.ResolveRequest{Outcome: protocol.OutcomeSelected, OptionIdx: ptrInt(1)}) {
		t.Errorf("r (closed), enter: %+v", p.result)
	}
	if p := press(newPicker(testDecision(t)), letter('q')); p.result != nil {
		t.Errorf("q: %+v", p.result)
	}
}

// TestDecideMalformedFallback: a malformed envelope is never rendered as a
// decision: the record is printed as received, with a diagnostic, and
// nothing is resolved (section 8.3).
func TestDecideMalformedFallback(t *testing.T) {
	resolved := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/decisions/pending":
			w.Write([]byte(`{"decisions":[{"moment_id":"msg_01A","session_id":"sess_01A","sequence":2,"emitter":"@acme.bot","created_at":1,"status":"open",
				"binding_moment":{"synopsis":"Ship.","findings":[],"recommendations":[],"offer":"Ask.","question":{"stem":"Ship?","options":[{"label":"Yes","reasoning":"r"}],"recommended_idx":0,"hatches":{}}}}]}`))
		default:
			resolved = true
			http.Error(w, "unexpected", http.StatusTeapot)
		}
	}))
	defer srv.Close()
	r := ctl(t, "--server", srv.URL, "--token", "t", "decide", "--choice", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "discarded") || !strings.Contains(r.stderr, "question.options") ||
		!strings.Contains(r.stdout, `"synopsis": "Ship."`) || strings.Contains(r.stdout, "SYNOPSIS") || resolved {
		t.Fatalf("exit %d, resolved %v\nstdout: %s\nstderr: %s", r.code, resolved, r.stdout, r.stderr)
	}
	if r := ctl(t, "--server", srv.URL, "--token", "t", "decide", "--choice", "1", "--answer", "x"); r.code != 2 {
		t.Fatalf("two resolutions: exit %d", r.code)
	}
}
