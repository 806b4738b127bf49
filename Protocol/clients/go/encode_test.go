package keyhole

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// sameJSON checks that the hand-written encoder's output for v is valid UTF-8 JSON with the value
// encoding/json's output has (and that it took v itself, when handled says it should).
func sameJSON(t *testing.T, v any, handled bool) {
	t.Helper()
	want, werr := json.Marshal(v)
	got, ok := appendJSONValue(nil, v, 0)
	if ok != handled {
		t.Fatalf("%#v: handled by hand %v, want %v", v, ok, handled)
	}
	if !ok {
		return
	}
	if werr != nil {
		t.Fatalf("%#v: encoding/json fails (%v) but the hand-written encoder took it: %q", v, werr, got)
	}
	if !utf8.Valid(got) || !json.Valid(got) {
		t.Fatalf("%#v: not valid UTF-8 JSON: %q", v, got)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%#v: hand-written %q reads as %#v; encoding/json's %q as %#v", v, got, g, want, w)
	}
}

func TestEncoderStringsAgreeWithEncodingJSON(t *testing.T) {
	strs := []string{
		"", "kh_abc", `"`, `\`, `\"`, "/", "a\"b\\c", "\x00", "\x01\x02\x1f", "\x7f", "\b\f\n\r\t",
		"<script>&amp;</script>", "é", "日本語", "😀", "\u2028\u2029", "\ufeff", "\ufffd",
		"\xff", "\xc3", "a\xc3(b", "\xed\xa0\x80", "\xed\xbf\xbf", "\xed\xa0\x80\xed\xb0\x80", // lone and paired surrogates' encodings
		"\xf4\x90\x80\x80", "\xc0\x80", "\xe0\x80\xaf", "trailing\xe2\x82", strings.Repeat("x", 1000),
		"mixed é\x00\"\\\xffend",
	}
	for _, s := range strs {
		sameJSON(t, s, true)
		sameJSON(t, map[string]any{s: s}, true) // member names are escaped the same way
	}
	// Every single byte, and random byte strings weighted towards the characters that need care.
	for i := 0; i < 256; i++ {
		sameJSON(t, string([]byte{byte(i)}), true)
		sameJSON(t, "a"+string([]byte{byte(i)})+"b", true)
	}
	alphabet := []byte("a\"\\/\x00\x1f\n\t\x7f<>&\xc3\xa9\xe2\x80\xa8\xed\xa0\x80\xf0\x9f\x98\x80\xff\x80")
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 5000; i++ {
		b := make([]byte, r.Intn(24))
		for j := range b {
			if r.Intn(4) == 0 {
				b[j] = byte(r.Intn(256))
			} else {
				b[j] = alphabet[r.Intn(len(alphabet))]
			}
		}
		sameJSON(t, string(b), true)
	}
}

func TestEncoderValuesAgreeWithEncodingJSON(t *testing.T) {
	sameJSON(t, nil, true)
	sameJSON(t, struct{}{}, true)
	sameJSON(t, map[string]any{}, true)
	sameJSON(t, map[string]any(nil), true)
	sameJSON(t, map[string]any{"b": 1, "a": true, "c": false, "d": nil, "e": int64(-9223372036854775808), "f": 9223372036854775807}, true)
	many := map[string]any{}
	for i := 0; i < 40; i++ { // past the small sort's array
		many[string(rune('z'-i%26))+strings.Repeat("k", i)] = i
	}
	sameJSON(t, many, true)
	sameJSON(t, map[string]any{"session": map[string]any{"ttl_s": int64(60), "data": map[string]any{"x": "y", "Z": "é"}}}, true)
	// Key order is byte order, as encoding/json sorts them: "B" < "a" < "é".
	got, _ := appendJSONValue(nil, map[string]any{"é": 1, "a": 2, "B": 3, "aa": 4}, 0)
	if string(got) != `{"B":3,"a":2,"aa":4,"é":1}` {
		t.Errorf("key order: %s", got)
	}
	// Values the hand-written encoder leaves to encoding/json, nested or not.
	for _, v := range []any{1.5, float32(2), []any{1}, []string{"a"}, json.Number("1"), uint(3), int32(4),
		map[string]string{"a": "b"}, struct{ A int }{1}, &struct{}{}} {
		sameJSON(t, v, false)
		sameJSON(t, map[string]any{"k": v}, false)
	}
	// A map that holds itself: left to encoding/json, which reports the cycle.
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	if _, ok := appendJSONValue(nil, cyclic, 0); ok {
		t.Fatal("a cyclic map was encoded by hand")
	}
	if _, err := encodeRequest(1, "debug.echo", cyclic); err == nil {
		t.Fatal("a cyclic map was encoded")
	}
	// Nesting up to the limit is done by hand.
	deep := map[string]any{"leaf": "x"}
	for i := 0; i < maxHandDepth-1; i++ {
		deep = map[string]any{"d": deep}
	}
	sameJSON(t, deep, true)
}

// A request whose args cannot be encoded is a plain error, and nothing is sent.
func TestArgsThatAreNotJSON(t *testing.T) {
	c, err := Dial(context.Background(), "/nonexistent/keyhole.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Call(context.Background(), "debug.echo", map[string]any{"f": func() {}})
	if err == nil || ErrorCode(err) != "" || !strings.Contains(err.Error(), "args") {
		t.Fatalf("unencodable args: %v", err)
	}
	_, err = c.Call(context.Background(), "debug.echo", map[string]any{"big": strings.Repeat("x", MaxFrameBytes)})
	if err == nil || ErrorCode(err) != "" || !strings.Contains(err.Error(), "larger than a frame") {
		t.Fatalf("oversize args: %v", err)
	}
}

// A request's frame: its length, then the envelope with the args as encoding/json has them.
func TestEncodeRequest(t *testing.T) {
	for _, c := range []struct {
		op   string
		args any
		want string
	}{
		{"ping", nil, `{}`},
		{"session.get", oneArg{"session", "kh_\"x\u00e9\xff"}, `{"session":"kh_\"x\u00e9\ufffd"}`},
		{"debug.echo", map[string]any{"n": 1, "f": 1.5, "l": []any{"a", nil}}, `{"f":1.5,"l":["a",null],"n":1}`},
		{"op\n\"", map[string]any{}, `{}`},
	} {
		frame, err := encodeRequest(18446744073709551615, c.op, c.args)
		if err != nil {
			t.Fatal(err)
		}
		if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-4 {
			t.Fatalf("%s: length %d for a payload of %d bytes", c.op, n, len(frame)-4)
		}
		var got struct {
			V    int
			ID   uint64
			Op   string
			Args json.RawMessage
		}
		if err := json.Unmarshal(frame[4:], &got); err != nil || !utf8.Valid(frame[4:]) {
			t.Fatalf("%s: %q: %v", c.op, frame[4:], err)
		}
		var args, want any
		json.Unmarshal(got.Args, &args)
		json.Unmarshal([]byte(c.want), &want)
		if got.V != 1 || got.ID != 18446744073709551615 || got.Op != c.op || !reflect.DeepEqual(args, want) {
			t.Errorf("%s: %s", c.op, frame[4:])
		}
	}
}
