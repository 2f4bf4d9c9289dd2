package app

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/aspd/aspd/internal/framefeed"
	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/protocol/frame"
)

// FramesConfig configures agent-channel frames: validation, the ephemeral
// fan-out and its abuse limits.
type FramesConfig struct {
	Validation    frame.Options
	RatePerSecond float64 // frame submissions per sender per second (token bucket)
	Burst         int     // bucket size
	MaxReach      int     // most streams one submission may reach
	MaxStreams    int     // most open streams per agent
	Retention     framefeed.Config
	MaxFrameBytes int // largest frame on POST /frames
}

// DefaultFramesConfig is what aspd runs with unless configured otherwise.
func DefaultFramesConfig() FramesConfig {
	return FramesConfig{Validation: frame.DefaultOptions(), RatePerSecond: 20, Burst: 40, MaxReach: 256, MaxStreams: 32,
		Retention: framefeed.Config{RetainCount: 64, RetainAge: time.Minute, RetainBytes: 32 << 20, Buffer: 256}, MaxFrameBytes: 64 << 10}
}

// frameError converts a frame validation error to an API error.
func frameError(status int, e *frame.Error) *protocol.Error {
	return &protocol.Error{Status: status, Code: e.Code, Field: e.Field, Message: e.Message}
}

func frameErr(status int, code, field, format string, args ...any) *protocol.Error {
	return &protocol.Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// sessionFrames validates the agent-channel frames among a message's data
// parts (a data object carrying envelope_version is a frame) and returns the
// recipient handles they name, which must be participants of the session.
// One bad frame rejects the whole message.
func (a *App) sessionFrames(c *protocol.Content, sender string) ([]string, error) {
	var recipients []string
	for i, data := range c.DataParts {
		// Most data parts are not frames: skip the member walk unless the
		// key can be there at all, written plainly or with \u escapes
		// (which any JSON parser would decode to envelope_version). The
		// walk reads the object's own member names as a decode would.
		if !bytes.Contains(data, []byte(`envelope_version`)) && !bytes.Contains(data, []byte(`\u`)) {
			continue
		}
		if !c.HasMember(i, frame.EnvelopeVersionKey) {
			continue
		}
		fr, ferr := frame.Validate(data, a.cfg.Frames.Validation)
		if ferr != nil {
			ferr.Message = fmt.Sprintf("data part %d: %s", i, ferr.Message)
			return nil, frameError(http.StatusBadRequest, ferr)
		}
		if fr.SenderHandle != sender {
			return nil, frameErr(http.StatusBadRequest, frame.CodeSenderIdentityMismatch, "sender_handle",
				"data part %d: sender_handle %s is not the authenticated sender", i, fr.SenderHandle)
		}
		recipients = append(recipients, fr.RecipientHandle)
	}
	return recipients, nil
}
