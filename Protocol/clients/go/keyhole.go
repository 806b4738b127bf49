// Package keyhole is a client for keyholed, Keyhole's local authentication daemon (Go 1.19 and
// later, standard library only).
//
// keyholed listens on a Unix domain socket and speaks the protocol of Protocol/PROTOCOL.md: each
// message is a 4-byte big-endian length and one UTF-8 JSON object.
//
//	kh, err := keyhole.Dial(ctx, "") // $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock
//	if err != nil { ... }
//	defer kh.Close()
//	s, err := kh.GetSession(ctx, token)
//	if errors.Is(err, keyhole.ErrSessionNotFound) { ... } // not signed in
//
// One Client is safe for any number of goroutines: it keeps one connection and multiplexes their
// requests on it, matching answers by id. Each call's deadline is the earlier of its context's and
// the client's timeout (default 5 s), and covers connecting, waiting to reconnect, writing and the
// answer. Reconnects and re-sends follow PROTOCOL.md section 8 (see the README).
package keyhole

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSocket is keyholed's socket when neither Dial's path nor $KEYHOLE_SOCKET names one.
const DefaultSocket = "/run/keyhole/keyhole.sock"

// DefaultTimeout is a call's deadline when its context has an earlier one or none.
const DefaultTimeout = 5 * time.Second

const (
	firstBackoff = 10 * time.Millisecond
	maxBackoff   = 500 * time.Millisecond
)

// Option changes a Client's settings at Dial.
type Option func(*Client)

// WithTimeout sets the longest a call may take (default 5 s); a context's earlier deadline wins.
// It must be positive: Dial rejects zero or less (every call would time out at once).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithWaitOverloaded makes a call answered overloaded with retry_after_ms wait that long and try
// again, as long as the wait ends before its deadline (off by default: the error reaches the caller).
func WithWaitOverloaded(on bool) Option { return func(c *Client) { c.waitOverloaded = on } }

// Client is a connection to keyholed shared by goroutines. Make one per process with Dial.
type Client struct {
	path           string
	timeout        time.Duration
	waitOverloaded bool

	nextID  uint64        // atomic; ids start at 1 and are unique over the client's connections
	dialing chan struct{} // one goroutine dials at a time

	mu     sync.Mutex
	cur    *conn
	conns  map[*conn]struct{} // every connection not yet over (until its done is closed)
	closed bool

	written func()                  // tests: called when a request is written whole
	wrap    func(net.Conn) net.Conn // tests: wraps each new connection
}

// Dial makes a client for keyholed's socket at path (empty: $KEYHOLE_SOCKET, else DefaultSocket).
// It connects lazily, on the first call, so it fails only when ctx has already ended or an option
// is invalid (WithTimeout of zero or less): an unreachable keyholed is reported by each call
// (unavailable), and the client reconnects by itself.
func Dial(ctx context.Context, path string, opts ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if path == "" {
		path = os.Getenv("KEYHOLE_SOCKET")
	}
	if path == "" {
		path = DefaultSocket
	}
	c := &Client{path: path, timeout: DefaultTimeout, dialing: make(chan struct{}, 1), conns: make(map[*conn]struct{})}
	for _, o := range opts {
		o(c)
	}
	if c.timeout <= 0 {
		return nil, fmt.Errorf("keyhole: WithTimeout(%v): the timeout must be positive", c.timeout)
	}
	return c, nil
}

// Path is the socket the client connects to.
func (c *Client) Path() string { return c.path }

// Close closes the client's connections. Calls in flight fail (connection_lost, or unavailable if
// their request was not yet written), and so does every later call.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.cur = nil
	conns := make([]*conn, 0, len(c.conns))
	for cn := range c.conns {
		conns = append(conns, cn)
	}
	c.mu.Unlock()
	for _, cn := range conns {
		cn.close()
		<-cn.done
	}
	return nil
}

// Call sends operation op with args (nil: none) and returns its result object. JSON numbers in the
// result are json.Number, so 64-bit integers keep every digit. A failure is an *Error; args that
// cannot be encoded as JSON give a plain error and nothing is sent.
func (c *Client) Call(ctx context.Context, op string, args map[string]any) (map[string]any, error) {
	var a any
	if args != nil {
		a = args
	}
	raw, _, err := c.call(ctx, op, a, nil)
	if err != nil {
		return nil, err
	}
	return decodeMap(raw)
}

func decodeMap(raw json.RawMessage) (map[string]any, error) {
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, clientError(CodeProtocolError, "result: "+err.Error(), nil)
	}
	return m, nil
}

