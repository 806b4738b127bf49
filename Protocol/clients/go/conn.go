package keyhole

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// MaxFrameBytes is the largest payload a frame may carry, either way (PROTOCOL.md section 2).
const MaxFrameBytes = 16 << 20

// outcome is what a call waiting on a connection learns: an answer (result or err), or that the
// connection ended before it (lost, the cause; with unread, keyholed said goodbye and never read
// the request); or, with lead, that it is now the one to read.
type outcome struct {
	result json.RawMessage
	err    *Error
	lost   error
	unread bool
	lead   bool
	// decoded: the result was read into the call's own target by the reading call itself, which
	// was this call (parseResponse); result is then nil.
	decoded bool
}

// status says how a send ended.
type status int

const (
	answered   status = iota // outcome holds the answer, or a final error (protocol_error, a null-id error)
	notWritten               // never read by keyholed: no byte went out (the connection was found closed; outcome.err: what keyholed said about it, if anything), or keyholed's goodbye turned it away
	lost                     // written, and the connection ended before the answer (outcome.lost: why)
	timedOut                 // the deadline passed or the context ended
)

// conn is one connection. There is no reader goroutine: a call that has written its request and
// finds nobody reading becomes the reader, reads frames and hands each answer to the call waiting
// for its id (over its channel) until its own is in, or its context ends; it then hands the role to
// another waiting call, if any. At depth 1 a call is thus a write and a read in the caller's own
// goroutine, with no switch to another goroutine (nor a wake of another thread) per call.
//
// Invariants: a call's channel is in pending exactly as long as no outcome was sent on it; the
// reader sends to it and removes it under mu. While pending is not empty and the connection is not
// over, reading is true (a call reads, or was handed the role over its channel, or is about to take
// it after its write), unless the one pending call is the writer: a call is never handed the role
// while it writes, since its write may wait for keyholed, which may wait for its answers to be read;
// it takes the role itself after the write. Once accepting is false no call is added, and no frame is written: a writer
// checks accepting after taking wturn, and a writer that leaves the stream unusable (a frame cut
// short) stops accepting before it gives wturn back, so no frame follows a torn one. A connection
// that no longer accepts and has nobody waiting on it is closed. When the connection ends
// (over), the socket is closed, every pending call is failed under mu, then done is closed.
type conn struct {
	nc    net.Conn
	wturn chan struct{} // one slot: the writer holding it sends one frame whole; waited for under the call's context
	mu    sync.Mutex
	done  chan struct{}

	pending   map[uint64]chan outcome
	accepting bool
	connErr   *Error        // keyholed's error with a null id: about the connection, which it then closes
	goodbye   bool          // keyholed said goodbye (shutting_down with a null id): no request unanswered on it was read
	reading   bool          // a call has the reader's role
	writing   uint64        // the call between joining pending and the end of its write (0: none): never handed the role
	over      bool          // the connection ended: done is closed
	leadStop  chan struct{} // the reading call's watch on a cancellable context; nil: none
	spare     chan outcome  // a reader's channel once done with, for the next call (one fewer allocation a call)

	// The reading call's id and the value its result is read into (callCtx.into), so that its own
	// answer is read into it as it is checked (parseResponse). Only the reader touches them.
	ownID   uint64
	ownInto any

	buf []byte    // read and not yet dispatched (part of a frame); only the reader touches it
	rdl time.Time // the socket's read deadline (only the reader touches it)
	wdl time.Time // the socket's write deadline (only the writer holding wturn touches it)

	written func() // tests: called when a request is written whole
}

func newConn(nc net.Conn, written func()) *conn {
	return &conn{nc: nc, wturn: make(chan struct{}, 1), done: make(chan struct{}), pending: make(map[uint64]chan outcome), accepting: true, written: written}
}

func (c *conn) isAccepting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.accepting
}

// stopAccepting sends nothing more on the connection; calls already on it still get their answers.
func (c *conn) stopAccepting() {
	c.mu.Lock()
	c.accepting = false
	c.closeIfIdle()
	c.mu.Unlock()
}

// close shuts the connection now; the calls on it fail (lost).
func (c *conn) close() {
	c.mu.Lock()
	c.accepting = false
	if !c.reading && !c.over {
		c.end(nil, fmt.Errorf("read: %w", net.ErrClosed))
	}
	c.mu.Unlock()
	c.nc.Close() // a reader at work sees its read fail, and ends the connection
}

