package keyhole

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// session.get is the call an app makes on every request, and encoding/json's Unmarshal of its
// result (a reflective walk after a validating scan) cost more than the rest of the client's work
// on the call. Session and User are therefore read by hand, on the scanner the connection already
// checked the payload with; whatever the hand-written reader does not take exactly as encoding/json
// would (a member name with escapes or differing only in case, a member repeated, a value of a type
// the field does not hold, a number that is not an int64, ...) sends the whole result through
// encoding/json instead, so the outcome (values and errors) is always encoding/json's.

// errSlow stops a hand-written read: encoding/json reads the result instead.
var errSlow = errors.New("left to encoding/json")

// decodeSession reads a session.get result into out, as json.Unmarshal(raw, out) would.
func decodeSession(raw []byte, out *Session) error {
	*out = Session{}
	if readSession(raw, out) {
		return nil
	}
	*out = Session{}
	return json.Unmarshal(raw, out)
}

// decodeUser reads a user.get result into out, as json.Unmarshal(raw, out) would.
func decodeUser(raw []byte, out *User) error {
	*out = User{}
	if readUser(raw, out) {
		return nil
	}
	*out = User{}
	return json.Unmarshal(raw, out)
}

// readSession is the hand-written reader alone: false when it leaves raw to encoding/json.
func readSession(raw []byte, out *Session) bool {
	if !utf8.Valid(raw) { // encoding/json makes each bad byte U+FFFD
		return false
	}
	r := resultReader{s: &jsonScanner{b: raw}, t: text{raw: raw}}
	return r.s.whole(func() error { return r.session(0, out) }) == nil
}

func readUser(raw []byte, out *User) bool {
	if !utf8.Valid(raw) {
		return false
	}
	r := resultReader{s: &jsonScanner{b: raw}, t: text{raw: raw}}
	return r.s.whole(func() error { return r.user(0, out) }) == nil
}

// resultReader reads a result from a scanner, as the connection's reader does for the answer of
// its own call while it checks the response (one pass over the bytes), or from the result alone.
// On any error (errSlow, or the JSON's) the scanner is left mid-value: the caller starts over.
type resultReader struct {
	s *jsonScanner
	t text // over the bytes s reads, valid UTF-8
}

// into reads the object at the scanner's position into out (a *Session or *User, made empty
// first), nested depth deep; errSlow for another type.
func (r *resultReader) into(depth int, out any) error {
	switch out := out.(type) {
	case *Session:
		*out = Session{}
		return r.session(depth, out)
	case *User:
		*out = User{}
		return r.user(depth, out)
	}
	return errSlow
}

func (r *resultReader) session(depth int, out *Session) error {
	var f fields
	return r.s.object(depth, func(name []byte, escaped bool) error { return r.sessionMember(depth+1, out, &f, name, escaped) })
}

func (r *resultReader) user(depth int, out *User) error {
	var f fields
	return r.s.object(depth, func(name []byte, escaped bool) error { return r.userMember(depth+1, out, &f, name, escaped) })
}

func (r *resultReader) name(depth int, out *Name) error {
	var f fields
	return r.s.object(depth, func(name []byte, escaped bool) error { return r.nameMember(depth+1, out, &f, name, escaped) })
}

// nested reads a member that is an object or null: null leaves the pointer nil (as encoding/json
// sets it); an object is read by read.
func (r *resultReader) nested(depth int, read func() error) error {
	if r.s.peek() == '{' {
		return read()
	}
	v, err := r.s.value(depth)
	if err != nil {
		return err
	}
	if string(v) != "null" {
		return errSlow
	}
	return nil
}

// text makes the strings of one result, in valid UTF-8: those without escapes are parts of one
// copy of the result, one allocation instead of one per string.
type text struct {
	raw []byte
	all string // raw as a string, once a string needs it
}

// string reads a JSON string value v, a part of t.raw, as encoding/json does.
func (t *text) string(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') >= 0 {
		return jsonString(v)
	}
	i := cap(t.raw) - cap(v) // v's offset in raw, checked below to be that
	if i < 0 || i+len(v) > len(t.raw) || &t.raw[i] != &v[0] {
		return jsonString(v)
	}
	if t.all == "" {
		t.all = string(t.raw)
	}
	return t.all[i+1 : i+len(v)-1], true
}

// fields is what a struct's hand-written reader has read (bits of seen, for members repeated).
type fields struct{ seen uint32 }

// first marks member bit as read; false if it was already.
func (f *fields) first(bit uint32) bool {
	if f.seen&bit != 0 {
		return false
	}
	f.seen |= bit
	return true
}

var sessionMembers = []string{"id", "issuer", "sub", "created_at", "expires_at", "last_seen_at", "idle_timeout_s", "data", "user"}

// sessionMember reads one member of a session, its value depth deep.
func (r *resultReader) sessionMember(depth int, s *Session, f *fields, name []byte, escaped bool) error {
	if escaped {
		return errSlow
	}
	n := name[1 : len(name)-1]
	if string(n) == "user" {
		if !f.first(1 << 8) {
			return errSlow
		}
		return r.nested(depth, func() error {
			s.User = &User{}
			return r.user(depth, s.User)
		})
	}
	v, err := r.s.value(depth)
	if err != nil {
		return err
	}
	ok := false
	t := &r.t
	switch string(n) {
	case "id":
		ok = f.first(1<<0) && t.readString(v, &s.ID)
	case "issuer":
		ok = f.first(1<<1) && t.readString(v, &s.Issuer)
	case "sub":
		ok = f.first(1<<2) && t.readString(v, &s.Sub)
	case "created_at":
		ok = f.first(1<<3) && readInt(v, &s.CreatedAt)
	case "expires_at":
		ok = f.first(1<<4) && readInt(v, &s.ExpiresAt)
	case "last_seen_at":
		ok = f.first(1<<5) && readInt(v, &s.LastSeenAt)
	case "idle_timeout_s":
		ok = f.first(1<<6) && readInt(v, &s.IdleTimeoutS)
	case "data":
		ok = f.first(1<<7) && readMap(v, &s.Data)
	default:
		ok = !foldsTo(n, sessionMembers)
	}
	if !ok {
		return errSlow
	}
	return nil
}

