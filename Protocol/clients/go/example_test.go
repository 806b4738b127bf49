package keyhole

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// buildExample builds ./example into a temporary directory.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "example")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "./example")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./example: %v\n%s", err, out)
	}
	return bin
}

// startExample runs the example app against socket and returns its base URL.
func startExample(t *testing.T, bin, socket string) string {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PORT=0", "KEYHOLE_SOCKET="+socket, "KEYHOLE_TIMEOUT_MS=300")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	port := strings.TrimPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || port == "" || port == strings.TrimSpace(line) {
		t.Fatalf("example printed %q (%v)", line, err)
	}
	return "http://127.0.0.1:" + port
}

var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       10 * time.Second,
}

// do sends a request with cookie (when not empty) as the session cookie's value.
func do(t *testing.T, method, u, cookie string, form url.Values) (*http.Response, string) {
	t.Helper()
	if cookie != "" {
		cookie = "kh_session=" + cookie
	}
	return doCookies(t, method, u, cookie, form)
}

// doCookies sends a request with cookies (when not empty) as its Cookie header, and a form (when not
// nil) as its urlencoded body, without following redirects; it returns the answer and its body.
func doCookies(t *testing.T, method, u, cookies string, form url.Values) (*http.Response, string) {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookies != "" {
		req.Header.Set("Cookie", cookies)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&sb)
	return resp, sb.String()
}