// closeIfIdle ends a connection that no longer accepts and has nobody waiting (mu held).
func (c *conn) closeIfIdle() {
	if !c.accepting && !c.over && !c.reading && len(c.pending) == 0 {
		c.end(nil, io.EOF)
	}
}

// end ends the connection (mu held): closes the socket, fails every pending call with fail (nil:
// keyholed's null-id error if it sent one, else lost with cause, or unread after its goodbye), and
// closes done.
func (c *conn) end(fail *Error, cause error) {
	c.nc.Close()
	c.accepting = false
	c.over = true
	if fail == nil && c.connErr != nil {
		fail = c.connErr
	}
	for id, ch := range c.pending {
		switch {
		case fail != nil:
			ch <- outcome{err: fail.clone()}
		case c.goodbye:
			ch <- outcome{lost: errGoodbye, unread: true}
		default:
			ch <- outcome{lost: cause}
		}
		delete(c.pending, id)
	}
	close(c.done)
}

// handOver gives the reader's role to a waiting call, if any (mu held, the role released).
func (c *conn) handOver() {
	c.reading = false
	if c.over {
		return
	}
	for id, ch := range c.pending {
		if id == c.writing {
			// Blocked, maybe, in a write keyholed will not read until its answers are read: a
			// reader that is writing would leave every answer unread. It takes the role itself
			// after its write, if nobody has it then.
			continue
		}
		c.reading = true
		ch <- outcome{lead: true}
		return
	}
	c.closeIfIdle()
}

// forget removes a call; it reports false if an outcome had already been sent to it. A role of
// reader handed to it and not taken up is handed on.
func (c *conn) forget(id uint64, ch chan outcome) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	if ok {
		select {
		case <-ch: // only ever the role: no answer is sent while the call is pending
			c.handOver()
		default:
		}
	}
	c.closeIfIdle()
	return ok
}

// send writes one request frame and waits for its answer until ctx ends.
func (c *conn) send(ctx *callCtx, id uint64, frame []byte) (status, outcome) {
	// The turn to write is waited for under ctx: a call must not wait past its own deadline behind
	// another's write that keyholed is slow to read.
	select {
	case c.wturn <- struct{}{}:
	default:
		select {
		case c.wturn <- struct{}{}:
		case <-ctx.Done():
			return timedOut, outcome{}
		}
	}
	c.mu.Lock()
	if !c.accepting {
		err := c.connErr
		c.mu.Unlock()
		<-c.wturn
		return notWritten, outcome{err: err}
	}
	ch := c.spare
	c.spare = nil
	if ch == nil {
		ch = make(chan outcome, 2) // the role of reader, then an outcome at the end of the connection
	}
	c.pending[id] = ch
	c.writing = id
	c.mu.Unlock()

	n, werr := c.write(frame, ctx.deadline)
	c.mu.Lock()
	c.writing = 0
	c.mu.Unlock()
	if werr != nil {
		timeout := isTimeout(werr)
		if n == 0 && timeout {
			// Nothing went out: the stream is as good as it was; only this call is over.
			c.forget(id, ch)
			<-c.wturn
			return timedOut, outcome{}
		}
		if n > 0 && timeout {
			// A frame cut short: nothing may follow it. Closed before the turn is given back.
			c.forget(id, ch)
			c.close()
			<-c.wturn
			return timedOut, outcome{}
		}
		// The write failed (EPIPE, ECONNRESET): keyholed closed the connection, and may have said
		// why first (overloaded on connect, rule 4), or said goodbye (rule 3). Send nothing more on
		// it (so that nothing follows a frame cut short: it stops accepting before the turn is given
		// back), but read what is there up to the end of the stream, as long as ctx allows: the call
		// stays pending (no answer can have its id: it was not sent whole) until the connection ends.
		c.stopAccepting()
		<-c.wturn
		if st, _ := c.wait(ctx, id, ch); st == timedOut {
			c.close()
			<-c.done
		}
		c.mu.Lock()
		err, goodbye := c.connErr, c.goodbye
		c.mu.Unlock()
		switch {
		case goodbye:
			// keyholed stopped reading before it, whether or not part of it went out: rule 1.
			return notWritten, outcome{lost: werr}
		case n > 0:
			// Part of it went out, and no goodbye says keyholed did not read it: rule 2.
			return lost, outcome{lost: werr}
		}
		return notWritten, outcome{err: err, lost: werr}
	}
	<-c.wturn
	if c.written != nil {
		c.written()
	}
	return c.wait(ctx, id, ch)
}

