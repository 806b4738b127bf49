package keyhole

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// watchedConn wraps a client's connection to see (and, for one test, delay) what the client does on it.
type watchedConn struct {
	net.Conn
	writing chan struct{} // receives once when the first Write starts

	mu        sync.Mutex
	writes    []writeResult
	startOnce sync.Once

	readGate  chan struct{} // nil: reads are not held back
	gateOnce  sync.Once
	gateAfter time.Duration // with readGate: how long after a failed write reads are let through
}

type writeResult struct {
	n   int
	err error
}

func watch(nc net.Conn) *watchedConn {
	return &watchedConn{Conn: nc, writing: make(chan struct{}, 1)}
}

func (w *watchedConn) Write(b []byte) (int, error) {
	w.startOnce.Do(func() { w.writing <- struct{}{} })
	n, err := w.Conn.Write(b)
	w.mu.Lock()
	w.writes = append(w.writes, writeResult{n, err})
	w.mu.Unlock()
	if err != nil && w.readGate != nil {
		time.AfterFunc(w.gateAfter, w.openGate)
	}
	return n, err
}

func (w *watchedConn) Read(b []byte) (int, error) {
	if w.readGate != nil {
		<-w.readGate
	}
	return w.Conn.Read(b)
}

func (w *watchedConn) Close() error {
	if w.readGate != nil {
		w.openGate()
	}
	return w.Conn.Close()
}

func (w *watchedConn) openGate() { w.gateOnce.Do(func() { close(w.readGate) }) }

func (w *watchedConn) results() []writeResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]writeResult(nil), w.writes...)
}

// silentServer accepts connections and never reads them (keyholed stuck), until the test ends.
func silentServer(t *testing.T) (socket string, accepted chan net.Conn) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "k.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	accepted = make(chan net.Conn, 8)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- nc
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case nc := <-accepted:
				nc.Close()
			default:
				return
			}
		}
	})
	return socket, accepted
}

// dialWatched makes a client whose connections are watched; conns receives each new one.
func dialWatched(t *testing.T, socket string, gate time.Duration, opts ...Option) (*Client, chan *watchedConn) {
	t.Helper()
	c, err := Dial(context.Background(), socket, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	conns := make(chan *watchedConn, 8)
	c.wrap = func(nc net.Conn) net.Conn {
		w := watch(nc)
		if gate > 0 {
			w.readGate, w.gateAfter = make(chan struct{}), gate
		}
		conns <- w
		return w
	}
	return c, conns
}

// bigEcho is a debug.echo whose frame is far larger than a socket's buffer: its write blocks while
// keyholed does not read.
var bigEcho = map[string]any{"pad": strings.Repeat("x", 2<<20)}

// waitWriting waits until the first call is writing on w, or fails the test if it ended first.
func waitWriting(t *testing.T, w *watchedConn, first chan error) {
	t.Helper()
	select {
	case <-w.writing:
	case err := <-first:
		t.Fatalf("the first call ended before writing: %v", err)
	}
}

// A call waiting for its turn to write, behind another's write that keyholed does not read, keeps
// its own deadline (timeout, on time, nothing of it written), not the other's.
func TestWriteTurnKeepsTheDeadline(t *testing.T) {
	socket, accepted := silentServer(t)
	c, conns := dialWatched(t, socket, 0)

	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		_, err := c.Call(ctx, "debug.echo", bigEcho)
		first <- err
	}()
	w := <-conns
	waitWriting(t, w, first) // the first call holds the turn, blocked in its write

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Call(ctx, "ping", nil)
	if elapsed := time.Since(start); !errors.Is(err, ErrTimeout) || elapsed > 600*time.Millisecond {
		t.Errorf("second call: %v after %v, want a timeout at its own deadline (100 ms)", err, elapsed)
	}
	if err := <-first; !errors.Is(err, ErrTimeout) {
		t.Errorf("first call: %v, want timeout", err)
	}
	// On the wire: a prefix of the first frame only (cut short, then closed), nothing of the second.
	nc := <-accepted
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(nc)
	if err != nil || len(got) < 4 {
		t.Fatalf("read %d bytes: %v", len(got), err)
	}
	if n := int(binary.BigEndian.Uint32(got[:4])); n < 2<<20 || len(got) >= 4+n {
		t.Errorf("the stream holds %d bytes after a first frame of %d: more than a cut first frame", len(got), n)
	}
}

