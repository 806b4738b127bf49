package keyhole

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
)

// scriptedKeyholed stands in for keyholed on a Unix socket where a test needs an answer a real
// keyholed does not give on demand: it reads request frames and answers each with reply(op) (the
// response's members after its id, e.g. `"ok":true,"result":{}`), and records the operations and
// their args.
type scriptedKeyholed struct {
	Socket string
	ln     net.Listener
	reply  func(op string) string

	mu   sync.Mutex
	ops  []string
	args []json.RawMessage
}

func newScriptedKeyholed(t *testing.T, reply func(op string) string) *scriptedKeyholed {
	t.Helper()
	s := &scriptedKeyholed{Socket: filepath.Join(t.TempDir(), "k.sock"), reply: reply}
	ln, err := net.Listen("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	var wg sync.WaitGroup
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			conns = append(conns, nc)
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.serve(nc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *scriptedKeyholed) serve(nc net.Conn) {
	for {
		body, err := readFrame(nc)
		if err != nil {
			return
		}
		var req struct {
			ID   json.RawMessage `json:"id"`
			Op   string          `json:"op"`
			Args json.RawMessage `json:"args"`
		}
		if json.Unmarshal(body, &req) != nil {
			return
		}
		s.mu.Lock()
		s.ops = append(s.ops, req.Op)
		s.args = append(s.args, req.Args)
		s.mu.Unlock()
		if _, err := nc.Write(frameOf([]byte(`{"id":` + string(req.ID) + `,` + s.reply(req.Op) + `}`))); err != nil {
			return
		}
	}
}

// Ops returns the operations asked so far.
func (s *scriptedKeyholed) Ops() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ops...)
}

// Args returns the args of the operations asked so far, as sent.
func (s *scriptedKeyholed) Args() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]json.RawMessage(nil), s.args...)
}

func readFrame(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(h[:]))
	_, err := io.ReadFull(r, body)
	return body, err
}

func frameOf(payload []byte) []byte {
	b := make([]byte, 4, 4+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(payload)))
	return append(b, payload...)
}
