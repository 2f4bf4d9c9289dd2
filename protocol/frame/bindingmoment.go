package frame

import "encoding/json"

// BindingMoment is a validated briefing-and-binding envelope (companion
// draft "Binding-Moment Envelope", section 4): the eight slots, with the
// hatches' defaults applied.
type BindingMoment struct {
	Synopsis        string   `json:"synopsis"`
	Findings        []string `json:"findings"`
	Recommendations []string `json:"recommendations"`
	Offer           string   `json:"offer"`
	Question        Question `json:"question"`
	Meta            *BMMeta  `json:"meta,omitempty"`
}

// Question holds the binding slots 5 to 8.
type Question struct {
	Stem           string   `json:"stem"`
	Options        []Option `json:"options"`
	RecommendedIdx int      `json:"recommended_idx"`
	Hatches        Hatches  `json:"hatches"`
}

// Option is one substantive answer, with the reasoning that caches the
// comparison (slot 6).
type Option struct {
	Label     string `json:"label"`
	Reasoning string `json:"reasoning"`
}

// Hatches are the two escape hatches (slot 8). Each defaults to true when
// absent, and both do when the hatches object itself is absent (draft
// section 5.8).
type Hatches struct {
	FreeText bool `json:"free_text"` // the answer-space hatch
	Dialogue bool `json:"dialogue"`  // the question-space hatch
}

// BMMeta is the optional meta slot.
type BMMeta struct {
	DecisionClass   string `json:"decision_class,omitempty"`
	CalibrationNote string `json:"calibration_note,omitempty"`
}

// ValidateBindingMoment decodes raw as a bare binding-moment envelope (the
// value of a binding_moment member, not a frame) and checks it with the same
// shape as the agent_binding_moment payload: required members present and no
// unknown member, every member of the right type, 2 to 4 options each with a
// label and a reasoning, recommended_idx indexing one of them, hatches of
// booleans that are not both false (absent: true). Error paths are relative to the envelope
// ("question.options[1].label"). A stray member is always field-unknown here:
// there is no frame kind whose payload shape it could belong to.
func ValidateBindingMoment(raw []byte) (*BindingMoment, *Error) {
	root, err := decode(raw)
	if err != nil {
		if err.Message == "frame must be a JSON object" {
			err.Message = "binding_moment must be a JSON object"
		}
		return nil, err
	}
	c := &checker{opts: DefaultOptions(), kind: KindAgentBindingMoment}
	if err := bmEnvelope.check(c, root, ""); err != nil {
		if err.Code == CodePayloadKindMismatch {
			err.Code = CodeFieldUnknown
		}
		return nil, err
	}
	// The shape is known good; the typed view only needs the defaults.
	var bm struct {
		BindingMoment
		Question struct {
			Question
			Hatches struct {
				FreeText *bool `json:"free_text"`
				Dialogue *bool `json:"dialogue"`
			} `json:"hatches"`
		} `json:"question"`
	}
	if err := json.Unmarshal(raw, &bm); err != nil {
		return nil, invalid("", "binding_moment: %v", err)
	}
	out := bm.BindingMoment
	out.Question = bm.Question.Question
	out.Question.Hatches = Hatches{FreeText: deref(bm.Question.Hatches.FreeText), Dialogue: deref(bm.Question.Hatches.Dialogue)}
	return &out, nil
}

// deref reads an optional hatch; absent is true (draft section 5.8).
func deref(b *bool) bool { return b == nil || *b }
