package keyhole

import (
	"context"
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

// Creates: with keyholed's goodbye a graceful restart fails no call (PROTOCOL.md section 8, rule 3),
// so every session.create succeeds, a change turned away by a goodbye included, and each sub then
// has exactly the one session its create returned: nothing lost, nothing applied twice.
func TestRestartCreatesAllSucceedOnce(t *testing.T) {
	h := keyholed(t)
	c := dialHarness(t, h)
	prefix := uniqueSub("restart")
	type created struct{ sub, id string }
	var creates []created
	done := startChaos(t, h)
	for n := 0; !chaosOver(t, done); n++ {
		sub := fmt.Sprintf("%s-%d", prefix, n)
		ns, err := c.CreateSession(context.Background(), sub, SessionOptions{})
		if err != nil {
			t.Fatalf("session.create %d failed during the restarts: %v", n, err)
		}
		creates = append(creates, created{sub, ns.ID})
	}
	if len(creates) <= 6 {
		t.Errorf("only %d creates during 6 restarts", len(creates))
	}
	for _, cr := range creates {
		list, err := c.ListSessions(context.Background(), cr.sub, "")
		if err != nil {
			t.Fatalf("session.list %s: %v", cr.sub, err)
		}
		if len(list) != 1 || list[0].ID != cr.id {
			t.Errorf("%s: created %s, sessions %+v", cr.sub, cr.id, list)
		}
	}
	t.Logf("%d session.create calls across the restarts", len(creates))
}
