package keyhole

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// harness is Protocol/testing/keyholed_harness.py: a real keyholed ($KEYHOLED) that restarts on command.
type harness struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan map[string]any
	stderr *bytes.Buffer

	Socket, Token, Issuer, Sub, Audience string
}

func startHarness(extraConfig string) (*harness, error) {
	args := []string{filepath.Join(protocolDir, "testing", "keyholed_harness.py")}
	if extraConfig != "" {
		args = append(args, "--config-extra", extraConfig)
	}
	h := &harness{cmd: exec.Command("python3", args...), lines: make(chan map[string]any, 16), stderr: &bytes.Buffer{}}
	h.cmd.Stderr = h.stderr
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := h.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				h.lines <- m
			}
		}
		close(h.lines)
	}()
	first, ok := h.next(90 * time.Second)
	if !ok {
		h.cmd.Process.Kill()
		h.cmd.Wait()
		return nil, fmt.Errorf("keyholed_harness did not start (is $KEYHOLED a built keyholed?): %s", h.stderr.String())
	}
	for name, dst := range map[string]*string{"socket": &h.Socket, "token": &h.Token, "issuer": &h.Issuer, "sub": &h.Sub, "audience": &h.Audience} {
		*dst, _ = first[name].(string)
	}
	return h, nil
}

func (h *harness) next(timeout time.Duration) (map[string]any, bool) {
	select {
	case m, ok := <-h.lines:
		return m, ok
	case <-time.After(timeout):
		return nil, false
	}
}

// command sends one command and returns its answer line.
func (h *harness) command(t *testing.T, line string) map[string]any {
	t.Helper()
	if _, err := io.WriteString(h.stdin, line+"\n"); err != nil {
		t.Fatalf("harness %q: %v", line, err)
	}
	m, ok := h.next(90 * time.Second)
	if !ok || m["ok"] != true {
		t.Fatalf("harness %q answered %v: %s", line, m, h.stderr.String())
	}
	return m
}

func (h *harness) stop() error {
	io.WriteString(h.stdin, "stop\n")
	h.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("keyholed_harness: %v: %s", err, h.stderr.String())
		}
		return nil
	case <-time.After(90 * time.Second):
		h.cmd.Process.Kill()
		return fmt.Errorf("keyholed_harness did not stop")
	}
}

var (
	sharedOnce    sync.Once
	sharedHarness *harness
	sharedErr     error
)

// keyholed returns the harness the integration tests share (started on first use, stopped by TestMain).
func keyholed(t *testing.T) *harness {
	t.Helper()
	sharedOnce.Do(func() { sharedHarness, sharedErr = startHarness("") })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedHarness
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedHarness != nil {
		if err := sharedHarness.stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}
