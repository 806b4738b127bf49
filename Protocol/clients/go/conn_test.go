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

// goodbyeFrame is keyholed's goodbye (PROTOCOL.md section 5): every request unanswered on the
// connection was never read.
var goodbyeFrame = frameOf([]byte(`{"id":null,"ok":false,"error":{"code":"shutting_down","message":"keyholed is shutting down: requests on this connection still unanswered were not read; send them again on a new connection"}}`))

// newSessionResult is a session.create result, as a scripted server answers it.
const newSessionResult = `{"session":"kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","id":"AAAAAAAAAAAAAAAAAAAAAA","issuer":"local","sub":"alice","created_at":1,"expires_at":2}`

// scriptedRequest is a request frame as a scripted server reads it.
type scriptedRequest struct {
	ID   json.RawMessage `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args"`
}

func readRequest(nc net.Conn) (scriptedRequest, error) {
	var r scriptedRequest
	body, err := readFrame(nc)
	if err != nil {
		return r, err
	}
	err = json.Unmarshal(body, &r)
	return r, err
}

// answerWith writes an ok answer to request r.
func answerWith(nc net.Conn, r scriptedRequest, result string) error {
	_, err := nc.Write(frameOf([]byte(`{"id":` + string(r.ID) + `,"ok":true,"result":` + result + `}`)))
	return err
}

// serveInTurn plays keyholed with one script per connection: it accepts a connection, runs its
// script (each read and write bounded by 10 s), closes it, and only then accepts the next one.
// Connections after the last script are closed at once. finish stops it and returns the first
// script's error, if any; every script must have run.
func serveInTurn(t *testing.T, scripts ...func(nc net.Conn) error) (socket string, finish func() error) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "k.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() {
		var first error
		ran := 0
		defer func() {
			if first == nil && ran < len(scripts) {
				first = fmt.Errorf("only %d of %d connections came", ran, len(scripts))
			}
			result <- first
		}()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			if ran < len(scripts) {
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				if err := scripts[ran](nc); err != nil && first == nil {
					first = fmt.Errorf("connection %d: %w", ran+1, err)
				}
				ran++
			}
			nc.Close()
		}
	}()
	var once sync.Once
	var ended error
	finish = func() error {
		once.Do(func() {
			ln.Close()
			ended = <-result
		})
		return ended
	}
	t.Cleanup(func() { finish() })
	return socket, finish
}

// The scripts of one connection: keyholed says goodbye after reading one request (the goodbye
// promises it did not read it, and the script takes the request only to check it), closes without
// a word after reading one (a crash: the request's fate is unknown), or answers it.
func saysGoodbye(op string) func(net.Conn) error {
	return func(nc net.Conn) error {
		if _, err := readOp(nc, op); err != nil {
			return err
		}
		_, err := nc.Write(goodbyeFrame)
		return err
	}
}

func closesSilently(op string) func(net.Conn) error {
	return func(nc net.Conn) error {
		_, err := readOp(nc, op)
		return err
	}
}

func answers(op, result string) func(net.Conn) error {
	return func(nc net.Conn) error {
		r, err := readOp(nc, op)
		if err != nil {
			return err
		}
		return answerWith(nc, r, result)
	}
}

// readOp reads the next request and checks it is op.
func readOp(nc net.Conn, op string) (scriptedRequest, error) {
	r, err := readRequest(nc)
	if err == nil && r.Op != op {
		err = fmt.Errorf("want %s, got %s", op, r.Op)
	}
	return r, err
}

