package frame

import (
	"encoding/json"
	"testing"
)

// bmCase breaks the valid envelope one rule at a time (companion draft
// sections 4 and 5) and names the code and path the first failure must carry.
type bmCase struct {
	name  string
	edit  func(bm map[string]any)
	code  string
	field string
}

func question(bm map[string]any) map[string]any { return bm["question"].(map[string]any) }
func hatches(bm map[string]any) map[string]any  { return question(bm)["hatches"].(map[string]any) }
func options(bm map[string]any) []any           { return question(bm)["options"].([]any) }

func bmCases() []bmCase {
	var cases []bmCase
	// Section 4: every REQUIRED member present.
	for _, m := range []string{"synopsis", "findings", "recommendations", "offer", "question"} {
		cases = append(cases, bmCase{"missing " + m, func(bm map[string]any) { delete(bm, m) }, CodeFieldMissing, m})
	}
	// hatches is not among them: absent, both hatches are open (section 5.8).
	for _, m := range []string{"stem", "options", "recommended_idx"} {
		cases = append(cases, bmCase{"missing question." + m, func(bm map[string]any) { delete(question(bm), m) }, CodeFieldMissing, "question." + m})
	}
	for _, m := range []string{"label", "reasoning"} {
		cases = append(cases, bmCase{"missing option " + m, func(bm map[string]any) { delete(options(bm)[1].(map[string]any), m) }, CodeFieldMissing, "question.options[1]." + m})
	}
	cases = append(cases,
		// No unknown member, at any level.
		bmCase{"unknown top-level member", func(bm map[string]any) { bm["urgency"] = "high" }, CodeFieldUnknown, "urgency"},
		bmCase{"member of another kind's payload", func(bm map[string]any) { bm["advisory_text"] = "x" }, CodeFieldUnknown, "advisory_text"},
		bmCase{"options flattened out of question", func(bm map[string]any) { bm["options"] = options(bm) }, CodeFieldUnknown, "options"},
		bmCase{"unknown question member", func(bm map[string]any) { question(bm)["default"] = 0 }, CodeFieldUnknown, "question.default"},
		bmCase{"unknown option member", func(bm map[string]any) { options(bm)[0].(map[string]any)["score"] = 1 }, CodeFieldUnknown, "question.options[0].score"},
		bmCase{"unknown hatch", func(bm map[string]any) { hatches(bm)["skip"] = true }, CodeFieldUnknown, "question.hatches.skip"},
		bmCase{"unknown meta member", func(bm map[string]any) { bm["meta"].(map[string]any)["tone"] = "calm" }, CodeFieldUnknown, "meta.tone"},
		// Every member of the right type.
		bmCase{"synopsis not a string", func(bm map[string]any) { bm["synopsis"] = 1 }, CodeFieldInvalid, "synopsis"},
		bmCase{"findings not an array", func(bm map[string]any) { bm["findings"] = "one" }, CodeFieldInvalid, "findings"},
		bmCase{"finding not a string", func(bm map[string]any) { bm["findings"] = []any{"a", 2} }, CodeFieldInvalid, "findings[1]"},
		bmCase{"recommendations not an array", func(bm map[string]any) { bm["recommendations"] = map[string]any{} }, CodeFieldInvalid, "recommendations"},
		bmCase{"recommendation null", func(bm map[string]any) { bm["recommendations"] = []any{nil} }, CodeFieldInvalid, "recommendations[0]"},
		bmCase{"offer not a string", func(bm map[string]any) { bm["offer"] = true }, CodeFieldInvalid, "offer"},
		bmCase{"question not an object", func(bm map[string]any) { bm["question"] = "Merge?" }, CodeFieldInvalid, "question"},
		bmCase{"stem not a string", func(bm map[string]any) { question(bm)["stem"] = []any{} }, CodeFieldInvalid, "question.stem"},
		bmCase{"options not an array", func(bm map[string]any) { question(bm)["options"] = map[string]any{} }, CodeFieldInvalid, "question.options"},
		bmCase{"option not an object", func(bm map[string]any) { question(bm)["options"] = []any{"a", "b"} }, CodeFieldInvalid, "question.options[0]"},
		bmCase{"label not a string", func(bm map[string]any) { options(bm)[2].(map[string]any)["label"] = 3 }, CodeFieldInvalid, "question.options[2].label"},
		bmCase{"reasoning not a string", func(bm map[string]any) { options(bm)[0].(map[string]any)["reasoning"] = nil }, CodeFieldInvalid, "question.options[0].reasoning"},
		bmCase{"hatches not an object", func(bm map[string]any) { question(bm)["hatches"] = true }, CodeFieldInvalid, "question.hatches"},
		bmCase{"free_text not a boolean", func(bm map[string]any) { hatches(bm)["free_text"] = "yes" }, CodeFieldInvalid, "question.hatches.free_text"},
		bmCase{"dialogue not a boolean", func(bm map[string]any) { hatches(bm)["dialogue"] = 1 }, CodeFieldInvalid, "question.hatches.dialogue"},
		bmCase{"meta not an object", func(bm map[string]any) { bm["meta"] = "x" }, CodeFieldInvalid, "meta"},
		bmCase{"decision_class not a string", func(bm map[string]any) { bm["meta"].(map[string]any)["decision_class"] = 1 }, CodeFieldInvalid, "meta.decision_class"},
		// 2 to 4 options.
		bmCase{"one option", func(bm map[string]any) {
			question(bm)["options"] = options(bm)[:1]
			question(bm)["recommended_idx"] = 0
		}, CodeFieldInvalid, "question.options"},
		bmCase{"no option", func(bm map[string]any) { question(bm)["options"] = []any{} }, CodeFieldInvalid, "question.options"},
		bmCase{"five options", func(bm map[string]any) {
			o := options(bm)
			question(bm)["options"] = append(o, o[0], o[1])
		}, CodeFieldInvalid, "question.options"},
		// recommended_idx present (above), an integer, >= 0 and < len(options).
		bmCase{"recommended_idx negative", func(bm map[string]any) { question(bm)["recommended_idx"] = -1 }, CodeFieldInvalid, "question.recommended_idx"},
		bmCase{"recommended_idx out of range", func(bm map[string]any) { question(bm)["recommended_idx"] = 3 }, CodeFieldInvalid, "question.recommended_idx"},
		bmCase{"recommended_idx a fraction", func(bm map[string]any) { question(bm)["recommended_idx"] = 0.5 }, CodeFieldInvalid, "question.recommended_idx"},
		bmCase{"recommended_idx a string", func(bm map[string]any) { question(bm)["recommended_idx"] = "0" }, CodeFieldInvalid, "question.recommended_idx"},
		bmCase{"two marked", func(bm map[string]any) { question(bm)["recommended_idx"] = []any{0, 1} }, CodeFieldInvalid, "question.recommended_idx"},
		// Both hatches closed would leave only the forced choice.
		bmCase{"both hatches false", func(bm map[string]any) { hatches(bm)["free_text"] = false; hatches(bm)["dialogue"] = false }, CodeFieldInvalid, "question.hatches"},
	)
	return cases
}