// After a write cut short, nothing more is written on that connection: a call waiting for the turn
// goes to a new connection instead of following the torn frame.
func TestNothingFollowsATornFrame(t *testing.T) {
	socket, _ := silentServer(t)
	c, conns := dialWatched(t, socket, 0)

	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.Call(ctx, "debug.echo", bigEcho)
		first <- err
	}()
	w := <-conns
	waitWriting(t, w, first)
	second := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.Call(ctx, "ping", nil)
		second <- err
	}()
	if err := <-first; !errors.Is(err, ErrTimeout) {
		t.Errorf("first call: %v, want timeout", err)
	}
	<-second // a timeout on the next connection, which the silent server does not answer either
	writes := w.results()
	if len(writes) == 0 || writes[0].n == 0 || writes[0].err == nil {
		t.Fatalf("the first write was not cut short: %+v", writes)
	}
	if len(writes) > 1 {
		t.Errorf("written on the connection after a torn frame: %+v", writes[1:])
	}
}

// A safe call written, whose connection ended, and whose re-send cannot reach keyholed (the socket
// is gone): connection_lost, since it was sent; unavailable would say it never was.
func TestResendThatCannotConnectIsConnectionLost(t *testing.T) {
	for _, op := range []string{"ping", "session.get"} {
		socket := filepath.Join(t.TempDir(), "k.sock")
		ln, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				served <- err
				return
			}
			_, err = readFrame(nc)
			ln.Close() // removes the socket: nobody listens any more
			nc.Close()
			served <- err
		}()
		c, err := Dial(context.Background(), socket, WithTimeout(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Call(context.Background(), op, map[string]any{"session": "kh_" + strings.Repeat("A", 43)})
		if !errors.Is(err, ErrConnectionLost) {
			t.Errorf("%s: %v, want connection_lost", op, err)
		}
		if err := <-served; err != nil {
			t.Errorf("%s: the server read no request: %v", op, err)
		}
		c.Close()
	}
}

// Connecting goes on until the deadline: the last attempt is not given up for a backoff longer than
// the time left (doubling from 10 ms, the waits reach 630 ms and then 500 ms more would pass 1 s).
func TestConnectingLastsUntilTheDeadline(t *testing.T) {
	c, err := Dial(context.Background(), filepath.Join(t.TempDir(), "nobody.sock"), WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Ping(context.Background())
	elapsed := time.Since(start)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("want unavailable, got %v", err)
	}
	if elapsed < 950*time.Millisecond || elapsed > 1500*time.Millisecond {
		t.Errorf("gave up after %v, want at the deadline (1 s)", elapsed)
	}
}

// keyholed refuses a connection (overloaded on connect) and closes it before the client's write:
// the write fails with nothing sent, and the refusal still waiting in the socket is the call's
// answer (rule 4), even when the reader had not read it yet (reads are held back here until the
// client closes the connection, or 100 ms after the failed write).
func TestRefusalReadAfterAFailedWrite(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "k.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan struct{})
	go func() {
		defer close(refused)
		nc, err := ln.Accept()
		ln.Close() // one connection only: a reconnect finds nobody
		if err != nil {
			return
		}
		nc.Write(frameOf([]byte(`{"id":null,"ok":false,"error":{"code":"overloaded","message":"too many connections","retry_after_ms":250}}`)))
		nc.Close()
	}()
	c, conns := dialWatched(t, socket, 100*time.Millisecond, WithTimeout(2*time.Second))
	c.wrap = func(wrap func(net.Conn) net.Conn) func(net.Conn) net.Conn {
		return func(nc net.Conn) net.Conn {
			<-refused // the client writes only once keyholed has closed the connection
			return wrap(nc)
		}
	}(c.wrap)
	_, err = c.Ping(context.Background())
	var ke *Error
	if !errors.As(err, &ke) || ke.Code != CodeOverloaded || ke.RetryAfterMs != 250 {
		t.Errorf("want overloaded (retry_after_ms 250), got %v", err)
	}
	w := <-conns
	if writes := w.results(); len(writes) != 1 || writes[0].n != 0 || writes[0].err == nil {
		t.Errorf("want one write that failed with nothing sent, got %+v", writes)
	}
}

