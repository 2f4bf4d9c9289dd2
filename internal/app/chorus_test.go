package app

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aspd/aspd/protocol"
	"github.com/aspd/aspd/store"
)

func withChorus(c *Config) {
	c.Chorus = ChorusConfig{Key: bytes.Repeat([]byte{1}, 32), PublicURL: "http://aspd.test", CallbackTTL: time.Hour, MCPTokenTTL: 10 * time.Minute}
}

// TestChorusOffWithoutKey: no key, no Chorus (subtests of one ForEach per
// test: a second one's "sqlite#01" path would hold a '#', which SQLite's
// file: URI reads as a fragment).
func TestChorusOffWithoutKey(t *testing.T) {
	forEach(t, nil, func(t *testing.T, a *App) {
		mkAgent(t, a, "@own.bot")
		_, err := a.SetChorus(ctx, "@own.bot", protocol.ChorusRequest{ConnectionString: "https://x.test/in"})
		wantCode(t, err, http.StatusServiceUnavailable, protocol.CodeUnavailable)
	})
}

func TestChorusRegistrationRules(t *testing.T) {
	forEach(t, withChorus, func(t *testing.T, a *App) {
		mkAgent(t, a, "@own.bot")
		for _, bad := range []string{"", "ftp://x.test/sk_leak", "/relative/sk_leak", "https://x.test/in#sk_leak", "https:///sk_leak", "https://x.test/" + strings.Repeat("k", MaxConnectionStringBytes)} {
			_, err := a.SetChorus(ctx, "@own.bot", protocol.ChorusRequest{ConnectionString: bad})
			wantCode(t, err, http.StatusBadRequest, protocol.CodeInvalidRequest)
			if strings.Contains(err.Error(), "sk_leak") {
				t.Fatalf("an error quotes the connection string: %v", err)
			}
		}
		_, err := a.SetChorus(ctx, "@no.body", protocol.ChorusRequest{ConnectionString: "https://x.test/in"})
		wantCode(t, Answer(err), http.StatusNotFound, protocol.CodeNotFound)

		reg, err := a.SetChorus(ctx, "@own.bot", protocol.ChorusRequest{ConnectionString: "https://x.test/in/sk_1"})
		if err != nil || reg.Rotated || !strings.HasPrefix(reg.SigningSecret, "whsec_") {
			t.Fatalf("registration: %+v %v", reg, err)
		}
		tg, err := a.chorusTarget(ctx, "@own.bot")
		if err != nil || tg.URL != "https://x.test/in/sk_1" || tg.Secret != reg.SigningSecret {
			t.Fatalf("unsealed target: %v", err)
		}
		reg2, err := a.SetChorus(ctx, "@own.bot", protocol.ChorusRequest{ConnectionString: "https://y.test/in/sk_2"})
		if err != nil || !reg2.Rotated || reg2.SigningSecret == reg.SigningSecret {
			t.Fatalf("rotation: %+v %v", reg2, err)
		}
		if tg, _ := a.chorusTarget(ctx, "@own.bot"); tg.URL != "https://y.test/in/sk_2" {
			t.Fatalf("rotation kept the old URL")
		}
		if err := a.DeleteChorus(ctx, "@own.bot"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.chorusTarget(ctx, "@own.bot"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("target after removal: %v", err)
		}
	})
}

func TestChorusCallbackRules(t *testing.T) {
	forEach(t, withChorus, func(t *testing.T, a *App) {
		mkAgent(t, a, "@own.human")
		mkAgent(t, a, "@own.bot")
		if _, err := a.SetChorus(ctx, "@own.bot", protocol.ChorusRequest{ConnectionString: "https://x.test/in"}); err != nil {
			t.Fatal(err)
		}
		cs, err := a.CreateSession(ctx, "@own.human", protocol.CreateSessionRequest{Invite: []string{"@own.bot"}})
		if err != nil {
			t.Fatal(err)
		}
		sid := cs.SessionID
		cbURL, err := a.issueChorusCallback(ctx, "@own.bot", sid, "msg_x")
		if err != nil || !strings.HasPrefix(cbURL, "http://aspd.test/chorus/callback/") {
			t.Fatalf("callback URL %q %v", cbURL, err)
		}
		tok := cbURL[strings.LastIndex(cbURL, "/")+1:]

		// Not joined yet: the message is refused as REST would refuse it.
		_, err = a.ChorusCallback(ctx, tok, protocol.ChorusCallbackRequest{Type: "message", Content: content("early")})
		if pe := Answer(err); pe.Status != http.StatusConflict {
			t.Fatalf("message before joining: %v", err)
		}
		if err := a.Join(ctx, "@own.bot", sid); err != nil {
			t.Fatal(err)
		}
		r1, err := a.ChorusCallback(ctx, tok, protocol.ChorusCallbackRequest{Type: "message", Content: content("hello")})
		if err != nil || r1.MessageID == "" {
			t.Fatalf("message: %+v %v", r1, err)
		}
		r2, err := a.ChorusCallback(ctx, tok, protocol.ChorusCallbackRequest{Type: "message", Content: content("hello")})
		if err != nil || r2 != r1 {
			t.Fatalf("retried message: %+v, first %+v, %v", r2, r1, err)
		}
		r3, err := a.ChorusCallback(ctx, tok, protocol.ChorusCallbackRequest{Type: "message", Content: content("hello"), ID: "second"})
		if err != nil || r3.MessageID == r1.MessageID {
			t.Fatalf("a message with its own id: %+v %v", r3, err)
		}
		tc, err := a.ChorusCallback(ctx, tok, protocol.ChorusCallbackRequest{Type: "tool_call", ID: "tc_1", Name: "search", Args: []byte(`{"q":"x"}`)})
		if err != nil || tc.Sequence <= r3.Sequence {
			t.Fatalf("tool_call: %+v %v", tc, err)
		}
		for _, bad := range []protocol.ChorusCallbackRequest{
			{Type: "tool_call", ID: "tc_2"},
			{Type: "tool_call", Name: "n", Args: []byte(`[1]`)},
			{Type: "tool_result", ID: "tc_1"},
			{Type: "status"},
			{Type: "status", Status: "x", Content: content("y")},
			{Type: "error", Code: "only_code"},
			{Type: "shout", Content: content("x")},
			{Type: "message", Content: content("x"), ID: strings.Repeat("i", 129)},
			{Type: "status", Status: strings.Repeat("s", 1025)},
		} {
			if _, err := a.ChorusCallback(ctx, tok, bad); Answer(err).Status != http.StatusBadRequest {
				t.Fatalf("callback %+v: %v, want 400", bad, err)
			}
		}
		before, err := a.Events(ctx, "@own.human", sid, Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.ChorusCallback(ctx, tok, protocol.ChorusCallbackRequest{Type: "status", Status: "thinking"}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.ChorusCallback(ctx, tok, protocol.ChorusCallbackRequest{Type: "error", Message: "tool broke", Code: "tool_error"}); err != nil {
			t.Fatal(err)
		}
		after, _ := a.Events(ctx, "@own.human", sid, Page{Limit: 100})
		if len(after.Events) != len(before.Events) {
			t.Fatalf("status and error appended %d events", len(after.Events)-len(before.Events))
		}
		last := "A"
		if strings.HasSuffix(tok, "A") {
			last = "B"
		}
		for _, forged := range []string{"", tok[:len(tok)-1] + last, strings.Repeat("A", 43), strings.Repeat("A", 200)} {
			if _, err := a.ChorusCallback(ctx, forged, protocol.ChorusCallbackRequest{Type: "message", Content: content("x")}); Answer(err).Status != http.StatusNotFound {
				t.Fatalf("forged callback %q: %v", forged, err)
			}
		}
	})
}

func TestChorusMCPToken(t *testing.T) {
	forEach(t, withChorus, func(t *testing.T, a *App) {
		mkAgent(t, a, "@own.bot")
		url, tok, err := a.chorusMCP(ctx, "@own.bot")
		if err != nil || url != "http://aspd.test/mcp" || !strings.HasPrefix(tok, "aspm_") {
			t.Fatalf("ChorusMCP: %q %q %v", url, tok, err)
		}
		if h, err := a.Authenticate(ctx, tok); err != nil || h != "@own.bot" {
			t.Fatalf("Authenticate(mcp token): %q %v", h, err)
		}
		if _, again, _ := a.chorusMCP(ctx, "@own.bot"); again != tok {
			t.Fatalf("a fresh token was issued while the first had most of its life")
		}
		if _, err := a.RotateToken(ctx, "@own.bot"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(ctx, tok); err == nil {
			t.Fatalf("the MCP token survived the agent's token rotation")
		}
		if _, fresh, _ := a.chorusMCP(ctx, "@own.bot"); fresh == tok {
			t.Fatalf("a revoked MCP token was handed out again")
		}
	})
}

// TestChorusWakeOnlyForWebhookAgents: a commit wakes the Chorus worker only
// when one of its recipients has an endpoint; a reload from the store sees
// registrations the local set missed.
func TestChorusWakeOnlyForWebhookAgents(t *testing.T) {
	forEach(t, withChorus, func(t *testing.T, a *App) {
		for _, h := range []string{"@own.alice", "@own.bot", "@own.carol"} {
			mkAgent(t, a, h)
		}
		woken := func() bool {
			select {
			case <-a.ChorusWake():
				return true
			default:
				return false
			}
		}
		invite := func(h string) {
			t.Helper()
			if _, err := a.CreateSession(ctx, "@own.alice", protocol.CreateSessionRequest{Invite: []string{h}}); err != nil {
				t.Fatal(err)
			}
		}
		invite("@own.carol")
		if woken() {
			t.Fatal("a commit with no webhook recipient woke the worker")
		}
		if _, err := a.SetChorus(ctx, "@own.bot", protocol.ChorusRequest{ConnectionString: "https://x.test/in/sk_1"}); err != nil {
			t.Fatal(err)
		}
		woken() // the registration's own wake-up
		invite("@own.bot")
		if !woken() {
			t.Fatal("an invitation of a webhook agent did not wake the worker")
		}
		invite("@own.carol")
		if woken() {
			t.Fatal("a commit with no webhook recipient woke the worker")
		}
		// A set that missed a registration (made through another node) is
		// mended by the reload.
		a.setChorusHandle("@own.bot", false)
		invite("@own.bot")
		if woken() {
			t.Fatal("the set without @own.bot still woke the worker")
		}
		if err := a.reloadChorusHandles(ctx); err != nil {
			t.Fatal(err)
		}
		invite("@own.bot")
		if !woken() {
			t.Fatal("after the reload, an invitation of a webhook agent did not wake the worker")
		}
	})
}