var userMembers = []string{"issuer", "sub", "created_at", "updated_at", "last_login_at", "email", "email_verified",
	"is_private_email", "name", "consent_revoked_at", "email_enabled"}

func (r *resultReader) userMember(depth int, u *User, f *fields, name []byte, escaped bool) error {
	if escaped {
		return errSlow
	}
	n := name[1 : len(name)-1]
	if string(n) == "name" {
		if !f.first(1 << 8) {
			return errSlow
		}
		return r.nested(depth, func() error {
			u.Name = &Name{}
			return r.name(depth, u.Name)
		})
	}
	v, err := r.s.value(depth)
	if err != nil {
		return err
	}
	ok := false
	t := &r.t
	switch string(n) {
	case "issuer":
		ok = f.first(1<<0) && t.readString(v, &u.Issuer)
	case "sub":
		ok = f.first(1<<1) && t.readString(v, &u.Sub)
	case "created_at":
		ok = f.first(1<<2) && readInt(v, &u.CreatedAt)
	case "updated_at":
		ok = f.first(1<<3) && readInt(v, &u.UpdatedAt)
	case "last_login_at":
		ok = f.first(1<<4) && readOptInt(v, &u.LastLoginAt)
	case "email":
		ok = f.first(1<<5) && t.readOptString(v, &u.Email)
	case "email_verified":
		ok = f.first(1<<6) && readOptBool(v, &u.EmailVerified)
	case "is_private_email":
		ok = f.first(1<<7) && readOptBool(v, &u.IsPrivateEmail)
	case "consent_revoked_at":
		ok = f.first(1<<9) && readOptInt(v, &u.ConsentRevokedAt)
	case "email_enabled":
		ok = f.first(1<<10) && readOptBool(v, &u.EmailEnabled)
	default:
		ok = !foldsTo(n, userMembers)
	}
	if !ok {
		return errSlow
	}
	return nil
}

var nameMembers = []string{"given", "family"}

func (r *resultReader) nameMember(depth int, nm *Name, f *fields, name []byte, escaped bool) error {
	if escaped {
		return errSlow
	}
	n := name[1 : len(name)-1]
	v, err := r.s.value(depth)
	if err != nil {
		return err
	}
	ok := false
	switch string(n) {
	case "given":
		ok = f.first(1<<0) && r.t.readOptString(v, &nm.Given)
	case "family":
		ok = f.first(1<<1) && r.t.readOptString(v, &nm.Family)
	default:
		ok = !foldsTo(n, nameMembers)
	}
	if !ok {
		return errSlow
	}
	return nil
}

// foldsTo reports whether an unknown name matches one of names but for case, as encoding/json
// would match it (bytes.EqualFold folds at least as widely: such a name is left to encoding/json).
func foldsTo(name []byte, names []string) bool {
	for _, n := range names {
		if bytes.EqualFold(name, []byte(n)) {
			return true
		}
	}
	return false
}

// The readers below take a value as encoding/json does into a field of that type (null leaves the
// field as it is, or sets a pointer or map to nil); false: a value they leave to encoding/json.

func (t *text) readString(v []byte, dst *string) bool {
	if string(v) == "null" {
		return true
	}
	s, ok := t.string(v)
	*dst = s
	return ok
}

func readInt(v []byte, dst *int64) bool {
	if string(v) == "null" {
		return true
	}
	n, ok := parseInt(v)
	*dst = n
	return ok
}

// parseInt reads an integer as strconv.ParseInt(string(v), 10, 64) does (whose error would copy v
// into a string on every call): ok false for anything that is not one, or out of range.
func parseInt(v []byte) (int64, bool) {
	digits := v
	if len(v) > 0 && v[0] == '-' {
		digits = v[1:]
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			n = -1
			break
		}
		n = n*10 + int64(c-'0')
	}
	if n < 0 || len(digits) == 0 || len(digits) > 18 { // 18 digits never overflow; the rest is strconv's
		n, err := strconv.ParseInt(string(v), 10, 64)
		return n, err == nil
	}
	if len(digits) < len(v) {
		n = -n
	}
	return n, true
}

func readOptInt(v []byte, dst **int64) bool {
	if string(v) == "null" {
		*dst = nil
		return true
	}
	n := new(int64)
	*dst = n
	return readInt(v, n)
}

func (t *text) readOptString(v []byte, dst **string) bool {
	if string(v) == "null" {
		*dst = nil
		return true
	}
	s := new(string)
	*dst = s
	return t.readString(v, s)
}

func readOptBool(v []byte, dst **bool) bool {
	switch string(v) {
	case "null":
		*dst = nil
	case "true", "false":
		b := string(v) == "true"
		*dst = &b
	default:
		return false
	}
	return true
}

func readMap(v []byte, dst *map[string]any) bool {
	switch {
	case string(v) == "null":
		*dst = nil
		return true
	case string(v) == "{}":
		*dst = map[string]any{}
		return true
	case v[0] == '{':
		return json.Unmarshal(v, dst) == nil
	}
	return false
}
