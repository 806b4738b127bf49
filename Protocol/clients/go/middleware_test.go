package keyhole

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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
	other, _ := c.CreateSession(context.Background(), uniqueSub("mw-other"), SessionOptions{})

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
