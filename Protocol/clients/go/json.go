package keyhole

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// A strict RFC 8259 reader for what the connection's reader needs: a response payload's top-level
// members, each as its raw bytes. encoding/json's validating scanner manages some tens of MB/s, too
// slow for a 16 MiB answer within a call's deadline; this one skips strings with bytes.IndexByte.
// (Results are decoded afterwards, by the caller: session.get's and user.get's by hand on this
// reader (decode.go), the others with encoding/json.)

const maxDepth = 512

type jsonScanner struct {
	b []byte
	i int
}

var errJSON = errors.New("not JSON")

// eachMember calls f with each member of the JSON object b, in order: its name as written, quotes
// included (escaped: it has escapes, see memberName), and its value's bytes. b must hold exactly one
// object, with only whitespace around it; an error f returns stops the walk and is returned.
func eachMember(b []byte, f func(name []byte, escaped bool, raw []byte) error) error {
	s := jsonScanner{b: b}
	return s.whole(func() error {
		return s.object(0, func(name []byte, escaped bool) error {
			raw, err := s.value(1)
			if err != nil {
				return err
			}
			return f(name, escaped, raw)
		})
	})
}

// whole runs read on the one object s.b holds, with only whitespace around it.
func (s *jsonScanner) whole(read func() error) error {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		if _, err := s.value(0); err != nil {
			return err
		}
		return errors.New("not a JSON object")
	}
	if err := read(); err != nil {
		return err
	}
	s.space()
	if s.i != len(s.b) {
		return s.fail("end of input")
	}
	return nil
}

// object walks the object at s's position, nested depth deep, calling f with each member's name as
// written (quotes included; escaped: it has escapes) and s at the member's value, which f must read
// (with value, or a reader of its own on s).
func (s *jsonScanner) object(depth int, f func(name []byte, escaped bool) error) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", errJSON, maxDepth)
	}
	if s.peek() != '{' {
		return s.fail("'{'")
	}
	s.i++
	s.space()
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		s.space()
		start := s.i
		escaped, err := s.name()
		if err != nil {
			return err
		}
		name := s.b[start:s.i]
		s.space()
		if s.peek() != ':' {
			return s.fail("':'")
		}
		s.i++
		s.space()
		if err := f(name, escaped); err != nil {
			return err
		}
		s.space()
		if c := s.peek(); c == ',' {
			s.i++
			continue
		} else if c == '}' {
			s.i++
			return nil
		}
		return s.fail("',' or '}'")
	}
}

// memberName returns a quoted member name's text. A name written with escapes ("\u006fk") is the
// same member as the plain one, as encoding/json reads it, so it is decoded; known is false only
// for an escaped name too long to be any member a response has (these are a few letters), which
// is skipped rather than decoded by encoding/json's slower reader.
func memberName(q []byte) (name string, known bool, err error) {
	inner := q[1 : len(q)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), true, nil
	}
	if len(inner) > maxEscapedName {
		return "", false, nil
	}
	if err := json.Unmarshal(q, &name); err != nil {
		return "", false, fmt.Errorf("%w: member name: %v", errJSON, err)
	}
	return name, true, nil
}

// maxEscapedName bounds the escaped member names decoded: escapes take at most 6 bytes for each
// character, and the longest member of a response ("retry_after_ms", in error) has 14.
const maxEscapedName = 6 * 16

func (s *jsonScanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *jsonScanner) fail(want string) error {
	return fmt.Errorf("%w: expected %s at byte %d", errJSON, want, s.i)
}

func (s *jsonScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value skips one value and returns its bytes.
func (s *jsonScanner) value(depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", errJSON, maxDepth)
	}
	start := s.i
	switch c := s.peek(); {
	case c == '"':
		if err := s.str(); err != nil {
			return nil, err
		}
	case c == '{' || c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		s.i++
		s.space()
		if s.peek() == closer {
			s.i++
			break
		}
		for {
			s.space()
			if c == '{' {
				if err := s.str(); err != nil {
					return nil, err
				}
				s.space()
				if s.peek() != ':' {
					return nil, s.fail("':'")
				}
				s.i++
				s.space()
			}
			if _, err := s.value(depth + 1); err != nil {
				return nil, err
			}
			s.space()
			if n := s.peek(); n == ',' {
				s.i++
				continue
			} else if n == closer {
				s.i++
				break
			}
			return nil, s.fail("',' or the end of a container")
		}
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		if err := s.number(); err != nil {
			return nil, err
		}
	default:
		return nil, s.fail("a value")
	}
	return s.b[start:s.i], nil
}

func (s *jsonScanner) literal(word string) ([]byte, error) {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return nil, s.fail(word)
	}
	s.i += len(word)
	return s.b[s.i-len(word) : s.i], nil
}

func (s *jsonScanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *jsonScanner) number() error {
	if s.peek() == '-' {
		s.i++
	}
	if s.peek() == '0' {
		s.i++
	} else if s.digits() == 0 {
		return s.fail("a digit")
	}
	if s.peek() == '.' {
		s.i++
		if s.digits() == 0 {
			return s.fail("a digit")
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if s.digits() == 0 {
			return s.fail("a digit")
		}
	}
	return nil
}

// str skips a string (the payload is known to be UTF-8 already).
func (s *jsonScanner) str() error {
	_, err := s.name()
	return err
}

// name skips a string, and reports whether it has escapes.
func (s *jsonScanner) name() (escaped bool, err error) {
	if s.peek() != '"' {
		return false, s.fail("a string")
	}
	s.i++
	// Most strings of a response are short: byte by byte first, then by IndexByte.
	short := s.b[s.i:]
	if len(short) > 24 {
		short = short[:24]
	}
	for j, c := range short {
		if c == '"' {
			s.i += j + 1
			return false, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
	}
	q := bytes.IndexByte(s.b[s.i:], '"')
	if q < 0 {
		return false, s.fail("the end of a string")
	}
	if seg := s.b[s.i : s.i+q]; bytes.IndexByte(seg, '\\') < 0 {
		if hasControl(seg) {
			return false, s.fail("no control character in a string")
		}
		s.i += q + 1
		return false, nil
	}
	// Escapes: walk the string byte by byte.
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true, nil
		case c < 0x20:
			return false, s.fail("no control character in a string")
		case c == '\\':
			s.i++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+5 > len(s.b) || !isHex4(s.b[s.i+1:s.i+5]) {
					return false, s.fail("four hex digits")
				}
				s.i += 5
			default:
				return false, s.fail("an escape")
			}
		default:
			s.i++
		}
	}
	return false, s.fail("the end of a string")
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// hasControl reports whether b has a byte below 0x20 (checked 8 bytes at a time).
func hasControl(b []byte) bool {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		// A byte below 0x20 in x: its (x - 0x20) borrows into the high bit while x's high bit is clear.
		x := uint64(b[i]) | uint64(b[i+1])<<8 | uint64(b[i+2])<<16 | uint64(b[i+3])<<24 |
			uint64(b[i+4])<<32 | uint64(b[i+5])<<40 | uint64(b[i+6])<<48 | uint64(b[i+7])<<56
		if (x-0x2020202020202020)&^x&0x8080808080808080 != 0 {
			return true
		}
	}
	for ; i < len(b); i++ {
		if b[i] < 0x20 {
			return true
		}
	}
	return false
}
