package keyhole

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var subCounter uint64

// uniqueSub is a sub no other test uses against the shared keyholed.
func uniqueSub(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), atomic.AddUint64(&subCounter, 1))
}

func dialHarness(t *testing.T, h *harness, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(context.Background(), h.Socket, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// forged is the harness's identity token with its signature's first character changed.
func forged(token string) string {
	i := strings.LastIndexByte(token, '.') + 1
	b := []byte(token)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func TestIntegrationPingAndToken(t *testing.T) {
	h := keyholed(t)
	c := dialHarness(t, h)
	ctx := context.Background()
	p, err := c.Ping(ctx)
	if err != nil || p.Protocol != 1 || p.Version == "" {
		t.Fatalf("ping: %+v %v", p, err)
	}
	v, err := c.VerifyToken(ctx, h.Token, VerifyOptions{Audience: h.Audience})
	if err != nil {
		t.Fatal(err)
	}
	if v.Sub != h.Sub || v.Issuer != h.Issuer || v.Claims["sub"] != h.Sub {
		t.Errorf("token.verify: %+v", v)
	}
	_, err = c.VerifyToken(ctx, forged(h.Token), VerifyOptions{})
	if ErrorCode(err) != CodeTokenSignatureInvalid || !IsTokenError(err) {
		t.Errorf("forged token: %v", err)
	}
	m, err := c.Call(ctx, "token.verify", map[string]any{"token": h.Token})
	if err != nil || m["sub"] != h.Sub {
		t.Errorf("Call token.verify: %v %v", m, err)
	}
}

func TestIntegrationSessions(t *testing.T) {
	h := keyholed(t)
	c := dialHarness(t, h)
	ctx := context.Background()
	sub := uniqueSub("it")
	ns, err := c.CreateSession(ctx, sub, SessionOptions{TTL: time.Hour, Data: map[string]any{"role": "tester"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ns.Token, "kh_") || ns.ID == "" || ns.ExpiresAt == 0 {
		t.Fatalf("session.create: %+v", ns)
	}
	s, err := c.GetSession(ctx, ns.Token)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != ns.ID || s.Sub != sub || s.Issuer != h.Issuer || s.Data["role"] != "tester" || s.ExpiresAt != ns.ExpiresAt {
		t.Errorf("session.get: %+v", s)
	}
	if s.User == nil || s.User.Sub != sub || s.User.LastLoginAt == nil {
		t.Errorf("session.get user: %+v", s.User)
	}
	list, err := c.ListSessions(ctx, sub, "")
	if err != nil || len(list) != 1 || list[0].ID != ns.ID {
		t.Errorf("session.list: %+v %v", list, err)
	}
	u, err := c.GetUser(ctx, sub, h.Issuer)
	if err != nil || u.Sub != sub || u.Issuer != h.Issuer {
		t.Errorf("user.get: %+v %v", u, err)
	}
	revoked, err := c.RevokeSession(ctx, ns.Token)
	if err != nil || !revoked {
		t.Errorf("session.revoke: %v %v", revoked, err)
	}
	_, err = c.GetSession(ctx, ns.Token)
	var ke *Error
	if !errors.Is(err, ErrSessionNotFound) || !errors.As(err, &ke) || ke.Code != CodeSessionNotFound {
		t.Errorf("session.get after revoke: %v", err)
	}
	if revoked, err := c.RevokeSession(ctx, ns.Token); err != nil || revoked {
		t.Errorf("second session.revoke: %v %v", revoked, err)
	}
	list, err = c.ListSessions(ctx, sub, "")
	if err != nil || len(list) != 0 {
		t.Errorf("session.list after revoke: %+v %v", list, err)
	}

	// By id, all of a user's, and the admin operations on users.
	a, _ := c.CreateSession(ctx, sub, SessionOptions{})
	b, _ := c.CreateSession(ctx, sub, SessionOptions{})
	if ok, err := c.RevokeSessionByID(ctx, a.ID); err != nil || !ok {
		t.Errorf("revoke by id: %v %v", ok, err)
	}
	if n, err := c.RevokeAllSessions(ctx, sub, ""); err != nil || n != 1 {
		t.Errorf("revoke_all: %d %v", n, err)
	}
	if _, err := c.GetSession(ctx, b.Token); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("session after revoke_all: %v", err)
	}
	email := "it@example.com"
	user, created, err := c.UpdateUser(ctx, sub, "", UserUpdate{Email: &email})
	if err != nil || created || user.Email == nil || *user.Email != email {
		t.Errorf("user.update: %+v %v %v", user, created, err)
	}
	d, err := c.DeleteUser(ctx, sub, "")
	if err != nil || !d.Deleted {
		t.Errorf("user.delete: %+v %v", d, err)
	}
	if _, err := c.GetUser(ctx, sub, ""); !errors.Is(err, ErrUserNotFound) {
		t.Errorf("user.get after delete: %v", err)
	}
}

func TestIntegrationOtherOperations(t *testing.T) {
	h := keyholed(t)
	c := dialHarness(t, h)
	ctx := context.Background()
	if st, err := c.Stats(ctx); err != nil || st["requests"] == nil {
		t.Errorf("stats: %v %v", st, err)
	}
	if js, err := c.JWKSStatus(ctx, h.Issuer); err != nil || js["issuers"] == nil {
		t.Errorf("jwks.status: %v %v", js, err)
	}
	if _, err := c.JWKSStatus(ctx, "nobody"); !errors.Is(err, ErrBadRequest) {
		t.Errorf("jwks.status of an unknown issuer: %v", err)
	}
	if snap, err := c.AdminSnapshot(ctx); err != nil || snap.CreatedAt == 0 {
		t.Errorf("admin.snapshot: %+v %v", snap, err)
	}
	// The harness configures no [apple] section.
	if _, err := c.ApplePending(ctx); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("apple.pending: %v", err)
	}
	if _, err := c.AppleSignIn(ctx, AppleSignIn{IdentityToken: h.Token}); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("apple.sign_in: %v", err)
	}
	if _, err := c.Call(ctx, "session.frobnicate", nil); ErrorCode(err) != CodeUnknownOp {
		t.Errorf("unknown op: %v", err)
	}
}

// A context deadline earlier than the client's: timeout at that deadline, matching
// context.DeadlineExceeded; the connection stays and serves the next call.
func TestIntegrationContextDeadline(t *testing.T) {
	h := keyholed(t)
	c := dialHarness(t, h)
	if _, err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := c.cur
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Call(ctx, "debug.sleep", map[string]any{"ms": 3000})
	elapsed := time.Since(start)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a timeout, got %v", err)
	}
	if elapsed > 2*time.Second {
		t.Errorf("the call took %v: the context's deadline was not kept", elapsed)
	}
	if _, err := c.Ping(context.Background()); err != nil || c.cur != first {
		t.Errorf("after a timeout the connection must stay: %v", err)
	}
	// The client's own timeout, when shorter than the context's.
	short := dialHarness(t, h, WithTimeout(100*time.Millisecond))
	if _, err := short.Call(context.Background(), "debug.sleep", map[string]any{"ms": 2000}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("client timeout: %v", err)
	}
	// A canceled context ends the call too: canceled once its request is written (a client of its
	// own, whose only call is this one, signals the write).
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	canceling := dialHarness(t, h)
	canceling.written = ccancel
	start = time.Now()
	if _, err := canceling.Call(cctx, "debug.sleep", map[string]any{"ms": 2000}); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrTimeout) {
		t.Errorf("canceled: %v", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("the canceled call took %v", elapsed)
	}
}

// Many goroutines share one client and one connection; each gets its own answer.
func TestIntegrationConcurrentCalls(t *testing.T) {
	h := keyholed(t)
	c := dialHarness(t, h)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				want := fmt.Sprintf("%d/%d", g, i)
				args := map[string]any{"n": want}
				if i%5 == 0 {
					if _, err := c.Call(context.Background(), "debug.sleep", map[string]any{"ms": 5}); err != nil {
						errs <- err
						return
					}
				}
				m, err := c.Call(context.Background(), "debug.echo", args)
				if err != nil || m["n"] != want {
					errs <- fmt.Errorf("echo %s: %v %v", want, m, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c.mu.Lock()
	n := len(c.conns)
	c.mu.Unlock()
	if n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// No socket: unavailable once the deadline passes, after retries; errors.Is sees the cause.
func TestUnavailable(t *testing.T) {
	c, _ := Dial(context.Background(), "/tmp/khgo-nobody-listens.sock", WithTimeout(200*time.Millisecond))
	defer c.Close()
	start := time.Now()
	_, err := c.Ping(context.Background())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want unavailable, got %v", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Errorf("gave up after %v; want about the 200 ms deadline", d)
	}
	c.Close()
	if _, err := c.Ping(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("closed client: %v", err)
	}
}

func TestDialSocketFromEnvironment(t *testing.T) {
	t.Setenv("KEYHOLE_SOCKET", "/tmp/from-env.sock")
	c, _ := Dial(context.Background(), "")
	if c.Path() != "/tmp/from-env.sock" {
		t.Errorf("path %q", c.Path())
	}
	c, _ = Dial(context.Background(), "/tmp/given.sock")
	if c.Path() != "/tmp/given.sock" {
		t.Errorf("path %q", c.Path())
	}
	t.Setenv("KEYHOLE_SOCKET", "")
	c, _ = Dial(context.Background(), "")
	if c.Path() != DefaultSocket {
		t.Errorf("path %q", c.Path())
	}
}

// WithWaitOverloaded: with a request rate limit, calls over it are answered overloaded unless the
// client was asked to wait them out.
func TestWaitOverloaded(t *testing.T) {
	h, err := startHarness("[server]\nrequests_per_second_per_uid = 20\nrequest_burst_per_uid = 1\n")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.stop(); err != nil {
			t.Error(err)
		}
	}()
	plain := dialHarness(t, h)
	var overloaded *Error
	for i := 0; i < 20 && overloaded == nil; i++ {
		if _, err := plain.Ping(context.Background()); err != nil {
			if !errors.As(err, &overloaded) || overloaded.Code != CodeOverloaded || overloaded.RetryAfterMs <= 0 {
				t.Fatalf("want overloaded with retry_after_ms, got %v", err)
			}
		}
	}
	if overloaded == nil {
		t.Fatal("20 pings at once were never answered overloaded")
	}
	waiting := dialHarness(t, h, WithWaitOverloaded(true))
	for i := 0; i < 20; i++ {
		if _, err := waiting.Ping(context.Background()); err != nil {
			t.Fatalf("ping %d with WithWaitOverloaded: %v", i, err)
		}
	}
}
