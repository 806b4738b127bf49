package keyhole

import (
	"encoding/json"
	"testing"
)

// The response reader's JSON scanner agrees with encoding/json on what is a JSON object.
func TestTopLevelMembersAgreesWithEncodingJSON(t *testing.T) {
	inputs := []string{
		`{}`, ` { } `, `{"a":1}`, `{"a":-0.5e+3,"b":[1,2,{"c":null}],"d":"x\"y\\u00e9\n"}`,
		`{"a":true,"b":false,"c":null}`, `{"a":"\u0000"}`, `{"a":[]}`, `{"a":{}}`, `{"a":[[[]]]}`,
		`[]`, `null`, `"s"`, `1`, ``, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{"a":01}`, `{"a":1.}`,
		`{"a":.5}`, `{"a":1e}`, `{"a":-}`, `{"a":NaN}`, `{"a":tru}`, `{"a":"\x"}`, `{"a":"\u12"}`,
		"{\"a\":\"tab\there\"}", "{\"a\":\"nl\nhere\"}", `{"a":1}x`, `{"a":1}{}`, `{'a':1}`,
		`{"a":[1,]}`, `{"a":[,1]}`, `{"a" 1}`, `{"a":"x"`, `{"a":"x`, `{"a":[1 2]}`,
		`{"a":"\/"}`, `{"a":1E5,"b":-0}`, `{"a":-01}`, `{"\u0061":1}`,
		`{"ok":false,"\u006fk":true}`, `{"\u006fk":true,"ok":false}`, `{"a\"b":1,"\n":2,"\ud83d\ude00":3}`,
		`{"\ud800":1}`, `{"a\u0000":1}`,
		// Past the first 24 bytes, read byte by byte, a string is read by IndexByte.
		`{"a":"` + repeat("x", 30) + `"}`, `{"a":"` + repeat("x", 24) + `\n"}`, "{\"a\":\"" + repeat("x", 27) + "\t\"}",
		`{"a":"` + repeat("x", 23) + `\"", "b":1}`, `{"a":"` + repeat("x", 40) + `\u00e9` + repeat("y", 40) + `"}`,
		`{"a":"` + repeat("x", 40) + `\x"}`, `{"` + repeat("k", 30) + `":1}`,
	}
	for _, in := range inputs {
		var m map[string]json.RawMessage
		want := json.Valid([]byte(in)) && json.Unmarshal([]byte(in), &m) == nil && m != nil
		got, err := topLevelMembers([]byte(in))
		if (err == nil) != want {
			t.Errorf("%q: scanner says %v (%v), encoding/json says %v", in, err == nil, err, want)
			continue
		}
		if err != nil {
			continue
		}
		if len(got) != len(m) {
			t.Errorf("%q: scanner read %d members, encoding/json %d", in, len(got), len(m))
		}
		for k, v := range m {
			if string(got[k]) != string(v) {
				t.Errorf("%q: member %q = %q, want %q", in, k, got[k], v)
			}
		}
	}
	if _, err := topLevelMembers([]byte(`{"a":` + repeat("[", maxDepth+2) + repeat("]", maxDepth+2) + `}`)); err == nil {
		t.Error("nesting past the limit was accepted")
	}
}

func repeat(s string, n int) string {
	out := ""
	for i := 0; i < n; i++ {
		out += s
	}
	return out
}

func TestHasControl(t *testing.T) {
	for i := 0; i < 256; i++ {
		for pos := 0; pos < 17; pos++ {
			b := []byte("abcdefghijklmnopq")
			b[pos] = byte(i)
			if hasControl(b) != (i < 0x20) {
				t.Fatalf("byte %#x at %d: %v", i, pos, hasControl(b))
			}
		}
	}
}

// A member name written with escapes is the same member ("\u006fk" is "ok"): the last one wins, as
// in encoding/json, so an answer cannot read as a failure to this client and a success to others.
func TestEscapedMemberNames(t *testing.T) {
	_, _, o, err := parseResponse([]byte(`{"id":1,"ok":false,"\u006fk":true,"result":{"a":1}}`), 0, nil)
	if err != nil || o.err != nil || string(o.result) != `{"a":1}` {
		t.Errorf("escaped ok: %+v %v, want the result", o, err)
	}
	id, hasID, _, err := parseResponse([]byte(`{"\u0069d":7,"ok":true,"result":{}}`), 0, nil)
	if err != nil || !hasID || id != 7 {
		t.Errorf("escaped id: %d %v %v", id, hasID, err)
	}
	// An escaped name too long to be a response's member is skipped, not decoded.
	long := `{"ok":true,"result":{},"` + repeat(`\u0061`, 1000) + `":1}`
	if _, _, o, err := parseResponse([]byte(long), 0, nil); err != nil || string(o.result) != `{}` {
		t.Errorf("long escaped name: %+v %v", o, err)
	}
}

// topLevelMembers collects eachMember's members by name (escapes decoded, the last copy winning).
func topLevelMembers(b []byte) (map[string][]byte, error) {
	members := map[string][]byte{}
	err := eachMember(b, func(name []byte, escaped bool, raw []byte) error {
		n, known, err := memberName(name)
		if known {
			members[n] = raw
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return members, nil
}
