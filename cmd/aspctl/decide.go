package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
)

// aspctl decide: the principal's surface for binding moments
// (docs/decisions.md). It renders one pending moment per the renderer
// contract of the draft "Binding-Moment Envelope" (section 8.1): all four
// briefing slots, every option with its reasoning beside it, the
// recommended option marked in words (not colour alone), and each open
// escape hatch as a key. A malformed envelope is never rendered as a
// decision (section 8.3): the moment's record is printed as it is, with a
// diagnostic.

var decideCommand = &command{name: "decide",
	args: "[--moment ID] [--list] [--accessible] [--choice N | --answer TEXT | --refer-back TEXT]",
	desc: "resolve a pending binding moment (interactive picker, numbered prompts, or flags)", run: decide}

// decision is what decide reads of GET /decisions/...
type decision struct {
	protocol.Decision
	envelope *frame.BindingMoment
}

func decide(a *app, cmd *command, args []string) error {
	fs := a.flags(cmd)
	moment := fs.String("moment", "", "the moment to resolve (default: the oldest pending one)")
	list := fs.Bool("list", false, "print the pending moments as JSON and exit")
	accessible := fs.Bool("accessible", false, "numbered prompts on stdin/stdout instead of the arrow-key picker (also used when stdin is not a terminal)")
	choice := fs.Int("choice", 0, "non-interactive: select option N (1-based, as displayed)")
	answer := fs.String("answer", "", "non-interactive: answer in your own words (the free_text hatch)")
	referBack := fs.String("refer-back", "", "non-interactive: reject the question with this objection (the dialogue hatch)")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "choice" || f.Name == "answer" || f.Name == "refer-back" {
			set = append(set, "--"+f.Name)
		}
	})
	if len(set) > 1 {
		return usageErrorf("decide: give at most one of --choice, --answer, --refer-back (got %s)", strings.Join(set, ", "))
	}
	c, err := a.agentClient()
	if err != nil {
		return err
	}
	if *list {
		return a.show(c, "GET", "/decisions/pending", nil, nil)
	}
	var d protocol.Decision
	if *moment != "" {
		raw, err := c.call(a.ctx, "GET", "/decisions/"+url.PathEscape(*moment), nil, nil)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("decoding the moment: %w", err)
		}
	} else {
		raw, err := c.call(a.ctx, "GET", "/decisions/pending", nil, nil)
		if err != nil {
			return err
		}
		var p protocol.DecisionList
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("decoding pending decisions: %w", err)
		}
		if len(p.Decisions) == 0 {
			fmt.Fprintln(a.stderr, "aspctl: no pending decisions")
			return nil
		}
		d = p.Decisions[0]
	}
	bm, ferr := frame.ValidateBindingMoment(d.BindingMoment)
	if ferr != nil {
		// Section 8.3: the conventional payload and a diagnostic, never a
		// partial or repaired decision.
		raw, _ := json.Marshal(d)
		if err := printJSON(a.stdout, raw); err != nil {
			return err
		}
		return fmt.Errorf("binding moment %s discarded: its envelope is malformed (%s at %q: %s); shown above as received", d.MomentID, ferr.Code, ferr.Field, ferr.Message)
	}
	dec := &decision{Decision: d, envelope: bm}
	if d.Status == protocol.DecisionResolved {
		fmt.Fprint(a.stdout, render(dec, -1, ""))
		return fmt.Errorf("binding moment %s is already resolved (%s by %s)", d.MomentID, d.Resolution.Outcome, d.Resolution.ResolvedBy)
	}

	var res *protocol.ResolveRequest
	q := bm.Question
	switch {
	case len(set) == 1:
		res = &protocol.ResolveRequest{}
		switch set[0] {
		case "--choice":
			if *choice < 1 || *choice > len(q.Options) {
				return usageErrorf("decide: --choice must be 1 to %d", len(q.Options))
			}
			res.Outcome, res.OptionIdx = protocol.OutcomeSelected, ptrInt(*choice-1)
		case "--answer":
			if !q.Hatches.FreeText {
				return usageErrorf("decide: this moment's free_text hatch is closed: --answer is not available")
			}
			res.Outcome, res.Answer = protocol.OutcomeAnswered, *answer
		case "--refer-back":
			if !q.Hatches.Dialogue {
				return usageErrorf("decide: this moment's dialogue hatch is closed: --refer-back is not available")
			}
			res.Outcome, res.Objection = protocol.OutcomeReferredBack, *referBack
		}
	case *accessible || !isTerminal(os.Stdin):
		if res, err = promptDecision(a.stdout, bufio.NewReader(os.Stdin), dec); err != nil {
			return err
		}
	default:
		if res, err = pickDecision(a, dec); err != nil {
			return err
		}
	}
	if res == nil {
		fmt.Fprintln(a.stderr, "aspctl: left undecided")
		return nil
	}
	return a.show(c, "POST", "/decisions/"+url.PathEscape(d.MomentID)+"/resolve", nil, res)
}

