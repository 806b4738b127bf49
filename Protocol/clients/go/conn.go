package keyhole

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"unicode/utf8"
)

// MaxFrameBytes is the largest payload a frame may carry, either way (PROTOCOL.md section 2).
const MaxFrameBytes = 16 << 20

// outcome is what a call waiting on a connection learns: an answer (result or err), or that the
// connection ended before it (lost, the cause).
type outcome struct {
	result json.RawMessage
	err    *Error
	lost   error
}

// status says how a send ended.
type status int

const (
	answered   status = iota // outcome holds the answer, or a final error (protocol_error, a null-id error)
	notWritten               // no byte went out: the connection was found closed (outcome.err: what keyholed said about it, if anything)
	lost                     // written, and the connection ended before the answer (outcome.lost: why)
	timedOut                 // the deadline passed or the context ended
)

// conn is one connection and the goroutine that reads it.
//
// Invariants: a call's channel is in pending exactly as long as nothing was sent on it; the reader
// sends to it and removes it under mu. Once accepting is false no call is added, and no frame is
// written: a writer checks accepting after taking wturn, and a writer that leaves the stream unusable
// (a frame cut short) stops accepting before it gives wturn back, so no frame follows a torn one.
// When the reader stops it closes the socket, then fails every pending call under mu, then closes done.
type conn struct {
	nc    net.Conn
	wturn chan struct{} // one slot: the writer holding it sends one frame whole; waited for under the call's context
	mu    sync.Mutex
	done  chan struct{}

	pending   map[uint64]chan outcome
	accepting bool
	connErr   *Error // keyholed's error with a null id: about the connection, which it then closes

	written func() // tests: called when a request is written whole
}

func newConn(nc net.Conn, written func()) *conn {
	c := &conn{nc: nc, wturn: make(chan struct{}, 1), done: make(chan struct{}), pending: make(map[uint64]chan outcome), accepting: true, written: written}
	go c.readLoop()
	return c
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
	c.mu.Unlock()
}

// close shuts the connection now; the reader fails the calls on it (lost).
func (c *conn) close() {
	c.stopAccepting()
	c.nc.Close()
}

// forget removes a call; it reports false if the reader had already sent it an outcome.
func (c *conn) forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// send writes one request frame and waits for its answer until ctx ends.
func (c *conn) send(ctx context.Context, id uint64, frame []byte) (status, outcome) {
	// The turn to write is waited for under ctx: a call must not wait past its own deadline behind
	// another's write that keyholed is slow to read.
	select {
	case c.wturn <- struct{}{}:
	case <-ctx.Done():
		return timedOut, outcome{}
	}
	ch := make(chan outcome, 1)
	c.mu.Lock()
	if !c.accepting {
		err := c.connErr
		c.mu.Unlock()
		<-c.wturn
		return notWritten, outcome{err: err}
	}
	c.pending[id] = ch
	c.mu.Unlock()

	deadline, _ := ctx.Deadline()
	c.nc.SetWriteDeadline(deadline)
	n, werr := c.nc.Write(frame)
	if werr != nil {
		c.forget(id)
		var ne net.Error
		timeout := errors.As(werr, &ne) && ne.Timeout()
		if n == 0 && timeout {
			// Nothing went out: the stream is as good as it was; only this call is over.
			<-c.wturn
			return timedOut, outcome{}
		}
		if n > 0 {
			// A frame cut short: nothing may follow it. Closed before the turn is given back.
			c.close()
			<-c.wturn
			if timeout {
				return timedOut, outcome{}
			}
			return lost, outcome{lost: werr}
		}
		// Not a byte went out (EPIPE, ECONNRESET): keyholed closed the connection, and may have said
		// why first (overloaded on connect). Send nothing more on it, but leave the reader to take in
		// what is there up to the end of the stream (rule 4), as long as ctx allows.
		c.stopAccepting()
		<-c.wturn
		select {
		case <-c.done:
		case <-ctx.Done():
			c.close()
			<-c.done
		}
		c.mu.Lock()
		err := c.connErr
		c.mu.Unlock()
		return notWritten, outcome{err: err, lost: werr}
	}
	<-c.wturn
	if c.written != nil {
		c.written()
	}

	select {
	case o := <-ch:
		return classify(o)
	case <-ctx.Done():
		if c.forget(id) {
			return timedOut, outcome{}
		}
		return classify(<-ch) // answered just now: take it
	}
}

