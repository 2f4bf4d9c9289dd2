package main

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	"github.com/aspd/aspd/protocol"
)

// The arrow-key picker of aspctl decide, on bubbletea (the Charm terminal
// UI runtime: raw mode, key decoding and redraws are its, the screen is
// render's text). huh's Select was the other candidate, but its fields
// cannot bind extra keys, and each open escape hatch must be a key
// (draft section 8.2) beside the option list.

type pickMode int

const (
	picking   pickMode = iota
	answering          // typing a free-text answer (free_text hatch)
	objecting          // typing an objection (dialogue hatch)
)

type picker struct {
	d      *decision
	cursor int
	mode   pickMode
	text   []rune
	result *protocol.ResolveRequest // nil when the principal quit
}

func newPicker(d *decision) *picker {
	return &picker{d: d, cursor: d.envelope.Question.RecommendedIdx}
}

func (p *picker) Init() tea.Cmd { return nil }

func (p *picker) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	key, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return p, nil
	}
	q := p.d.envelope.Question
	k := key.String()
	if k == "ctrl+c" {
		p.result = nil
		return p, tea.Quit
	}
	if p.mode != picking {
		switch k {
		case "esc":
			p.mode, p.text = picking, nil
		case "enter":
			text := strings.TrimSpace(string(p.text))
			if p.mode == answering {
				if text == "" {
					return p, nil // an answer must say something
				}
				p.result = &protocol.ResolveRequest{Outcome: protocol.OutcomeAnswered, Answer: text}
			} else {
				p.result = &protocol.ResolveRequest{Outcome: protocol.OutcomeReferredBack, Objection: text}
			}
			return p, tea.Quit
		case "backspace":
			if len(p.text) > 0 {
				p.text = p.text[:len(p.text)-1]
			}
		default:
			if key.Text != "" {
				p.text = append(p.text, []rune(key.Text)...)
			}
		}
		return p, nil
	}
	switch k {
	case "up", "k":
		p.cursor = (p.cursor + len(q.Options) - 1) % len(q.Options)
	case "down", "j", "tab":
		p.cursor = (p.cursor + 1) % len(q.Options)
	case "enter", "space":
		p.result = &protocol.ResolveRequest{Outcome: protocol.OutcomeSelected, OptionIdx: ptrInt(p.cursor)}
		return p, tea.Quit
	case keyAnswer:
		if q.Hatches.FreeText {
			p.mode = answering
		}
	case keyReferBack:
		if q.Hatches.Dialogue {
			p.mode = objecting
		}
	case "q", "esc":
		p.result = nil
		return p, tea.Quit
	default:
		// Digits jump to an option, as the numbers on screen suggest.
		if n := int(key.Code - '1'); len(k) == 1 && n >= 0 && n < len(q.Options) {
			p.cursor = n
		}
	}
	return p, nil
}

func (p *picker) View() tea.View {
	var footer string
	switch p.mode {
	case picking:
		footer = "  up/down: move    enter: choose    q: quit\n"
	case answering:
		footer = fmt.Sprintf("  Your answer: %s_\n  enter: send    esc: back to the options\n", string(p.text))
	case objecting:
		footer = fmt.Sprintf("  Why is this the wrong question? (optional): %s_\n  enter: send    esc: back to the options\n", string(p.text))
	}
	return tea.NewView(render(p.d, p.cursor, footer))
}

// pickDecision runs the picker on the terminal and returns the principal's
// resolution, or nil if they quit.
func pickDecision(a *app, d *decision) (*protocol.ResolveRequest, error) {
	m, err := tea.NewProgram(newPicker(d), tea.WithContext(a.ctx)).Run()
	if err != nil {
		return nil, fmt.Errorf("decide: terminal: %w", err)
	}
	return m.(*picker).result, nil
}
