package keyhole

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// protocolDir is Protocol/, from this package's directory (Protocol/clients/go).
var protocolDir = filepath.Join("..", "..")

type scenarioCall struct {
	Op     string         `json:"op"`
	Args   map[string]any `json:"args"`
	Expect struct {
		OK           json.RawMessage `json:"ok"`
		PaddingBytes *int            `json:"ok_padding_bytes_at_least"`
		Error        *struct {
			Code         string  `json:"code"`
			Message      *string `json:"message"`
			RetryAfterMs *int64  `json:"retry_after_ms"`
		} `json:"error"`
	} `json:"expect"`
}

type scenario struct {
	Name       string         `json:"name"`
	Pipelined  bool           `json:"pipelined"`
	DeadlineMs int            `json:"deadline_ms"`
	Calls      []scenarioCall `json:"calls"`
}

func loadScenarios(t *testing.T) []scenario {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(protocolDir, "vectors", "client_scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		DeadlineMs int        `json:"deadline_ms"`
		Scenarios  []scenario `json:"scenarios"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for i := range doc.Scenarios {
		if doc.Scenarios[i].DeadlineMs == 0 {
			doc.Scenarios[i].DeadlineMs = doc.DeadlineMs
		}
	}
	return doc.Scenarios
}

// TestScenarios plays every scenario of Protocol/vectors/client_scenarios.json through
// Protocol/testing/scenario_server.py, as Protocol/testing/README.md says.
func TestScenarios(t *testing.T) {
	scenarios := loadScenarios(t)
	if len(scenarios) == 0 {
		t.Fatal("no scenarios")
	}
	// One at a time: the scenarios' deadlines are tight (some expect a timeout at 300 ms, others an
	// answer within it), and side by side, with python3 servers starting, on a small shared machine
	// under -race they would measure the machine rather than the client.
	for _, sc := range scenarios {
		sc := sc
		t.Run(sc.Name, func(t *testing.T) { runScenario(t, sc) })
	}
}

// scenarioServer starts scenario_server.py for a scenario and waits for its ready line; wait
// returns its exit error and stderr.
func scenarioServer(t *testing.T, name string) (socket string, wait func() (error, string)) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "khgo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket = filepath.Join(dir, "s.sock")
	cmd := exec.Command("python3", filepath.Join(protocolDir, "testing", "scenario_server.py"), socket, name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("scenario server did not get ready: %q %v %s", line, err, stderr.String())
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return socket, func() (error, string) {
		select {
		case err := <-exited:
			return err, stderr.String()
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			return errors.New("scenario server did not exit within 10 s"), stderr.String()
		}
	}
}

func runScenario(t *testing.T, sc scenario) {
	socket, wait := scenarioServer(t, sc.Name)
	client, err := Dial(context.Background(), socket, WithTimeout(time.Duration(sc.DeadlineMs)*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	written := make(chan struct{}, 16)
	if sc.Pipelined {
		// Read below, one per call; never blocks the writer (a signal beyond the buffer is dropped).
		client.written = func() {
			select {
			case written <- struct{}{}:
			default:
			}
		}
	}
	results := make([]map[string]any, len(sc.Calls))
	errs := make([]error, len(sc.Calls))
	if sc.Pipelined {
		var wg sync.WaitGroup
		for i, call := range sc.Calls {
			wg.Add(1)
			go func(i int, call scenarioCall) {
				defer wg.Done()
				results[i], errs[i] = client.Call(context.Background(), call.Op, call.Args)
			}(i, call)
			// The script matches answers to requests in the calls' order: each is written before
			// the next call starts, and all are in flight together.
			select {
			case <-written:
			case <-time.After(5 * time.Second):
				t.Fatalf("call %d was not written", i)
			}
		}
		wg.Wait()
	} else {
		for i, call := range sc.Calls {
			results[i], errs[i] = client.Call(context.Background(), call.Op, call.Args)
		}
	}
	for i, call := range sc.Calls {
		if msg := checkExpect(call, results[i], errs[i]); msg != "" {
			t.Errorf("call %d (%s): %s", i, call.Op, msg)
		}
	}
	client.Close()
	if err, stderr := wait(); err != nil {
		t.Errorf("scenario server: %v: %s", err, stderr)
	}
}

func checkExpect(call scenarioCall, result map[string]any, err error) string {
	exp := call.Expect
	switch {
	case exp.Error != nil:
		var ke *Error
		if !errors.As(err, &ke) {
			return fmt.Sprintf("want error %s, got result %v, error %v", exp.Error.Code, result, err)
		}
		if ke.Code != exp.Error.Code {
			return fmt.Sprintf("want code %s, got %v", exp.Error.Code, ke)
		}
		if !errors.Is(err, &Error{Code: exp.Error.Code}) {
			return "errors.Is does not match the code"
		}
		if exp.Error.Message != nil && ke.Message != *exp.Error.Message {
			return fmt.Sprintf("want message %q, got %q", *exp.Error.Message, ke.Message)
		}
		if exp.Error.RetryAfterMs != nil && ke.RetryAfterMs != *exp.Error.RetryAfterMs {
			return fmt.Sprintf("want retry_after_ms %d, got %d", *exp.Error.RetryAfterMs, ke.RetryAfterMs)
		}
	case exp.PaddingBytes != nil:
		if err != nil {
			return fmt.Sprintf("want a result, got %v", err)
		}
		p, ok := result["padding"].(string)
		if !ok || len(p) < *exp.PaddingBytes {
			return fmt.Sprintf("want padding of at least %d bytes, got %d", *exp.PaddingBytes, len(p))
		}
	default:
		if err != nil {
			return fmt.Sprintf("want a result, got %v", err)
		}
		want, derr := decodeMap(exp.OK)
		if derr != nil {
			return derr.Error()
		}
		if !reflect.DeepEqual(result, want) {
			return fmt.Sprintf("want %v, got %v", want, result)
		}
	}
	return ""
}