func validEnvelope() map[string]any { return validPayloads()[KindAgentBindingMoment] }

func TestValidateBindingMomentMalformed(t *testing.T) {
	for _, tc := range bmCases() {
		t.Run(tc.name, func(t *testing.T) {
			bm := validEnvelope()
			tc.edit(bm)
			raw, err := json.Marshal(bm)
			if err != nil {
				t.Fatal(err)
			}
			got, ferr := ValidateBindingMoment(raw)
			if ferr == nil {
				t.Fatalf("accepted %s", raw)
			}
			if got != nil || ferr.Code != tc.code || ferr.Field != tc.field {
				t.Fatalf("got %v (%s at %q), want %s at %q", got, ferr.Code, ferr.Field, tc.code, tc.field)
			}
		})
	}
	for _, raw := range []string{`[]`, `"x"`, `{`, `{"synopsis":"a","synopsis":"b"}`} {
		if _, ferr := ValidateBindingMoment([]byte(raw)); ferr == nil || ferr.Code != CodeFieldInvalid {
			t.Errorf("%s: got %v, want field-invalid", raw, ferr)
		}
	}
}

func TestValidateBindingMomentValid(t *testing.T) {
	bm := validEnvelope()
	delete(bm, "meta")
	delete(hatches(bm), "dialogue") // defaults to true
	hatches(bm)["free_text"] = false
	raw, _ := json.Marshal(bm)
	got, ferr := ValidateBindingMoment(raw)
	if ferr != nil {
		t.Fatalf("refused: %v", ferr)
	}
	q := got.Question
	if len(q.Options) != 3 || q.Options[1].Label != "Wait a day" || q.RecommendedIdx != 0 || q.Hatches.FreeText || !q.Hatches.Dialogue {
		t.Fatalf("decoded %+v", got)
	}
	if len(got.Findings) != 2 || got.Synopsis == "" || got.Meta != nil {
		t.Fatalf("decoded %+v", got)
	}
	// The frame payload and the bare envelope are one shape: the payload
	// additionally admits content_type.
	bm["content_type"] = "application/json"
	raw, _ = json.Marshal(bm)
	if _, ferr := ValidateBindingMoment(raw); ferr == nil || ferr.Field != "content_type" {
		t.Fatalf("content_type on a bare envelope: %v", ferr)
	}
}