func ptrInt(i int) *int { return &i }

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Words, not colour, carry every distinction: a screen reader, a pipe and
// a monochrome terminal all show them.
const (
	recommendedMark = "[recommended]"
	cursorMark      = ">"
	keyAnswer       = "a"
	keyReferBack    = "r"
)

// render is the moment as text: the four briefing slots, the question, each
// option with its reasoning and the recommended marker, and the hatch keys.
// cursor is the highlighted option (-1: none, for the numbered prompt).
func render(d *decision, cursor int, footer string) string {
	bm := d.envelope
	var b strings.Builder
	fmt.Fprintf(&b, "Decision requested by %s (moment %s, session %s)\n", d.Emitter, d.MomentID, d.SessionID)
	if bm.Meta != nil && bm.Meta.CalibrationNote != "" {
		fmt.Fprintf(&b, "\nNOTE: %s\n", bm.Meta.CalibrationNote)
	}
	fmt.Fprintf(&b, "\nSYNOPSIS\n  %s\n", bm.Synopsis)
	b.WriteString("\nFINDINGS\n")
	list(&b, bm.Findings)
	b.WriteString("\nRECOMMENDATIONS\n")
	list(&b, bm.Recommendations)
	fmt.Fprintf(&b, "\nOFFER\n  %s\n", bm.Offer)
	fmt.Fprintf(&b, "\nQUESTION\n  %s\n\n", bm.Question.Stem)
	for i, o := range bm.Question.Options {
		mark := " "
		if i == cursor {
			mark = cursorMark
		}
		rec := ""
		if i == bm.Question.RecommendedIdx {
			rec = "  " + recommendedMark
		}
		fmt.Fprintf(&b, "%s %d. %s%s\n       why: %s\n", mark, i+1, o.Label, rec, o.Reasoning)
	}
	b.WriteString("\n")
	if h := hatchKeys(bm); h != "" {
		fmt.Fprintf(&b, "  %s\n", h)
	}
	b.WriteString(footer)
	return b.String()
}

func list(b *strings.Builder, items []string) {
	if len(items) == 0 {
		b.WriteString("  (none)\n")
	}
	for _, s := range items {
		fmt.Fprintf(b, "  - %s\n", s)
	}
}

// hatchKeys names each open escape hatch and its key.
func hatchKeys(bm *frame.BindingMoment) string {
	var keys []string
	if bm.Question.Hatches.FreeText {
		keys = append(keys, keyAnswer+": answer in my own words")
	}
	if bm.Question.Hatches.Dialogue {
		keys = append(keys, keyReferBack+": refer the question back")
	}
	return strings.Join(keys, "    ")
}

// promptDecision is the accessible mode: the same text, then numbered
// prompts read line by line. EOF or "q" leaves the moment undecided.
func promptDecision(w io.Writer, in *bufio.Reader, d *decision) (*protocol.ResolveRequest, error) {
	q := d.envelope.Question
	fmt.Fprint(w, render(d, -1, ""))
	choices := fmt.Sprintf("1-%d", len(q.Options))
	if q.Hatches.FreeText {
		choices += ", " + keyAnswer
	}
	if q.Hatches.Dialogue {
		choices += ", " + keyReferBack
	}
	for {
		fmt.Fprintf(w, "Choose (%s, or q to quit): ", choices)
		line, err := readLine(in)
		if err != nil {
			return nil, nilOnEOF(err)
		}
		switch {
		case line == "q":
			return nil, nil
		case line == keyAnswer && q.Hatches.FreeText:
			for {
				fmt.Fprint(w, "Your answer: ")
				text, err := readLine(in)
				if err != nil {
					return nil, nilOnEOF(err)
				}
				if text != "" {
					return &protocol.ResolveRequest{Outcome: protocol.OutcomeAnswered, Answer: text}, nil
				}
			}
		case line == keyReferBack && q.Hatches.Dialogue:
			fmt.Fprint(w, "Why is this the wrong question? (optional): ")
			text, err := readLine(in)
			if err != nil {
				return nil, nilOnEOF(err)
			}
			return &protocol.ResolveRequest{Outcome: protocol.OutcomeReferredBack, Objection: text}, nil
		}
		if n, err := strconv.Atoi(line); err == nil && n >= 1 && n <= len(q.Options) {
			return &protocol.ResolveRequest{Outcome: protocol.OutcomeSelected, OptionIdx: ptrInt(n - 1)}, nil
		}
		fmt.Fprintf(w, "%q is not one of %s.\n", line, choices)
	}
}

func readLine(in *bufio.Reader) (string, error) {
	line, err := in.ReadString('\n')
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

func nilOnEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