// wait waits for call id's outcome on ch, reading the connection itself when nobody else does.
func (c *conn) wait(ctx *callCtx, id uint64, ch chan outcome) (status, outcome) {
	c.mu.Lock()
	lead := !c.reading && !c.over
	if lead {
		c.reading = true
	}
	c.mu.Unlock()
	for {
		if lead {
			if o, ok := c.lead(ctx, id, ch); ok {
				return classify(o)
			}
			// ctx ended while reading: the role is handed on.
			if c.forget(id, ch) {
				return timedOut, outcome{}
			}
			return classify(<-ch)
		}
		select {
		case o := <-ch:
			if !o.lead {
				return classify(o)
			}
			lead = true
		case <-ctx.Done():
			if c.forget(id, ch) {
				return timedOut, outcome{}
			}
			o := <-ch
			if o.lead {
				// Handed the role just as it timed out; its outcome came with the end of the connection.
				c.mu.Lock()
				c.handOver()
				c.mu.Unlock()
				o = <-ch
			}
			return classify(o)
		}
	}
}

func classify(o outcome) (status, outcome) {
	if o.unread {
		return notWritten, o
	}
	if o.lost != nil {
		return lost, o
	}
	return answered, o
}

// Deadlines are set on the socket only when they must change: each set adds or moves a runtime
// timer, and doing that per call costs more than the call's own work. A deadline left by an earlier
// call that is no later than this call's can stay: a read or write that reaches it early is
// resumed with this call's deadline. A later one must be brought forward.

// readBy makes a read return by deadline (the reader only).
func (c *conn) readBy(deadline time.Time) {
	if c.rdl.IsZero() || c.rdl.After(deadline) {
		c.setReadDeadline(deadline)
	}
}

func (c *conn) setReadDeadline(deadline time.Time) {
	c.rdl = deadline
	c.nc.SetReadDeadline(deadline)
}

func (c *conn) setWriteDeadline(deadline time.Time) {
	c.wdl = deadline
	c.nc.SetWriteDeadline(deadline)
}

// write writes frame whole, or until deadline (the writer only, holding wturn).
func (c *conn) write(frame []byte, deadline time.Time) (int, error) {
	if c.wdl.IsZero() || c.wdl.After(deadline) {
		c.setWriteDeadline(deadline)
	}
	n := 0
	for {
		m, err := c.nc.Write(frame[n:])
		n += m
		if err != nil && isTimeout(err) && time.Now().Before(deadline) {
			// An earlier call's deadline: this call's is later.
			c.setWriteDeadline(deadline)
			continue
		}
		return n, err
	}
}

// isTimeout reports whether err is a deadline's (its net.Error goes to the heap: called on errors only).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// aLongTimeAgo is a read deadline that makes a read at work return at once.
var aLongTimeAgo = time.Unix(1, 0)

// lead reads as the reader until ch has this call's outcome (ok) or ctx ends (not ok); either way
// it hands the role on before it returns.
func (c *conn) lead(ctx *callCtx, id uint64, ch chan outcome) (outcome, bool) {
	var stop chan struct{}
	if cancelled := ctx.cancelled(); cancelled != nil {
		// A read does not watch ctx: a goroutine cuts it short when ctx ends before its deadline.
		stop = make(chan struct{})
		c.mu.Lock()
		c.leadStop = stop
		c.mu.Unlock()
		go func() {
			select {
			case <-cancelled:
				c.mu.Lock()
				if c.leadStop == stop {
					c.nc.SetReadDeadline(aLongTimeAgo) // rdl is left as it is: the reader sets it again after the timeout
				}
				c.mu.Unlock()
			case <-stop:
			}
		}()
	}
	c.ownID, c.ownInto = id, ctx.into
	o, ok := c.readUntil(ctx, ch)
	c.ownID, c.ownInto = 0, nil
	c.mu.Lock()
	if stop != nil {
		c.leadStop = nil
		close(stop)
	}
	if ok && len(ch) == 0 {
		// Its outcome taken, ch is out of pending, and nothing else can be sent to it (the role is
		// not handed to the reader): the next call's.
		c.spare = ch
	}
	c.handOver()
	c.mu.Unlock()
	return o, ok
}

