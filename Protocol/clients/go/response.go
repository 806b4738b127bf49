package keyhole

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// parseResponse checks one payload against PROTOCOL.md section 4. hasID is false for a null or
// absent id; an id that is a string or an integer no request of ours can have gets hasID true and
// an id of 0 (never used), so it is dropped. A member repeated is read from its last copy, and an
// escaped name ("\u006fk") is the same member as the plain one, as encoding/json reads them.
//
// The outcome holds no reference to body (the connection's read buffer): its result is a copy.
// When the answer is own's (the reading call's id, before its result in the payload), its result
// is read into into (a *Session or *User; nil: none) in the same pass that checks it, and
// o.decoded says so; o.result is then nil. into is written only then, or when the payload turns
// out to be another id's or a failure: the reader is into's caller, who empties it before reading
// a result of its own.
func parseResponse(body []byte, own uint64, into any) (id uint64, hasID bool, o outcome, err error) {
	if !utf8.Valid(body) {
		return 0, false, o, errors.New("not UTF-8")
	}
	var idRaw, okRaw, resultRaw, errorRaw []byte
	decoded := false
	s := jsonScanner{b: body}
	err = s.whole(func() error {
		return s.object(0, func(name []byte, escaped bool) error {
			if escaped {
				n, known, err := memberName(name)
				if err != nil {
					return err
				}
				if !known {
					n = ""
				}
				name = []byte(n)
			} else {
				name = name[1 : len(name)-1]
			}
			start := s.i
			if string(name) == "result" {
				decoded = false
				if into != nil && idRaw != nil && s.peek() == '{' {
					if n, ok := parseInt(idRaw); ok && n > 0 && uint64(n) == own {
						r := resultReader{s: &s, t: text{raw: body}}
						if decoded = r.into(1, into) == nil; !decoded {
							s.i = start // read it again, to check it
						}
					}
				}
				if !decoded {
					if _, err := s.value(1); err != nil {
						return err
					}
				}
				resultRaw = body[start:s.i]
				return nil
			}
			raw, err := s.value(1)
			if err != nil {
				return err
			}
			switch string(name) {
			case "id":
				idRaw = raw
			case "ok":
				okRaw = raw
			case "error":
				errorRaw = raw
			}
			return nil
		})
	})
	if err != nil {
		return 0, false, o, err
	}
	if idRaw != nil && string(idRaw) != "null" {
		hasID = true
		switch {
		case idRaw[0] == '"':
			if _, ok := jsonString(idRaw); !ok {
				return 0, false, o, errors.New("bad id")
			}
		case idRaw[0] == '-' || idRaw[0] >= '0' && idRaw[0] <= '9':
			if bytes.ContainsAny(idRaw, ".eE") {
				return 0, false, o, fmt.Errorf("id %s is not an integer", idRaw)
			}
			if n, ok := parseInt(idRaw); ok && n > 0 {
				id = uint64(n)
			} else { // negative or too large: not ours (ids never reach 2^63)
				id = 0
			}
		default:
			return 0, false, o, fmt.Errorf("id %s is neither a string, an integer nor null", idRaw)
		}
	}
	switch string(okRaw) {
	case "true":
		if len(resultRaw) == 0 || resultRaw[0] != '{' {
			return 0, false, o, errors.New("ok is true but result is not an object")
		}
		if decoded && hasID && id == own {
			o.decoded = true
		} else {
			o.result = append(json.RawMessage(nil), resultRaw...)
		}
	case "false":
		e, perr := parseError(errorRaw)
		if perr != nil {
			return 0, false, o, perr
		}
		o.err = e
	default:
		return 0, false, o, errors.New("ok is neither true nor false")
	}
	return id, hasID, o, nil
}

// parseError reads a response's error object. Its members are read as encoding/json reads them
// into a map (the last copy of a name wins; escaped names are decoded).
func parseError(raw []byte) (*Error, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("ok is false but error is not an object")
	}
	var code, msg, retry, apple []byte
	err := eachMember(raw, func(name []byte, escaped bool, v []byte) error {
		n, ok := jsonString(name)
		if !ok {
			return errors.New("bad member name")
		}
		switch n {
		case "code":
			code = v
		case "message":
			msg = v
		case "retry_after_ms":
			retry = v
		case "apple_error":
			apple = v
		}
		return nil
	})
	if err != nil {
		return nil, errors.New("ok is false but error is not an object")
	}
	e := &Error{}
	var ok bool
	if len(code) == 0 || code[0] != '"' {
		return nil, errors.New("error.code is not a string")
	}
	if e.Code, ok = jsonString(code); !ok {
		return nil, errors.New("error.code is not a string")
	}
	if msg != nil && string(msg) != "null" {
		if e.Message, ok = jsonString(msg); !ok {
			return nil, errors.New("error.message is not a string")
		}
	}
	if retry != nil && string(retry) != "null" {
		var f float64
		if json.Unmarshal(retry, &f) != nil || f < 0 {
			return nil, errors.New("error.retry_after_ms is not a non-negative number")
		}
		e.RetryAfterMs = int64(f)
	}
	if len(apple) > 0 && apple[0] == '"' {
		e.AppleError, _ = jsonString(apple)
	}
	if !serverCodes[e.Code] {
		e.Message = fmt.Sprintf("%s (unknown code %q)", e.Message, e.Code)
		e.Code = CodeInternal
	}
	return e, nil
}

// jsonString decodes a JSON string value as encoding/json does (ok false: raw is not a string).
// One without escapes, in valid UTF-8, is its bytes.
func jsonString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && bytes.IndexByte(inner, '"') < 0 && utf8.Valid(inner) && !hasControl(inner) {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}