// keyholed's goodbye came while the connection was idle, and the client, which reads only while a
// call waits, wrote its next request there before it read the goodbye: that request was never
// read, so it goes to a new connection, a change too (rule 3), and nothing more is written on the
// old one, which the client closes.
func TestGoodbyeFoundAfterWriting(t *testing.T) {
	pinged := make(chan struct{})
	goodbyeSent := make(chan struct{})
	var afterGoodbye []scriptedRequest
	var resent scriptedRequest
	socket, finish := serveInTurn(t,
		func(nc net.Conn) error {
			r, err := readRequest(nc)
			if err != nil {
				return err
			}
			if err := answerWith(nc, r, `{"protocol":1,"version":"x","uptime_ms":1}`); err != nil {
				return err
			}
			<-pinged // the ping's answer is in, and nobody reads the connection now
			_, err = nc.Write(goodbyeFrame)
			close(goodbyeSent)
			if err != nil {
				return err
			}
			// Read (keyholed would not) only to see what the client wrote after the goodbye, up to
			// the end of the stream, which the client must bring.
			for {
				r, err := readRequest(nc)
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return fmt.Errorf("the client did not close the connection after the goodbye: %w", err)
				}
				afterGoodbye = append(afterGoodbye, r)
			}
		},
		func(nc net.Conn) error {
			r, err := readRequest(nc)
			if err != nil {
				return err
			}
			resent = r
			return answerWith(nc, r, newSessionResult)
		})
	c, conns := dialWatched(t, socket, 0, WithTimeout(3*time.Second))
	_, err := c.Ping(context.Background())
	close(pinged)
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	<-goodbyeSent
	ns, err := c.CreateSession(context.Background(), "alice", SessionOptions{})
	if err != nil || ns.ID != "AAAAAAAAAAAAAAAAAAAAAA" {
		t.Fatalf("session.create after the goodbye: %+v %v, want the session of its re-send", ns, err)
	}
	if err := finish(); err != nil {
		t.Fatal(err)
	}
	first := <-conns
	if writes := first.results(); len(writes) != 2 || writes[1].err != nil {
		t.Errorf("want the ping and the create written whole on the first connection, got %+v", writes)
	}
	if len(afterGoodbye) != 1 || afterGoodbye[0].Op != "session.create" {
		t.Fatalf("written on the first connection after the goodbye: %+v, want the create only", afterGoodbye)
	}
	if resent.Op != "session.create" || string(resent.Args) != string(afterGoodbye[0].Args) || string(resent.ID) == string(afterGoodbye[0].ID) {
		t.Errorf("re-sent %s %s (id %s), want session.create with the same args %s and a new id (was %s)",
			resent.Op, resent.Args, resent.ID, afterGoodbye[0].Args, afterGoodbye[0].ID)
	}
}

// keyholed said goodbye, or refused the connection (overloaded on connect), and closed it before
// the client's write, which fails with nothing sent. The client reads what keyholed left: after a
// goodbye the change goes to a new connection and succeeds (rule 3); after the refusal, which is
// not a goodbye, the call fails with it and is not sent again (rule 4): the socket is gone by
// then, so a re-send would have ended unavailable.
func TestGoodbyeOrRefusalAfterAFailedWrite(t *testing.T) {
	for _, tc := range []struct {
		name    string
		frame   []byte
		goodbye bool
	}{
		{"goodbye", goodbyeFrame, true},
		{"overloaded", frameOf([]byte(`{"id":null,"ok":false,"error":{"code":"overloaded","message":"too many connections","retry_after_ms":250}}`)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closed := make(chan struct{})
			scripts := []func(net.Conn) error{func(nc net.Conn) error {
				_, err := nc.Write(tc.frame)
				nc.Close()
				close(closed)
				return err
			}}
			if tc.goodbye {
				scripts = append(scripts, answers("session.create", newSessionResult))
			}
			socket, finish := serveInTurn(t, scripts...)
			c, conns := dialWatched(t, socket, 0, WithTimeout(2*time.Second))
			c.wrap = func(wrap func(net.Conn) net.Conn) func(net.Conn) net.Conn {
				return func(nc net.Conn) net.Conn {
					<-closed // the client writes only once keyholed has closed the first connection
					return wrap(nc)
				}
			}(c.wrap)
			ns, err := c.CreateSession(context.Background(), "alice", SessionOptions{})
			if tc.goodbye {
				if err != nil || ns.ID != "AAAAAAAAAAAAAAAAAAAAAA" {
					t.Errorf("want the session of the re-send, got %+v %v", ns, err)
				}
			} else {
				var ke *Error
				if !errors.As(err, &ke) || ke.Code != CodeOverloaded || ke.RetryAfterMs != 250 {
					t.Errorf("want overloaded (retry_after_ms 250), got %v", err)
				}
			}
			if err := finish(); err != nil {
				t.Error(err)
			}
			if writes := (<-conns).results(); len(writes) != 1 || writes[0].n != 0 || writes[0].err == nil {
				t.Errorf("want one write on the first connection that failed with nothing sent, got %+v", writes)
			}
			want := 1
			if tc.goodbye {
				want = 2
			}
			if len(conns)+1 != want {
				t.Errorf("%d connections, want %d", len(conns)+1, want)
			}
		})
	}
}

