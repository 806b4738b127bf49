package keyhole

import (
	"context"
	"sync"
	"time"
)

// callCtx is a call's context: its caller's, with the call's deadline (the earlier of the caller's
// and the client's timeout). context.WithTimeout would start a timer per call, and adding and
// stopping a runtime timer on every call costs far more than the call's own work (it wakes the
// network poller); here the timer is made only when something waits on Done, which a call at depth
// 1 never does: its reads and writes end at the deadline by themselves.
type callCtx struct {
	parent   context.Context
	deadline time.Time
	into     any // where the result goes when the call reads its own answer: *Session, *User or nil

	mu     sync.Mutex
	inner  context.Context // made on the first Done
	cancel context.CancelFunc
}

func newCallCtx(parent context.Context, timeout time.Duration) *callCtx {
	d := time.Now().Add(timeout)
	if pd, ok := parent.Deadline(); ok && pd.Before(d) {
		d = pd
	}
	return &callCtx{parent: parent, deadline: d}
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *callCtx) Value(key any) any { return c.parent.Value(key) }

func (c *callCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancel = context.WithDeadline(c.parent, c.deadline)
	}
	return c.inner.Done()
}

func (c *callCtx) Err() error {
	c.mu.Lock()
	inner := c.inner
	c.mu.Unlock()
	if inner != nil {
		return inner.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// release stops the timer, if one was made.
func (c *callCtx) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}

// cancelled is the caller's Done, when it may end before the deadline (nil: it cannot).
func (c *callCtx) cancelled() <-chan struct{} { return c.parent.Done() }