// The example app against a real keyholed whose Apple audience (a web client) has the app's
// callback as its redirect URI: token sign-in, the signed-in page, sign-out, and Sign in with Apple
// on the web as far as it goes without Apple.
func TestExampleApp(t *testing.T) {
	audience := keyholed(t).Audience // the same fixture token: the same audience
	if audience == "" {
		t.Fatal("the harness's ready line has no audience")
	}
	h, err := startHarness("[apple]\nredirect_uris = { " + strconv.Quote(audience) + " = " +
		strconv.Quote("https://example.com/auth/apple/callback") + " }\n")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.stop(); err != nil {
			t.Error(err)
		}
	}()
	bin := buildExample(t)
	base := startExample(t, bin, h.Socket)

	// Sign in with the harness's identity token.
	resp, _ := do(t, "POST", base+"/signin", "", url.Values{"id_token": {h.Token}})
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/" {
		t.Fatalf("signin: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	setCookie := resp.Header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "Secure", "SameSite=Lax", "Path=/"} {
		if !strings.Contains(setCookie, attr) {
			t.Errorf("Set-Cookie %q lacks %s", setCookie, attr)
		}
	}
	var token string
	for _, c := range resp.Cookies() {
		if c.Name == "kh_session" {
			token = c.Value
		}
	}
	if !strings.HasPrefix(token, "kh_") {
		t.Fatalf("no session cookie: %q", setCookie)
	}

	resp, body := do(t, "GET", base+"/", token, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, h.Sub) {
		t.Errorf("GET / signed in: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do(t, "GET", base+"/", "", nil); resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("GET / anonymous: %d", resp.StatusCode)
	}

	resp, _ = do(t, "POST", base+"/signout", token, url.Values{})
	if resp.StatusCode != 303 || !strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("signout: %d %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	if resp, _ := do(t, "GET", base+"/", token, nil); resp.StatusCode != 401 {
		t.Errorf("GET / with the signed-out cookie: %d", resp.StatusCode)
	}
	// The session is gone in keyholed too.
	c := dialHarness(t, h)
	if _, err := c.GetSession(context.Background(), token); ErrorCode(err) != CodeSessionNotFound {
		t.Errorf("session after signout: %v", err)
	}

	resp, _ = do(t, "POST", base+"/signin", "", url.Values{"id_token": {forged(h.Token)}})
	if resp.StatusCode != 401 || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("forged token: %d %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}

	t.Run("SignInWithApple", func(t *testing.T) { exampleAppleWeb(t, base) })

	// keyholed unreachable: 503, never signed in.
	down := startExample(t, bin, filepath.Join(t.TempDir(), "nobody.sock"))
	if resp, body := do(t, "GET", down+"/", token, nil); resp.StatusCode != 503 {
		t.Errorf("GET / with keyholed unreachable: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do(t, "POST", down+"/signin", "", url.Values{"id_token": {h.Token}}); resp.StatusCode != 503 {
		t.Errorf("signin with keyholed unreachable: %d", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", down+"/auth/apple", "", nil); resp.StatusCode != 503 || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("GET /auth/apple with keyholed unreachable: %d %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	form := url.Values{"state": {strings.Repeat("s", 43)}, "error": {"user_cancelled_authorize"}}
	if resp, _ := doCookies(t, "POST", down+"/auth/apple/callback", "__Host-kh_apple="+strings.Repeat("c", 43), form); resp.StatusCode != 503 || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("Apple's callback with keyholed unreachable: %d %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
}

// appleAuthorization is GET /auth/apple's answer: the state in Apple's URL and the binding cookie.
func appleAuthorization(t *testing.T, base string) (state, cookie string) {
	t.Helper()
	resp, _ := do(t, "GET", base+"/auth/apple", "", nil)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 302 || !strings.HasPrefix(loc, "http://127.0.0.1:9/auth/authorize?") ||
		!strings.Contains(loc, "redirect_uri=https%3A%2F%2Fexample.com%2Fauth%2Fapple%2Fcallback") {
		t.Fatalf("GET /auth/apple: %d, Location %q", resp.StatusCode, loc)
	}
	u, err := url.Parse(loc)
	if err != nil || u.Query().Get("state") == "" {
		t.Fatalf("GET /auth/apple: Location %q (%v)", loc, err)
	}
	setCookie := resp.Header.Values("Set-Cookie")
	if len(setCookie) != 1 || !strings.HasPrefix(setCookie[0], "__Host-kh_apple=") {
		t.Fatalf("GET /auth/apple: Set-Cookie %q", setCookie)
	}
	// keyholed's set_cookie as it is: the attributes a cross-site POST needs, which Go's own
	// http.Cookie would not all write for a __Host- name.
	for _, attr := range []string{"; Path=/", "; Secure", "; HttpOnly", "; SameSite=None", "; Max-Age=600"} {
		if !strings.Contains(setCookie[0], attr) {
			t.Errorf("binding cookie %q lacks %s", setCookie[0], attr)
		}
	}
	value := strings.TrimPrefix(strings.SplitN(setCookie[0], ";", 2)[0], "__Host-kh_apple=")
	if value == "" {
		t.Fatalf("binding cookie %q has no value", setCookie[0])
	}
	return u.Query().Get("state"), value
}

// appleRefused posts Apple's callback and expects a 303 to the sign-in page with ?error=code, no
// session cookie, and the page naming the code.
func appleRefused(t *testing.T, base, cookies string, form url.Values, code string) {
	t.Helper()
	resp, _ := doCookies(t, "POST", base+"/auth/apple/callback", cookies, form)
	if loc := resp.Header.Get("Location"); resp.StatusCode != 303 || loc != "/signin?error="+code {
		t.Errorf("callback: %d, Location %q, want 303 to /signin?error=%s", resp.StatusCode, loc, code)
	}
	for _, c := range resp.Cookies() {
		if c.Name == "kh_session" {
			t.Errorf("callback refused with %s set the session cookie: %q", code, resp.Header.Values("Set-Cookie"))
		}
	}
	resp, body := do(t, "GET", base+"/signin?error="+code, "", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "<code>"+code+"</code>") {
		t.Errorf("the sign-in page does not show %s: %d %q", code, resp.StatusCode, body)
	}
}

func exampleAppleWeb(t *testing.T, base string) {
	resp, body := do(t, "GET", base+"/signin", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `<a href="/auth/apple">Sign in with Apple</a>`) {
		t.Errorf("GET /signin: %d %q", resp.StatusCode, body)
	}
	if strings.Contains(body, "failed") {
		t.Errorf("GET /signin without an error shows one: %q", body)
	}
	// The code is the query's, so anyone's: shown escaped.
	resp, body = do(t, "GET", base+"/signin?error="+url.QueryEscape(`<script>"x"</script>`), "", nil)
	if resp.StatusCode != 200 || strings.Contains(body, "<script>") || !strings.Contains(body, "&lt;script&gt;&#34;x&#34;&lt;/script&gt;") {
		t.Errorf("GET /signin?error=<script>...: %d %q", resp.StatusCode, body)
	}

	state, cookie := appleAuthorization(t, base)

	// Off the site: keyholed refuses it, the app answers 400 and sets no cookie.
	for _, returnTo := range []string{"//evil.example", "https://evil.example/"} {
		resp, _ = do(t, "GET", base+"/auth/apple?return_to="+url.QueryEscape(returnTo), "", nil)
		if resp.StatusCode != 400 || resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("Location") != "" {
			t.Errorf("GET /auth/apple?return_to=%s: %d %q", returnTo, resp.StatusCode, resp.Header.Get("Set-Cookie"))
		}
	}
	// On the site: accepted.
	if resp, _ = do(t, "GET", base+"/auth/apple?return_to=%2Faccount%3Ftab%3D1", "", nil); resp.StatusCode != 302 {
		t.Errorf("GET /auth/apple?return_to=/account?tab=1: %d", resp.StatusCode)
	}

	// The user cancelled at Apple: the state and the cookie are right, so it is Apple's error that is refused.
	appleRefused(t, base, "kh_other=1; __Host-kh_apple="+cookie,
		url.Values{"state": {state}, "error": {"user_cancelled_authorize"}}, "apple_authorization_refused")

	// Another browser's cookie.
	state, cookie = appleAuthorization(t, base)
	wrong := cookie[:len(cookie)-1] + "A"
	if wrong == cookie {
		wrong = cookie[:len(cookie)-1] + "B"
	}
	form := url.Values{"state": {state}, "code": {"c"}, "id_token": {"x"}}
	appleRefused(t, base, "__Host-kh_apple="+wrong, form, "state_invalid")

	// No cookie at all; the state was good (a cancel with the right cookie would be
	// apple_authorization_refused): refused for the missing cookie.
	state, _ = appleAuthorization(t, base)
	appleRefused(t, base, "", url.Values{"state": {state}, "error": {"user_cancelled_authorize"}}, "state_invalid")
}

// The example app asks keyholed nothing about what cannot be a token (an id_token over 16 384 bytes,
// a session cookie not of a token's shape), and a bad_request from token.verify is 401, never 503.
// A scripted keyholed answers token.verify with bad_request and records what it is asked.
func TestExampleAppRefusesWithoutAsking(t *testing.T) {
	s := newScriptedKeyholed(t, func(op string) string {
		switch op {
		case "token.verify":
			return `"ok":false,"error":{"code":"bad_request","message":"args.token: not acceptable"}`
		case "session.revoke":
			return `"ok":true,"result":{"revoked":true}`
		case "apple.authorize":
			return `"ok":false,"error":{"code":"bad_request","message":"args.return_to: not acceptable"}`
		case "apple.callback":
			return `"ok":false,"error":{"code":"state_invalid","message":"no such authorization"}`
		}
		return `"ok":false,"error":{"code":"internal","message":"not scripted"}`
	})
	base := startExample(t, buildExample(t), s.Socket)

	if resp, _ := do(t, "POST", base+"/signin", "", url.Values{"id_token": {strings.Repeat("A", 16385)}}); resp.StatusCode != 401 {
		t.Errorf("signin with a 16 385-byte id_token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := do(t, "POST", base+"/signin", "", url.Values{"id_token": {strings.Repeat("A", 70000)}}); resp.StatusCode != 401 {
		t.Errorf("signin with a 70 000-byte id_token: %d, want 401", resp.StatusCode)
	}
	if ops := s.Ops(); len(ops) != 0 {
		t.Fatalf("keyholed was asked %v", ops)
	}
	if resp, _ := do(t, "POST", base+"/signin", "", url.Values{"id_token": {strings.Repeat("A", 16384)}}); resp.StatusCode != 401 || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("signin answered bad_request: %d %q, want 401 without a cookie", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	if ops := s.Ops(); len(ops) != 1 || ops[0] != "token.verify" {
		t.Fatalf("keyholed was asked %v, want one token.verify", ops)
	}

	for _, cookie := range []string{strings.Repeat("A", 70000), "kh_" + strings.Repeat("A", 1022), "kh_short", "kh_" + strings.Repeat("+", 43)} {
		resp, _ := do(t, "POST", base+"/signout", cookie, url.Values{})
		if resp.StatusCode != 303 || !strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age=0") {
			t.Errorf("signout with a %d-byte malformed cookie: %d %q", len(cookie), resp.StatusCode, resp.Header.Get("Set-Cookie"))
		}
	}
	if ops := s.Ops(); len(ops) != 1 {
		t.Fatalf("signout of malformed cookies asked keyholed %v", ops[1:])
	}
	resp, _ := do(t, "POST", base+"/signout", "kh_"+strings.Repeat("A", 43), url.Values{})
	if ops := s.Ops(); resp.StatusCode != 303 || len(ops) != 2 || ops[1] != "session.revoke" {
		t.Errorf("signout of a token: %d, asked %v", resp.StatusCode, ops)
	}

	// Sign in with Apple: a return_to over keyholed's 2048 bytes, and a callback whose form would not
	// fit in a frame (too long a body, or a short one whose JSON is long), are 400 without asking.
	if resp, _ := do(t, "GET", base+"/auth/apple?return_to=/"+strings.Repeat("a", 2048), "", nil); resp.StatusCode != 400 || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("GET /auth/apple with a 2049-byte return_to: %d %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	for _, form := range []url.Values{
		{"state": {"s"}, "id_token": {strings.Repeat("A", 70000)}, "code": {"c"}},
		{"state": {"s"}, "id_token": {strings.Repeat("<", 20000)}, "code": {"c"}}, // 60 kB posted, 120 kB as JSON
	} {
		if resp, _ := do(t, "POST", base+"/auth/apple/callback", "", form); resp.StatusCode != 400 || resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("callback with a %d-byte id_token: %d %q", len(form.Get("id_token")), resp.StatusCode, resp.Header.Get("Set-Cookie"))
		}
	}
	if ops := s.Ops(); len(ops) != 2 {
		t.Fatalf("oversized Sign in with Apple requests asked keyholed %v", ops[2:])
	}
	// A return_to keyholed refuses (bad_request): 400.
	if resp, _ := do(t, "GET", base+"/auth/apple?return_to=/"+strings.Repeat("a", 2047), "", nil); resp.StatusCode != 400 || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("GET /auth/apple answered bad_request: %d %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	// A binding cookie longer than keyholed's could be is sent as none; the form's fields as strings.
	form := url.Values{"state": {"st"}, "code": {"c"}, "id_token": {"x"}, "user": {`{"name":{}}`}}
	resp, _ = doCookies(t, "POST", base+"/auth/apple/callback", "__Host-kh_apple="+strings.Repeat("A", 257), form)
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/signin?error=state_invalid" {
		t.Errorf("callback answered state_invalid: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, _ = doCookies(t, "POST", base+"/auth/apple/callback", "__Host-kh_apple="+strings.Repeat("A", 256), form)
	ops, args := s.Ops(), s.Args()
	if len(ops) != 5 || ops[3] != "apple.callback" || ops[4] != "apple.callback" {
		t.Fatalf("asked %v, want apple.authorize and two apple.callback", ops[2:])
	}
	want := `{"cookie":"","form":{"code":"c","id_token":"x","state":"st","user":"{\"name\":{}}"}}`
	if got := canonicalJSON(t, args[3]); got != want {
		t.Errorf("callback with a 257-byte cookie sent %s, want %s", got, want)
	}
	if got := canonicalJSON(t, args[4]); !strings.HasPrefix(got, `{"cookie":"`+strings.Repeat("A", 256)+`"`) {
		t.Errorf("callback with a 256-byte cookie sent %s", got)
	}
}

// canonicalJSON re-encodes a JSON text with its object members sorted.
func canonicalJSON(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}
