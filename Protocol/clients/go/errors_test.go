package keyhole

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestErrorCodesMatchProtocol checks the client's list of keyholed's codes (those it does not turn
// into internal) against the table of PROTOCOL.md section 6, both ways.
func TestErrorCodesMatchProtocol(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(protocolDir, "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "\n## 6. Error codes\n")
	end := strings.Index(doc, "\n## 7. ")
	if start < 0 || end < start {
		t.Fatal("PROTOCOL.md has no section 6 followed by section 7")
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(doc[start:end], "\n") {
		if strings.HasPrefix(line, "| `") {
			code := strings.TrimPrefix(line, "| `")
			documented[code[:strings.IndexByte(code, '`')]] = true
		}
	}
	if len(documented) < 20 {
		t.Fatalf("read only %d codes from section 6's table", len(documented))
	}
	for _, c := range sortedCodes(documented) {
		if !serverCodes[c] {
			t.Errorf("PROTOCOL.md section 6 has %q, the client does not know it", c)
		}
	}
	for _, c := range sortedCodes(serverCodes) {
		if !documented[c] {
			t.Errorf("the client knows %q, PROTOCOL.md section 6 does not list it", c)
		}
	}
}

func sortedCodes(m map[string]bool) []string {
	s := make([]string, 0, len(m))
	for c := range m {
		s = append(s, c)
	}
	sort.Strings(s)
	return s
}