// An envelope without a hatches object has both hatches open (draft 5.8:
// both members "SHALL default to true"), as has an empty hatches object;
// only a member present and false closes a hatch.
func TestValidateBindingMomentHatchesDefault(t *testing.T) {
	for _, tc := range []struct {
		name               string
		hatches            any // del: no hatches member
		freeText, dialogue bool
	}{
		{"hatches absent", del, true, true},
		{"hatches empty", map[string]any{}, true, true},
		{"free_text closed", map[string]any{"free_text": false}, false, true},
		{"dialogue closed", map[string]any{"dialogue": false}, true, false},
		{"both explicit", map[string]any{"free_text": true, "dialogue": true}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bm := validEnvelope()
			setPath(t, bm, "question.hatches", tc.hatches)
			got, ferr := ValidateBindingMoment(marshal(t, bm))
			if ferr != nil {
				t.Fatalf("refused: %v", ferr)
			}
			if h := got.Question.Hatches; h.FreeText != tc.freeText || h.Dialogue != tc.dialogue {
				t.Fatalf("hatches %+v, want free_text %v dialogue %v", h, tc.freeText, tc.dialogue)
			}

			// The agent_binding_moment frame takes the same payload: accepted,
			// carried as sent, and read with the same defaults.
			doc := deepCopy(t, validFrame(KindAgentBindingMoment))
			setPath(t, doc, "payload.question.hatches", tc.hatches)
			fr, ferr := Validate(marshal(t, doc), testOptions())
			if ferr != nil {
				t.Fatalf("frame refused: %v", ferr)
			}
			var payload map[string]any
			if err := json.Unmarshal(fr.Payload, &payload); err != nil {
				t.Fatal(err)
			}
			delete(payload, "content_type")
			got, ferr = ValidateBindingMoment(marshal(t, payload))
			if ferr != nil {
				t.Fatalf("frame payload as an envelope: %v", ferr)
			}
			if h := got.Question.Hatches; h.FreeText != tc.freeText || h.Dialogue != tc.dialogue {
				t.Fatalf("frame payload hatches %+v, want free_text %v dialogue %v", h, tc.freeText, tc.dialogue)
			}
		})
	}
}
