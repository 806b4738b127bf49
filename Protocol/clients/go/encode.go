package keyhole

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"unicode/utf8"
)

// A request's frame is written by hand into one buffer: encoding/json's Marshal of a map goes
// through reflection, sorts the keys through an interface and copies its result, several µs a
// call for args of one token. The hand-written encoder takes what the typed helpers pass (maps of
// strings, integers, booleans, nil and such maps); any other value is left to encoding/json. Its
// output is the same JSON value as encoding/json's (keys sorted the same way, invalid UTF-8 made
// U+FFFD the same way); the bytes differ only in escapes encoding/json adds for HTML (<, >, &,
// U+2028, U+2029), which keyholed does not need.

// maxHandDepth bounds the nesting the hand-written encoder follows: a map that holds itself is
// then left to encoding/json, which reports the cycle.
const maxHandDepth = 32

// encodeRequest returns the frame of request id: op with args (nil: {}), its length first. Args
// are encoded by hand when they can be, else with encoding/json; an error (and nothing to send) for
// args that cannot be encoded, or a request too large for a frame.
func encodeRequest(id uint64, op string, args any) ([]byte, error) {
	size := 48 + len(op) + 96
	if a, ok := args.(oneArg); ok {
		size = 48 + len(op) + len(a.name) + len(a.value) + 8
	}
	b := make([]byte, 4, size)
	b = append(b, `{"v":1,"id":`...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, `,"op":`...)
	opStart := len(b)
	b = appendJSONString(b, op)
	opLen := len(b) - opStart
	b = append(b, `,"args":`...)
	argsStart := len(b)
	if args == nil {
		b = append(b, "{}"...)
	} else if hand, ok := appendJSONValue(b, args, 0); ok {
		b = hand
	} else {
		j, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("keyhole: %s: args: %w", op, err)
		}
		b = append(b[:argsStart], j...)
	}
	argsLen := len(b) - argsStart
	// Room left for the envelope whatever the id, so that a re-send with a longer id fits too.
	if argsLen+opLen+64 > MaxFrameBytes {
		return nil, fmt.Errorf("keyhole: %s: a request of %d bytes is larger than a frame may be", op, argsLen)
	}
	b = append(b, '}')
	n := len(b) - 4
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return b, nil
}

// oneArg is args of one string member ({"session": token}): a helper's call without a map.
type oneArg struct{ name, value string }

// appendJSONValue appends v as JSON; ok is false for a value it leaves to encoding/json.
func appendJSONValue(b []byte, v any, depth int) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendJSONString(b, x), true
	case bool:
		if x {
			return append(b, "true"...), true
		}
		return append(b, "false"...), true
	case int:
		return strconv.AppendInt(b, int64(x), 10), true
	case int64:
		return strconv.AppendInt(b, x, 10), true
	case struct{}:
		return append(b, "{}"...), true
	case oneArg:
		b = append(b, '{')
		b = appendJSONString(b, x.name)
		b = append(b, ':')
		b = appendJSONString(b, x.value)
		return append(b, '}'), true
	case map[string]any:
		if depth >= maxHandDepth {
			return b, false
		}
		return appendJSONObject(b, x, depth)
	}
	return b, false
}

// appendJSONObject appends m with its keys sorted, as encoding/json writes a map.
func appendJSONObject(b []byte, m map[string]any, depth int) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), true
	}
	var keys []string
	var small [8]string
	if len(m) <= len(small) {
		keys = small[:0]
		for k := range m {
			keys = append(keys, k)
		}
		for i := 1; i < len(keys); i++ { // insertion sort: small stays on the stack
			for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
				keys[j], keys[j-1] = keys[j-1], keys[j]
			}
		}
	} else {
		keys = sortedKeys(m)
	}
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		var ok bool
		if b, ok = appendJSONValue(b, m[k], depth+1); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// plainASCII: the ASCII bytes a JSON string holds as they are.
var plainASCII = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: '"' and '\' escaped, control characters as \n, \r,
// \t or \u00XX, each byte of invalid UTF-8 (a lone surrogate's encoding included) as \ufffd, as
// encoding/json does; every other character as it is.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plainASCII[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
