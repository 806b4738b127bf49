package keyhole

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

func do(t *testing.T, method, u, cookie string, form url.Values) (*http.Response, string) {
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
	if cookie != "" {
		req.Header.Set("Cookie", "kh_session="+cookie)
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

func TestExampleApp(t *testing.T) {
	h := keyholed(t)
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

	// keyholed unreachable: 503, never signed in.
	down := startExample(t, bin, filepath.Join(t.TempDir(), "nobody.sock"))
	if resp, body := do(t, "GET", down+"/", token, nil); resp.StatusCode != 503 {
		t.Errorf("GET / with keyholed unreachable: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do(t, "POST", down+"/signin", "", url.Values{"id_token": {h.Token}}); resp.StatusCode != 503 {
		t.Errorf("signin with keyholed unreachable: %d", resp.StatusCode)
	}
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
}
