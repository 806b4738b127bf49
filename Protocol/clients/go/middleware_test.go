package keyhole

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// whoami answers the signed-in sub, or "anonymous".
var whoami = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	s, ok := SessionFromContext(r.Context())
	if !ok {
		io.WriteString(w, "anonymous")
		return
	}
	u := UserFromContext(r.Context())
	if u == nil || u.Sub != s.Sub {
		http.Error(w, "session without its user", 500)
		return
	}
	io.WriteString(w, "sub="+s.Sub)
})

type httpAnswer struct {
	status int
	body   string
	header http.Header
}

func get(t *testing.T, url string, header map[string]string) httpAnswer {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpAnswer{resp.StatusCode, string(b), resp.Header}
}

func TestMiddleware(t *testing.T) {
	h := keyholed(t)
	c := dialHarness(t, h)
	sub := uniqueSub("mw")
	ns, err := c.CreateSession(context.Background(), sub, SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.CreateSession(context.Background(), uniqueSub("mw-other"), SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}

	open := httptest.NewServer(Middleware(MiddlewareOptions{Client: c})(whoami))
	defer open.Close()
	required := httptest.NewServer(Middleware(MiddlewareOptions{Socket: h.Socket, Required: true, CookieName: "sid"})(whoami))
	defer required.Close()

	cases := []struct {
		name   string
		url    string
		header map[string]string
		status int
		body   string
	}{
		{"no credential", open.URL, nil, 200, "anonymous"},
		{"cookie", open.URL, map[string]string{"Cookie": "kh_session=" + ns.Token}, 200, "sub=" + sub},
		{"bearer", open.URL, map[string]string{"Authorization": "Bearer " + ns.Token}, 200, "sub=" + sub},
		{"bearer wins over cookie", open.URL, map[string]string{"Authorization": "bearer " + other.Token, "Cookie": "kh_session=" + ns.Token}, 200, "sub="},
		{"non-keyhole bearer falls back to the cookie", open.URL, map[string]string{"Authorization": "Bearer eyJhbGciOi", "Cookie": "kh_session=" + ns.Token}, 200, "sub=" + sub},
		{"never the query string", open.URL + "/?kh_session=" + ns.Token + "&session=" + ns.Token, nil, 200, "anonymous"},
		{"unknown session", open.URL, map[string]string{"Cookie": "kh_session=kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, 200, "anonymous"},
		{"required, anonymous", required.URL, nil, 401, "sign in required"},
		{"required, other cookie name ignored", required.URL, map[string]string{"Cookie": "kh_session=" + ns.Token}, 401, "sign in required"},
		{"required, its cookie", required.URL, map[string]string{"Cookie": "sid=" + ns.Token}, 200, "sub=" + sub},
		{"required, unknown session", required.URL, map[string]string{"Authorization": "Bearer kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, 401, "sign in required"},
		// Cookie parsing: a malformed neighbour does not hide the session's cookie; the first wins.
		{"neighbour with a space", open.URL, map[string]string{"Cookie": "a=b c; kh_session=" + ns.Token}, 200, "sub=" + sub},
		{"neighbour not ASCII", open.URL, map[string]string{"Cookie": "a=\u00e9; kh_session=" + ns.Token + "; z=\u00e9"}, 200, "sub=" + sub},
		{"neighbour JSON", open.URL, map[string]string{"Cookie": `a={"j":1}; kh_session=` + ns.Token}, 200, "sub=" + sub},
		{"neighbour without =", open.URL, map[string]string{"Cookie": "junk; kh_session=" + ns.Token}, 200, "sub=" + sub},
		{"neighbour quoted", open.URL, map[string]string{"Cookie": `a="x;y"; kh_session=` + ns.Token}, 200, "sub=" + sub},
		{"first of two wins", open.URL, map[string]string{"Cookie": "kh_session=" + ns.Token + "; kh_session=" + other.Token}, 200, "sub=" + sub},
		{"first of two wins, malformed", open.URL, map[string]string{"Cookie": "kh_session=x y; kh_session=" + ns.Token}, 200, "anonymous"},
		{"quoted value", open.URL, map[string]string{"Cookie": `kh_session="` + ns.Token + `"`}, 200, "sub=" + sub},
		{"name is matched whole", open.URL, map[string]string{"Cookie": "xkh_session=" + other.Token + "; kh_session=" + ns.Token}, 200, "sub=" + sub},
	}
	for _, tc := range cases {
		a := get(t, tc.url, tc.header)
		if a.status != tc.status || !strings.HasPrefix(a.body, tc.body) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, a.status, a.body, tc.status, tc.body)
		}
		if a.status == 401 && a.header.Get("WWW-Authenticate") != `Bearer realm="keyhole"` {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, a.header.Get("WWW-Authenticate"))
		}
		if tc.name == "bearer wins over cookie" && strings.Contains(a.body, sub) {
			t.Errorf("%s: %q", tc.name, a.body)
		}
	}

	// RequireSession behind a non-required middleware.
	guarded := httptest.NewServer(Middleware(MiddlewareOptions{Client: c})(RequireSession(whoami)))
	defer guarded.Close()
	if a := get(t, guarded.URL, nil); a.status != 401 {
		t.Errorf("RequireSession anonymous: %d", a.status)
	}
	if a := get(t, guarded.URL, map[string]string{"Cookie": "kh_session=" + ns.Token}); a.status != 200 || a.body != "sub="+sub {
		t.Errorf("RequireSession signed in: %d %q", a.status, a.body)
	}
}

// Fail closed: keyholed unreachable is 503 (never anonymous, never signed in), for both modes.
func TestMiddlewareUnreachable(t *testing.T) {
	c, _ := Dial(context.Background(), "/tmp/khgo-nobody-listens.sock", WithTimeout(200*time.Millisecond))
	defer c.Close()
	for _, required := range []bool{false, true} {
		srv := httptest.NewServer(Middleware(MiddlewareOptions{Client: c, Required: required})(whoami))
		a := get(t, srv.URL, map[string]string{"Cookie": "kh_session=kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
		srv.Close()
		if a.status != 503 {
			t.Errorf("required=%v: %d %q, want 503", required, a.status, a.body)
		}
	}
}

// Fail closed on keyholed's own errors other than session_not_found: the scripted server answers
// session.get with storage_unavailable (scenario known-error-code).
func TestMiddlewareServerError(t *testing.T) {
	socket, wait := scenarioServer(t, "known-error-code")
	c, _ := Dial(context.Background(), socket, WithTimeout(2*time.Second))
	srv := httptest.NewServer(Middleware(MiddlewareOptions{Client: c})(whoami))
	a := get(t, srv.URL, map[string]string{"Authorization": "Bearer kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
	srv.Close()
	c.Close()
	if a.status != 503 || strings.Contains(a.body, "anonymous") {
		t.Errorf("storage_unavailable: %d %q, want 503", a.status, a.body)
	}
	if err, stderr := wait(); err != nil {
		t.Errorf("scenario server: %v %s", err, stderr)
	}
}

// A credential that is not a token's shape is anonymous and keyholed is not asked: the client here
// names a socket nobody listens on, so asking would answer 503, as the well-shaped control does.
func TestMiddlewareMalformedCredentials(t *testing.T) {
	c, err := Dial(context.Background(), filepath.Join(t.TempDir(), "nobody.sock"), WithTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	open := httptest.NewServer(Middleware(MiddlewareOptions{Client: c})(whoami))
	defer open.Close()
	required := httptest.NewServer(Middleware(MiddlewareOptions{Client: c, Required: true})(whoami))
	defer required.Close()

	good := "kh_" + strings.Repeat("A", 43)
	cases := map[string]map[string]string{
		"70 000-byte cookie":       {"Cookie": "kh_session=kh_" + strings.Repeat("A", 70000-3)},
		"1 025-byte cookie":        {"Cookie": "kh_session=kh_" + strings.Repeat("A", 1025-3)},
		"70 000-byte bearer":       {"Authorization": "Bearer kh_" + strings.Repeat("A", 70000-3)},
		"one character short":      {"Cookie": "kh_session=kh_" + strings.Repeat("A", 42)},
		"one character long":       {"Cookie": "kh_session=kh_" + strings.Repeat("A", 44)},
		"not base64url":            {"Cookie": "kh_session=kh_" + strings.Repeat("A", 42) + "+"},
		"padding":                  {"Cookie": "kh_session=kh_" + strings.Repeat("A", 42) + "="},
		"wrong prefix":             {"Cookie": "kh_session=KH_" + strings.Repeat("A", 43)},
		"bearer kh_ malformed":     {"Authorization": "Bearer kh_x", "Cookie": "kh_session=kh_x"},
		"other bearer, bad cookie": {"Authorization": "Bearer eyJhbGciOi", "Cookie": "kh_session=" + strings.Repeat("A", 2000)},
		"token in a neighbour":     {"Cookie": "other=" + good + "; kh_session=kh_x"},
	}
	for name, header := range cases {
		if a := get(t, open.URL, header); a.status != 200 || a.body != "anonymous" {
			t.Errorf("%s: %d %q, want 200 anonymous (keyholed not asked)", name, a.status, a.body)
		}
		if a := get(t, required.URL, header); a.status != 401 {
			t.Errorf("%s, required: %d %q, want 401", name, a.status, a.body)
		}
	}
	// The control: a credential of the right shape is asked about, and keyholed is unreachable.
	for _, header := range []map[string]string{{"Cookie": "kh_session=" + good}, {"Authorization": "Bearer " + good}, {"Authorization": "Bearer eyJ", "Cookie": "a=b c; kh_session=" + good}} {
		if a := get(t, open.URL, header); a.status != 503 {
			t.Errorf("%v: %d %q, want 503", header, a.status, a.body)
		}
	}
}

func TestFirstCookie(t *testing.T) {
	cases := []struct {
		lines []string
		want  string
		ok    bool
	}{
		{nil, "", false},
		{[]string{"a=1"}, "", false},
		{[]string{"kh_session=v"}, "v", true},
		{[]string{" kh_session = v ;b=2"}, "v", true},
		{[]string{"a=1", "kh_session=v2; kh_session=v3"}, "v2", true},
		{[]string{"kh_session=v1", "kh_session=v2"}, "v1", true},
		{[]string{"kh_session"}, "", false},
		{[]string{"kh_session=a=b"}, "a=b", true},
		{[]string{`kh_session="q"`}, "q", true},
		{[]string{";;;=;kh_session=v"}, "v", true},
	}
	for _, tc := range cases {
		if v, ok := firstCookie(tc.lines, "kh_session"); v != tc.want || ok != tc.ok {
			t.Errorf("%q: %q %v, want %q %v", tc.lines, v, ok, tc.want, tc.ok)
		}
	}
	// One pass: a header of 200 000 pairs without the cookie takes linear time.
	big := strings.Repeat("a=b;", 200000)
	start := time.Now()
	if _, ok := firstCookie([]string{big}, "kh_session"); ok {
		t.Error("found a cookie that is not there")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("800 kB of cookies took %v", d)
	}
}