// Goodbyes are not the one re-send of rule 2: a change turned away by three goodbyes in a row goes a
// fourth time; a safe call lost once (re-sent) and then turned away twice still succeeds; one lost,
// turned away, and lost again fails connection_lost (its one re-send was lost too), with no fifth
// connection.
func TestGoodbyesInARow(t *testing.T) {
	for _, tc := range []struct {
		name     string
		op       string
		scripts  []func(net.Conn) error
		wantCode string // "": a result
	}{
		{"change turned away thrice", "session.create", []func(net.Conn) error{
			saysGoodbye("session.create"), saysGoodbye("session.create"), saysGoodbye("session.create"),
			answers("session.create", newSessionResult)}, ""},
		{"read lost then turned away twice", "session.get", []func(net.Conn) error{
			closesSilently("session.get"), saysGoodbye("session.get"), saysGoodbye("session.get"),
			answers("session.get", `{"id":"AAAAAAAAAAAAAAAAAAAAAA","issuer":"local","sub":"alice","created_at":1,"expires_at":2,"last_seen_at":1,"data":{},"user":null}`)}, ""},
		{"read turned away, lost, turned away, lost", "session.get", []func(net.Conn) error{
			saysGoodbye("session.get"), closesSilently("session.get"), saysGoodbye("session.get"),
			closesSilently("session.get")}, CodeConnectionLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket, finish := serveInTurn(t, tc.scripts...)
			c, conns := dialWatched(t, socket, 0, WithTimeout(3*time.Second))
			args := map[string]any{"sub": "alice"}
			if tc.op == "session.get" {
				args = map[string]any{"session": "kh_" + strings.Repeat("A", 43)}
			}
			_, err := c.Call(context.Background(), tc.op, args)
			if tc.wantCode == "" && err != nil {
				t.Errorf("want a result, got %v", err)
			}
			if tc.wantCode != "" && ErrorCode(err) != tc.wantCode {
				t.Errorf("want %s, got %v", tc.wantCode, err)
			}
			// Counted before finish: a connection made at all, even one never accepted, is in conns.
			if len(conns) != len(tc.scripts) {
				t.Errorf("%d connections, want %d", len(conns), len(tc.scripts))
			}
			if err := finish(); err != nil {
				t.Error(err)
			}
		})
	}
}

// A change cut short in its write, because keyholed closed the connection: with a goodbye before the
// close, keyholed never read it, so it is sent whole on a new connection and succeeds; without one,
// its fate is unknown (rule 2): connection_lost.
func TestGoodbyeAfterAWriteCutShort(t *testing.T) {
	for _, goodbye := range []bool{true, false} {
		t.Run(fmt.Sprintf("goodbye=%v", goodbye), func(t *testing.T) {
			scripts := []func(net.Conn) error{func(nc net.Conn) error {
				var header [4]byte // the frame has begun: some of it went out
				if _, err := io.ReadFull(nc, header[:]); err != nil {
					return err
				}
				if goodbye {
					_, err := nc.Write(goodbyeFrame)
					return err
				}
				return nil
			}}
			if goodbye {
				scripts = append(scripts, answers("session.create", newSessionResult))
			}
			socket, finish := serveInTurn(t, scripts...)
			c, conns := dialWatched(t, socket, 0, WithTimeout(3*time.Second))
			_, err := c.Call(context.Background(), "session.create", map[string]any{"sub": "alice", "pad": bigEcho["pad"]})
			if goodbye && err != nil {
				t.Errorf("want the re-send's result, got %v", err)
			}
			if !goodbye && !errors.Is(err, ErrConnectionLost) {
				t.Errorf("want connection_lost, got %v", err)
			}
			if err := finish(); err != nil {
				t.Error(err)
			}
			if writes := (<-conns).results(); len(writes) != 1 || writes[0].n == 0 || writes[0].err == nil {
				t.Errorf("want one write cut short on the first connection, got %+v", writes)
			}
			if want := len(scripts) - 1; len(conns) != want {
				t.Errorf("%d more connections, want %d", len(conns), want)
			}
		})
	}
}
