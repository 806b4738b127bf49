package keyhole

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The helpers send an optional argument only when it is given, form as an object even when empty,
// and session as AppleSignIn does.
func TestAppleWebHelpersSendOnlyWhatIsGiven(t *testing.T) {
	s := newScriptedKeyholed(t, func(op string) string {
		return `"ok":true,"result":{}`
	})
	c, err := Dial(context.Background(), s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	none := ""
	calls := []struct {
		call func() error
		op   string
		want string
	}{
		{func() error { _, err := c.AppleAuthorize(ctx, AppleAuthorize{}); return err },
			"apple.authorize", `{}`},
		{func() error { _, err := c.AppleAuthorize(ctx, AppleAuthorize{Scope: &none}); return err },
			"apple.authorize", `{"scope":""}`},
		{func() error {
			_, err := c.AppleAuthorize(ctx, AppleAuthorize{ClientID: "com.example.web",
				RedirectURI: "https://example.com/cb", Scope: new(string), ReturnTo: "/account"})
			return err
		}, "apple.authorize", `{"client_id":"com.example.web","redirect_uri":"https://example.com/cb","scope":"","return_to":"/account"}`},
		{func() error { _, err := c.AppleCallback(ctx, AppleCallback{Cookie: "k"}); return err },
			"apple.callback", `{"form":{},"cookie":"k"}`},
		{func() error {
			_, err := c.AppleCallback(ctx, AppleCallback{Form: map[string]string{"state": "s", "code": "c"}, Cookie: "k",
				Session: &SessionOptions{Issuer: "ignored", TTL: time.Hour, Data: map[string]any{"a": "b"}}})
			return err
		}, "apple.callback", `{"form":{"state":"s","code":"c"},"cookie":"k","session":{"ttl_s":3600,"data":{"a":"b"}}}`},
		{func() error {
			_, err := c.AppleCallback(ctx, AppleCallback{Form: map[string]string{}, Session: &SessionOptions{}})
			return err
		}, "apple.callback", `{"form":{},"cookie":"","session":{}}`},
	}
	for i, k := range calls {
		if err := k.call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		ops, args := s.Ops(), s.Args()
		if len(ops) != i+1 || ops[i] != k.op {
			t.Fatalf("call %d: operations %v, want %s last", i, ops, k.op)
		}
		var got, want any
		if err := json.Unmarshal(args[i], &got); err != nil {
			t.Fatalf("call %d: args %s: %v", i, args[i], err)
		}
		if err := json.Unmarshal([]byte(k.want), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("call %d: args %s, want %s", i, args[i], k.want)
		}
	}
}

// Sign in with Apple on the web against a real keyholed whose Apple audience is a web client with a
// redirect URI: the authorization's URL and cookie, return_to refused, a state that serves one
// callback and only with its cookie, Apple's error, and an id_token checked once state and cookie are.
func TestIntegrationAppleWeb(t *testing.T) {
	audience := keyholed(t).Audience // the same fixture token: the same audience
	if audience == "" {
		t.Fatal("the harness's ready line has no audience")
	}
	const redirect = "https://example.com/apple/callback"
	h, err := startHarness("[apple]\nredirect_uris = { " + strconv.Quote(audience) + " = " + strconv.Quote(redirect) + " }\n")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.stop(); err != nil {
			t.Error(err)
		}
	}()
	if h.Audience != audience {
		t.Fatalf("harness audience %q, configured %q", h.Audience, audience)
	}
	c := dialHarness(t, h)
	ctx := context.Background()

	a, err := c.AppleAuthorize(ctx, AppleAuthorize{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.URL, "http://127.0.0.1:9/auth/authorize?") {
		t.Errorf("url %q", a.URL)
	}
	if a.State == "" || !strings.Contains(a.URL, "state="+a.State) || !strings.Contains(a.URL, "response_mode=form_post") {
		t.Errorf("url %q, state %q", a.URL, a.State)
	}
	if u, err := url.Parse(a.URL); err != nil {
		t.Errorf("url %q: %v", a.URL, err)
	} else if q := u.Query(); q.Get("client_id") != audience || q.Get("redirect_uri") != redirect || q.Get("state") != a.State {
		t.Errorf("url's query %v", q)
	}
	if a.Cookie.Name != "__Host-kh_apple" || a.Cookie.Value == "" || a.Cookie.MaxAge != 600 {
		t.Errorf("cookie %+v", a.Cookie)
	}
	sc := a.Cookie.SetCookie
	if !strings.HasPrefix(sc, "__Host-kh_apple="+a.Cookie.Value+";") || !strings.Contains(sc, "Secure") ||
		!strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=None") {
		t.Errorf("set_cookie %q (value %q)", sc, a.Cookie.Value)
	}
	if a.ExpiresAt <= 0 { // an integer, else the result would not decode into int64
		t.Errorf("expires_at %d", a.ExpiresAt)
	}

	_, err = c.AppleAuthorize(ctx, AppleAuthorize{ReturnTo: "//evil.example"})
	var ke *Error
	if !errors.As(err, &ke) || ke.Code != CodeBadRequest {
		t.Errorf("return_to //evil.example: %v", err)
	}

	// A wrong cookie uses the state up: the right one then finds nothing either.
	form := map[string]string{"state": a.State, "code": "c", "id_token": "x"}
	wrong := a.Cookie.Value[:len(a.Cookie.Value)-1] + "A"
	if wrong == a.Cookie.Value {
		wrong = a.Cookie.Value[:len(a.Cookie.Value)-1] + "B"
	}
	if _, err := c.AppleCallback(ctx, AppleCallback{Form: form, Cookie: wrong}); !errors.Is(err, ErrStateInvalid) || ErrorCode(err) != CodeStateInvalid {
		t.Errorf("callback with a wrong cookie: %v", err)
	}
	if _, err := c.AppleCallback(ctx, AppleCallback{Form: form, Cookie: a.Cookie.Value}); !errors.Is(err, ErrStateInvalid) {
		t.Errorf("callback again with the right cookie: %v", err)
	}

	// Apple's error instead of a code.
	b, err := c.AppleAuthorize(ctx, AppleAuthorize{})
	if err != nil {
		t.Fatal(err)
	}
	if b.State == a.State || b.Cookie.Value == a.Cookie.Value {
		t.Errorf("a second authorization drew the same state or cookie: %+v", b)
	}
	_, err = c.AppleCallback(ctx, AppleCallback{Form: map[string]string{"state": b.State, "error": "user_cancelled_authorize"}, Cookie: b.Cookie.Value})
	if !errors.Is(err, ErrAppleAuthorizationRefused) || ErrorCode(err) != CodeAppleAuthorizationRefused {
		t.Errorf("callback with Apple's error: %v", err)
	}

	// State and cookie right: the id_token is what is refused.
	d, err := c.AppleAuthorize(ctx, AppleAuthorize{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.AppleCallback(ctx, AppleCallback{Form: map[string]string{"state": d.State, "code": "c", "id_token": "not-a-token"},
		Cookie: d.Cookie.Value, Session: &SessionOptions{TTL: time.Hour}})
	if ErrorCode(err) != CodeTokenMalformed || !IsTokenError(err) {
		t.Errorf("callback with a malformed id_token: %v", err)
	}
}