func classify(o outcome) (status, outcome) {
	if o.lost != nil {
		return lost, o
	}
	return answered, o
}

func (c *conn) readLoop() {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var header [4]byte
	var fail *Error // a final error for the calls left waiting; nil: lost
	var cause error
	for {
		if _, err := io.ReadFull(br, header[:]); err != nil {
			cause = err
			if err == io.ErrUnexpectedEOF {
				cause = errors.New("connection closed inside a frame header")
			}
			break
		}
		n := binary.BigEndian.Uint32(header[:])
		if n == 0 || n > MaxFrameBytes {
			fail = clientError(CodeProtocolError, fmt.Sprintf("keyholed sent a frame length of %d (allowed: 1 to %d)", n, MaxFrameBytes), nil)
			break
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			cause = fmt.Errorf("connection closed inside a frame: %w", err)
			break
		}
		id, hasID, o, err := parseResponse(body)
		if err != nil {
			fail = clientError(CodeProtocolError, "keyholed sent an invalid response: "+err.Error(), nil)
			break
		}
		c.mu.Lock()
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
	c.nc.Close()
	c.mu.Lock()
	c.accepting = false
	if fail == nil && c.connErr != nil {
		fail = c.connErr
	}
	for id, ch := range c.pending {
		if fail != nil {
			ch <- outcome{err: fail.clone()}
		} else {
			ch <- outcome{lost: cause}
		}
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

func (e *Error) clone() *Error {
	c := *e
	return &c
}

// parseResponse checks one payload against PROTOCOL.md section 4. hasID is false for a null or
// absent id; an id that is a string or an integer no request of ours can have gets hasID true and
// an id of 0 (never used), so it is dropped.
func parseResponse(body []byte) (id uint64, hasID bool, o outcome, err error) {
	if !utf8.Valid(body) {
		return 0, false, o, errors.New("not UTF-8")
	}
	m, err := topLevelMembers(body)
	if err != nil {
		return 0, false, o, err
	}
	if raw, ok := m["id"]; ok && !bytes.Equal(raw, []byte("null")) {
		hasID = true
		switch {
		case raw[0] == '"':
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return 0, false, o, errors.New("bad id")
			}
		case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
			if bytes.ContainsAny(raw, ".eE") {
				return 0, false, o, fmt.Errorf("id %s is not an integer", raw)
			}
			id, _ = strconv.ParseUint(string(raw), 10, 64) // negative or too large: not ours
		default:
			return 0, false, o, fmt.Errorf("id %s is neither a string, an integer nor null", raw)
		}
	}
	switch string(m["ok"]) {
	case "true":
		r := m["result"]
		if len(r) == 0 || r[0] != '{' {
			return 0, false, o, errors.New("ok is true but result is not an object")
		}
		o.result = json.RawMessage(r)
	case "false":
		e, perr := parseError(m["error"])
		if perr != nil {
			return 0, false, o, perr
		}
		o.err = e
	default:
		return 0, false, o, errors.New("ok is neither true nor false")
	}
	return id, hasID, o, nil
}

func parseError(raw []byte) (*Error, error) {
	var m map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
		return nil, errors.New("ok is false but error is not an object")
	}
	e := &Error{}
	if json.Unmarshal(m["code"], &e.Code) != nil || len(m["code"]) == 0 || m["code"][0] != '"' {
		return nil, errors.New("error.code is not a string")
	}
	if msg, ok := m["message"]; ok && string(msg) != "null" {
		if msg[0] != '"' || json.Unmarshal(msg, &e.Message) != nil {
			return nil, errors.New("error.message is not a string")
		}
	}
	if r, ok := m["retry_after_ms"]; ok && string(r) != "null" {
		var f float64
		if json.Unmarshal(r, &f) != nil || f < 0 {
			return nil, errors.New("error.retry_after_ms is not a non-negative number")
		}
		e.RetryAfterMs = int64(f)
	}
	if a, ok := m["apple_error"]; ok && len(a) > 0 && a[0] == '"' {
		_ = json.Unmarshal(a, &e.AppleError)
	}
	if !serverCodes[e.Code] {
		e.Message = fmt.Sprintf("%s (unknown code %q)", e.Message, e.Code)
		e.Code = CodeInternal
	}
	return e, nil
}