// call is Call without decoding the result; or, with into (a *Session or *User), with its result
// read into into when the call reads its own answer (decoded true, and no raw result).
func (c *Client) call(ctx context.Context, op string, args any, into any) (json.RawMessage, bool, error) {
	id := atomic.AddUint64(&c.nextID, 1)
	frame, err := encodeRequest(id, op, args)
	if err != nil {
		return nil, false, err
	}
	cc := newCallCtx(ctx, c.timeout)
	cc.into = into
	defer cc.release()
	ctx = cc

	safe := SafeToRepeat(op)
	resent := false
	written := false // an attempt was written: from then on the outcome is unknown, never "unavailable"
	backoff := time.Duration(0)
	for attempt := 0; ; attempt++ {
		if attempt > 0 { // a new id (and the same args) for each attempt
			id = atomic.AddUint64(&c.nextID, 1)
			if frame, err = encodeRequest(id, op, args); err != nil {
				return nil, false, err
			}
		}
		cn, err := c.connection(ctx)
		if err != nil {
			if written {
				return nil, false, clientError(CodeConnectionLost, fmt.Sprintf("the connection to keyholed ended before the answer to %s, and its re-send could not reach keyholed: outcome unknown: %v", op, err), err)
			}
			return nil, false, err
		}
		st, o := cn.send(cc, id, frame)
		switch st {
		case answered:
			if o.err == nil {
				return o.result, o.decoded, nil
			}
			switch o.err.Code {
			case CodeShuttingDown: // rule 3: nothing more on that connection
				cn.stopAccepting()
				// keyholed said it did not do it: a re-send that cannot reach keyholed leaves it
				// undone, so "written" stays as it was.
				if safe && !resent {
					resent = true
					continue
				}
			case CodeOverloaded: // rule 5
				if c.waitOverloaded && o.err.RetryAfterMs > 0 && waitWithin(ctx, time.Duration(o.err.RetryAfterMs)*time.Millisecond) {
					continue
				}
			}
			return nil, false, o.err
		case notWritten: // rule 1, unless keyholed said why it closed (rule 4)
			// Also a call keyholed's goodbye turned away (rule 3): it was never read, so it goes to
			// a new connection whatever its operation, without using up the one re-send of rule 2,
			// and "written" stays as it was. Several goodbyes in a row are bounded by the deadline.
			if o.err != nil {
				if o.err.Code == CodeOverloaded && c.waitOverloaded && o.err.RetryAfterMs > 0 &&
					waitWithin(ctx, time.Duration(o.err.RetryAfterMs)*time.Millisecond) {
					continue
				}
				return nil, false, o.err.clone()
			}
			if backoff > 0 && !pause(ctx, backoff) {
				if written {
					return nil, false, clientError(CodeConnectionLost, fmt.Sprintf("the connection to keyholed ended before the answer to %s, and its re-send could not be written: outcome unknown: %v", op, o.lost), o.lost)
				}
				return nil, false, clientError(CodeUnavailable, fmt.Sprintf("keyholed at %s kept closing the connection before the request was sent", c.path), o.lost)
			}
			backoff = nextBackoff(backoff)
		case lost: // rule 2
			if c.isClosed() {
				return nil, false, clientError(CodeConnectionLost, "the client was closed with the request unanswered: outcome unknown", o.lost)
			}
			if safe && !resent {
				resent = true
				written = true
				continue
			}
			why := "operation " + op + " is not safe to repeat"
			if safe {
				why = "its re-send was lost too"
			}
			return nil, false, clientError(CodeConnectionLost, fmt.Sprintf("the connection to keyholed ended before the answer (%s): outcome unknown: %v", why, o.lost), o.lost)
		case timedOut:
			return nil, false, clientError(CodeTimeout, fmt.Sprintf("no answer to %s within the deadline", op), ctx.Err())
		}
	}
}

func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return firstBackoff
	}
	if d*2 > maxBackoff {
		return maxBackoff
	}
	return d * 2
}

// lastAttemptLead is how long before the deadline the last attempt to connect is made, so that
// waiting between attempts never gives up while there is still time (section 8: until the deadline).
const lastAttemptLead = time.Millisecond

// pause waits d before another attempt to connect, or less when the deadline is nearer, so that
// the last attempt is made just before it; it reports false when no time is left or ctx ended.
func pause(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl) - lastAttemptLead
		if left <= 0 {
			return false
		}
		if left < d {
			d = left
		}
	}
	return sleep(ctx, d)
}

// waitWithin waits d unless that would pass ctx's deadline or ctx ends first; it reports whether it
// waited (overloaded's retry_after_ms: a retry after the deadline is of no use).
func waitWithin(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	return sleep(ctx, d)
}

// sleep waits d unless ctx ends first; it reports whether it waited.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Client) usable() (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, clientError(CodeUnavailable, "the client is closed", nil)
	}
	if c.cur != nil && c.cur.isAccepting() {
		return c.cur, nil
	}
	return nil, nil
}

// connection returns the connection to send on, connecting (one goroutine at a time, waiting
// between failed attempts from 10 ms doubling to 500 ms) until ctx's deadline.
func (c *Client) connection(ctx context.Context) (*conn, error) {
	var last error
	wait := time.Duration(0)
	var dialer net.Dialer
	for {
		if cn, err := c.usable(); cn != nil || err != nil {
			return cn, err
		}
		select {
		case c.dialing <- struct{}{}:
		case <-ctx.Done():
			return nil, c.unreachable(last, ctx)
		}
		if cn, err := c.usable(); cn != nil || err != nil {
			<-c.dialing
			return cn, err
		}
		nc, err := dialer.DialContext(ctx, "unix", c.path)
		if err == nil {
			if c.wrap != nil {
				nc = c.wrap(nc)
			}
			cn := newConn(nc, c.written)
			c.mu.Lock()
			closed := c.closed
			if !closed {
				c.cur = cn
				c.conns[cn] = struct{}{}
			}
			c.mu.Unlock()
			<-c.dialing
			if closed {
				cn.close()
				return nil, clientError(CodeUnavailable, "the client is closed", nil)
			}
			go func() {
				<-cn.done
				c.mu.Lock()
				delete(c.conns, cn)
				c.mu.Unlock()
			}()
			return cn, nil
		}
		<-c.dialing
		last = err
		wait = nextBackoff(wait)
		if !pause(ctx, wait) {
			return nil, c.unreachable(last, ctx)
		}
	}
}

func (c *Client) unreachable(last error, ctx context.Context) *Error {
	if last == nil {
		last = ctx.Err()
	}
	return clientError(CodeUnavailable, fmt.Sprintf("cannot reach keyholed at %s before the deadline: %v", c.path, last), last)
}
