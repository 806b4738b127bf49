package keyhole

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// startChaos starts 6 cycles of restart and bounce; the channel gets the harness's chaos line.
func startChaos(t *testing.T, h *harness) <-chan map[string]any {
	t.Helper()
	h.command(t, "chaos 6 200")
	done := make(chan map[string]any, 1)
	finished := make(chan struct{})
	go func() {
		m, _ := h.next(120 * time.Second)
		done <- m
		close(finished)
	}()
	t.Cleanup(func() { <-finished }) // a failed test still leaves the harness idle for the next
	return done
}

func chaosOver(t *testing.T, done <-chan map[string]any) bool {
	select {
	case m := <-done:
		if m == nil || m["chaos"] != "done" {
			t.Fatalf("chaos: %v", m)
		}
		return true
	default:
		return false
	}
}

// Reads: no session.get fails while keyholed is restarted (socket kept) and bounced (socket gone).
func TestRestartReads(t *testing.T) {
	h := keyholed(t)
	c := dialHarness(t, h)
	ns, err := c.CreateSession(context.Background(), uniqueSub("restart-reads"), SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := startChaos(t, h)
	calls := 0
	for !chaosOver(t, done) {
		s, err := c.GetSession(context.Background(), ns.Token)
		if err != nil {
			t.Fatalf("session.get %d failed during the restarts: %v", calls, err)
		}
		if s.ID != ns.ID {
			t.Fatalf("session.get: %+v", s)
		}
		calls++
	}
	if calls <= 6 {
		t.Errorf("only %d calls during 6 restarts", calls)
	}
	t.Logf("%d session.get calls across the restarts", calls)
}

// Creates: each succeeds or fails with connection_lost, and none is applied twice.
func TestRestartCreates(t *testing.T) {
	h := keyholed(t)
	c := dialHarness(t, h)
	prefix := uniqueSub("restart")
	type attempt struct {
		sub string
		id  string // "" when it failed
	}
	var attempts []attempt
	done := startChaos(t, h)
	lostCount := 0
	for n := 0; !chaosOver(t, done); n++ {
		sub := fmt.Sprintf("%s-%d", prefix, n)
		ns, err := c.CreateSession(context.Background(), sub, SessionOptions{})
		switch {
		case err == nil:
			attempts = append(attempts, attempt{sub, ns.ID})
		case errors.Is(err, ErrConnectionLost):
			attempts = append(attempts, attempt{sub, ""})
			lostCount++
		default:
			t.Fatalf("session.create %d: %v", n, err)
		}
	}
	if len(attempts) == 0 {
		t.Error("no creates during the restarts")
	}
	for _, a := range attempts {
		list, err := c.ListSessions(context.Background(), a.sub, "")
		if err != nil {
			t.Fatalf("session.list %s: %v", a.sub, err)
		}
		if a.id != "" && (len(list) != 1 || list[0].ID != a.id) {
			t.Errorf("%s: created %s, sessions %+v", a.sub, a.id, list)
		}
		if a.id == "" && len(list) > 1 {
			t.Errorf("%s: applied %d times", a.sub, len(list))
		}
	}
	t.Logf("%d creates, %d connection_lost", len(attempts), lostCount)
}
