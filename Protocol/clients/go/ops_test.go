package keyhole

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestOperationsMatchOpsJSON checks the embedded table against Protocol/ops.json: every operation,
// in order, with the same group, safe-to-repeat flag and debug flag.
func TestOperationsMatchOpsJSON(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(protocolDir, "ops.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Operations []struct {
			Op           string  `json:"op"`
			Group        *string `json:"group"`
			SafeToRepeat bool    `json:"safe_to_repeat"`
			Debug        bool    `json:"debug"`
		} `json:"operations"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var want []Operation
	for _, o := range doc.Operations {
		g := ""
		if o.Group != nil {
			g = *o.Group
		}
		want = append(want, Operation{o.Op, g, o.SafeToRepeat, o.Debug})
	}
	if len(want) == 0 {
		t.Fatal("ops.json lists no operations")
	}
	if got := Operations(); !reflect.DeepEqual(got, want) {
		t.Errorf("embedded table differs from ops.json:\n got %v\nwant %v", got, want)
	}
	for _, o := range want {
		if SafeToRepeat(o.Op) != o.SafeToRepeat {
			t.Errorf("SafeToRepeat(%q) = %v, ops.json says %v", o.Op, !o.SafeToRepeat, o.SafeToRepeat)
		}
	}
	if SafeToRepeat("session.frobnicate") {
		t.Error("an unknown operation must not be safe to repeat")
	}
}