func TestDialRejectsANonPositiveTimeout(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if c, err := Dial(context.Background(), "/tmp/x.sock", WithTimeout(d)); err == nil || c != nil {
			t.Errorf("WithTimeout(%v): %v %v, want an error", d, c, err)
		}
	}
	if c, err := Dial(context.Background(), "/tmp/x.sock", WithTimeout(time.Nanosecond)); err != nil || c == nil {
		t.Errorf("WithTimeout(1ns): %v", err)
	}
}

// A reader that got its answer hands the role to a waiting call, never to one blocked writing: keyholed
// may not read that write until its answers are read (section 5), so nobody would read them, and a
// third call's answer would sit unread until that call's deadline. Repeated, as the reader's role
// goes to either waiting call in map order.
func TestRoleNeverGoesToACallBlockedWriting(t *testing.T) {
	for round := 0; round < 12; round++ {
		socket := filepath.Join(t.TempDir(), "k.sock")
		ln, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		readBoth := make(chan []uint64, 1)
		answerFirst := make(chan struct{})
		firstDone := make(chan struct{})
		finish := make(chan struct{})
		serverDone := make(chan struct{})
		go func() {
			defer close(serverDone)
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
			var ids []uint64
			for len(ids) < 2 {
				body, err := readFrame(nc)
				if err != nil {
					return
				}
				var request struct{ ID uint64 }
				if err := json.Unmarshal(body, &request); err != nil {
					return
				}
				ids = append(ids, request.ID)
			}
			readBoth <- ids
			answer := func(id uint64) {
				nc.Write(frameOf([]byte(fmt.Sprintf(`{"id":%d,"ok":true,"result":{"n":%d}}`, id, id))))
			}
			<-answerFirst
			answer(ids[0])
			<-firstDone
			answer(ids[1]) // by now the first answer's reader has handed the role on
			// Open until the test is done: a close would fail the third call's write, which closes
			// the connection, maybe before the second answer is read from it.
			<-finish
		}()

		c, err := Dial(context.Background(), socket, WithTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		bigWrite := make(chan struct{}, 1)
		c.wrap = func(nc net.Conn) net.Conn { return &signalBigWrite{Conn: nc, started: bigWrite} }
		results := make(chan error, 2)
		for i := 0; i < 2; i++ {
			go func() { _, err := c.Call(context.Background(), "ping", nil); results <- err }()
		}
		<-readBoth
		// A third call writes a frame larger than the socket's buffers, which the server never reads.
		go c.Call(context.Background(), "debug.echo", bigEcho)
		<-bigWrite
		close(answerFirst)
		if err := <-results; err != nil {
			t.Fatalf("round %d: the first call: %v", round, err)
		}
		close(firstDone)
		if err := <-results; err != nil {
			t.Fatalf("round %d: the second call, answered while a third was writing: %v", round, err)
		}
		close(finish)
		c.Close()
		ln.Close()
		<-serverDone
	}
}

// signalBigWrite says when a write of more than 1 MiB starts.
type signalBigWrite struct {
	net.Conn
	started chan struct{}
}

func (s *signalBigWrite) Write(b []byte) (int, error) {
	if len(b) > 1<<20 {
		select {
		case s.started <- struct{}{}:
		default:
		}
	}
	return s.Conn.Write(b)
}