func (c *conn) readUntil(ctx *callCtx, ch chan outcome) (outcome, bool) {
	c.readBy(ctx.deadline)
	for {
		select {
		case o := <-ch: // only an answer, or the end of the connection: the role is ours
			return o, true
		default:
		}
		if ctx.Err() != nil {
			// Cancelled (or past the deadline) before the read: a watch that cut the read short may
			// have been undone by a deadline set since.
			return outcome{}, false
		}
		if len(c.buf) == cap(c.buf) {
			c.grow()
		}
		n, err := c.nc.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+n]
		if n > 0 {
			c.dispatch()
		}
		if err != nil {
			if isTimeout(err) {
				if ctx.Err() != nil {
					return outcome{}, false
				}
				c.setReadDeadline(ctx.deadline) // an earlier call's deadline, or a cut short by a cancelled call's watch
				continue
			}
			c.mu.Lock()
			if !c.over {
				cause := err
				if len(c.buf) > 0 && len(c.buf) < 4 {
					cause = errors.New("connection closed inside a frame header")
				} else if len(c.buf) >= 4 {
					cause = fmt.Errorf("connection closed inside a frame: %w", io.ErrUnexpectedEOF)
				}
				c.end(nil, cause)
			}
			c.mu.Unlock()
		}
	}
}

// grow makes room to read into: the whole of a frame whose length is known, else 64 KiB.
func (c *conn) grow() {
	want := 64 << 10
	if len(c.buf) >= 4 {
		if n := 4 + int(binary.BigEndian.Uint32(c.buf)); n > len(c.buf) && n-len(c.buf) > want {
			want = n - len(c.buf)
		}
	}
	b := make([]byte, len(c.buf), len(c.buf)+want)
	copy(b, c.buf)
	c.buf = b
}

// dispatch hands out every whole frame in buf. A frame's length is checked as soon as its four
// bytes are in, before more of it is read.
func (c *conn) dispatch() {
	b := c.buf
	for len(b) >= 4 {
		n := binary.BigEndian.Uint32(b)
		if n == 0 || n > MaxFrameBytes {
			c.fail(clientError(CodeProtocolError, fmt.Sprintf("keyholed sent a frame length of %d (allowed: 1 to %d)", n, MaxFrameBytes), nil))
			return
		}
		if uint64(len(b)-4) < uint64(n) {
			break
		}
		body := b[4 : 4+n]
		b = b[4+n:]
		id, hasID, o, err := parseResponse(body, c.ownID, c.ownInto)
		if err != nil {
			c.fail(clientError(CodeProtocolError, "keyholed sent an invalid response: "+err.Error(), nil))
			return
		}
		c.mu.Lock()
		if !hasID && o.err != nil && o.err.Code == CodeShuttingDown {
			// keyholed's goodbye (rule 3): its last frame, after every answer it will give, saying
			// that each request still unanswered here was never read. The connection is over now:
			// each call still waiting goes to a new connection (end: unread), a change too, and
			// nothing more is sent here. Whatever follows it is not read.
			c.goodbye = true
			if !c.over {
				c.end(nil, nil)
			}
			c.mu.Unlock()
			c.buf = c.buf[:0]
			return
		}
		if !hasID {
			// Every request of ours has an id, so this is about the connection (overloaded on
			// connect, bad_frame, frame_too_large): keyholed answers what it has read, then closes.
			if o.err != nil {
				c.accepting = false
				if c.connErr == nil {
					c.connErr = o.err
				}
			}
		} else if ch, ok := c.pending[id]; ok {
			delete(c.pending, id)
			ch <- o
		} // else: nobody waits for it (timed out, or not ours): dropped
		c.mu.Unlock()
	}
	// Keep what is left (part of a frame) at the start of the buffer.
	if len(b) == 0 {
		c.buf = c.buf[:0]
		if cap(c.buf) > 64<<10 {
			c.buf = nil // not kept after a large answer
		}
	} else if len(b) < len(c.buf) {
		c.buf = c.buf[:copy(c.buf, b)]
	}
}

// errGoodbye is the cause of a call keyholed's goodbye turned away: it was never read.
var errGoodbye = errors.New("keyholed said goodbye (shutting down) before reading the request")

// fail ends the connection with a final error for every call on it (protocol_error).
func (c *conn) fail(e *Error) {
	c.buf = c.buf[:0]
	c.mu.Lock()
	if !c.over {
		c.end(e, nil)
	}
	c.mu.Unlock()
}

func (e *Error) clone() *Error {
	c := *e
	return &c
}
