package keyhole

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

const fullSession = `{"created_at":1730673678,"data":{"cart":[1,2.5,"x"],"n":null},"expires_at":1733265678,` +
	`"id":"6qYhoTcwJYOV9ynbXwYklw","idle_timeout_s":604800,"issuer":"apple","last_seen_at":1730673678,"sub":"001542.b041",` +
	`"user":{"consent_revoked_at":1730673000,"created_at":1730673678,"email":"a\u00e9@example.com","email_enabled":false,` +
	`"email_verified":true,"is_private_email":false,"issuer":"apple","last_login_at":1730673678,` +
	`"name":{"family":"Ünal","given":"Zoë"},"sub":"001542.b041","updated_at":1730673679}}`

// checkSession decodes raw with the hand-written reader and with encoding/json: the same value, or
// the same error.
func checkSession(t *testing.T, raw string) {
	t.Helper()
	var got, want Session
	gerr := decodeSession([]byte(raw), &got)
	werr := json.Unmarshal([]byte(raw), &want)
	if fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Fatalf("%s: error %v, encoding/json: %v", raw, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %s\nwant %s", raw, dump(got), dump(want))
	}
	// Read by the connection's reader as it checks the response, when the answer is its own.
	body := []byte(`{"id":9,"ok":true,"result":` + raw + `}`)
	var fused Session
	_, _, o, perr := parseResponse(body, 9, &fused)
	if perr != nil {
		if json.Valid(body) && utf8.Valid(body) && strings.HasPrefix(raw, "{") {
			t.Fatalf("%s: the response reader refused it: %v", raw, perr)
		}
	} else {
		if !o.decoded {
			gerr = decodeSession(o.result, &fused) // what callInto does then
		} else if o.result != nil {
			t.Fatalf("%s: decoded, and a result kept too", raw)
		}
		if fmt.Sprint(gerr) != fmt.Sprint(werr) || werr == nil && !reflect.DeepEqual(fused, want) {
			t.Fatalf("%s: read with the response (decoded %v): %s %v, want %s %v", raw, o.decoded, dump(fused), gerr, dump(want), werr)
		}
	}
	var gu, wu User
	gerr = decodeUser([]byte(raw), &gu)
	werr = json.Unmarshal([]byte(raw), &wu)
	if fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Fatalf("%s as a user: error %v, encoding/json: %v", raw, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(gu, wu) {
		t.Fatalf("%s as a user:\n got %s\nwant %s", raw, dump(gu), dump(wu))
	}
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The answers keyholed sends are read by hand (not handed to encoding/json), to the same values.
func TestSessionReaderTakesKeyholedsAnswers(t *testing.T) {
	for _, raw := range []string{
		fullSession,
		`{"created_at":1,"data":{},"expires_at":2,"id":"i","idle_timeout_s":3,"issuer":"apple","last_seen_at":4,"sub":"x","user":null}`,
		`{"created_at":1,"data":{},"expires_at":2,"id":"i","idle_timeout_s":3,"issuer":"apple","last_seen_at":4,"sub":"x",` +
			`"user":{"created_at":1,"issuer":"apple","last_login_at":null,"sub":"x","updated_at":1}}`,
		`{"id":"i","future_member":{"a":[1,2,{"b":"c"}]},"sub":"\u00e9\n","created_at":-0}`,
	} {
		var s Session
		if !readSession([]byte(raw), &s) {
			t.Errorf("left to encoding/json: %s", raw)
		}
		checkSession(t, raw)
	}
	var u User
	if !readUser([]byte(`{"created_at":1,"issuer":"apple","last_login_at":null,"sub":"x","updated_at":1,"name":{"given":"A"}}`), &u) {
		t.Error("user left to encoding/json")
	}
}

// Every member of a session and of its user and name, given every kind of value, under its own
// name, another case, an escaped name and twice: the reader and encoding/json agree.
func TestSessionReaderAgreesWithEncodingJSON(t *testing.T) {
	values := []string{
		`null`, `""`, `"s"`, `"\u00e9\ud83d\ude00"`, `"\ud800"`, `"a\"b"`, `0`, `-0`, `1`, `-1`, `1.5`, `1e2`, `1E+2`, `-1.0`,
		`9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `-9223372036854775809`,
		`123456789012345678`, `1234567890123456789`, `99999999999999999999`, `true`, `false`, `{}`, `[]`, `[1]`,
		`{"a":1}`, `{"a":{"b":[null]}}`, `{"given":"g"}`, `{"family":null,"given":"x"}`, `{"given":1}`,
		`{"Given":"g"}`, `{"given":"a","given":"b"}`, `{"x":1}`,
	}
	sessionNames := append([]string{}, sessionMembers...)
	userNames := append([]string{}, userMembers...)
	variants := func(name string) []string {
		return []string{strconv.Quote(name), strconv.Quote(strings.ToUpper(name)), strconv.Quote(strings.ToUpper(name[:1]) + name[1:]),
			`"\u00` + fmt.Sprintf("%x", name[0]) + name[1:] + `"`, strconv.Quote(strings.ReplaceAll(strings.ReplaceAll(name, "s", "ſ"), "k", "\u212a")),
			strconv.Quote(name + "x")}
	}
	for _, name := range sessionNames {
		for _, q := range variants(name) {
			for _, v := range values {
				checkSession(t, `{"id":"i",`+q+`:`+v+`}`)
				checkSession(t, `{`+q+`:`+v+`,"sub":"s",`+q+`:"again"}`)
			}
		}
	}
	for _, name := range userNames {
		for _, q := range variants(name) {
			for _, v := range values {
				checkSession(t, `{"id":"i","user":{"sub":"x",`+q+`:`+v+`}}`)
				checkSession(t, `{"user":{`+q+`:`+v+`,`+q+`:`+v+`}}`)
				checkSession(t, `{"user":{"name":{"given":"a"},`+q+`:`+v+`}}`)
			}
		}
	}
	for _, raw := range []string{
		`{}`, `[]`, `null`, `"x"`, `1`, `{"user":{},"user":null}`, `{"user":null,"user":{"sub":"x"}}`,
		`{"data":{"a":1},"data":{"b":2}}`, `{"data":{"a":1},"data":{}}`, `{"data":{},"data":{"a":1}}`, `{"data":{"a":1},"data":null}`, `{"user":{"name":{},"name":{"given":"x"}}}`,
		`{"user":{"name":null}}`, `{"user":{"name":[]}}`, `{"user":[]}`, `{"data":[]}`, `{"id":"\u0000"}`,
		`{"id":"i"}x`, `{"id":"i",}`, `{"id":"tab` + "\t" + `"}`, "{\"id\":\"\xff\"}", "{\"id\":\"a\xed\xa0\x80b\"}",
		`{"ID":"upper","id":"lower"}`, `{"id":"lower","ID":"upper"}`,
	} {
		checkSession(t, raw)
	}
}

func TestParseIntAgreesWithStrconv(t *testing.T) {
	for _, s := range []string{"0", "-0", "1", "-1", "007", "12a", "-", "", "+1", "1.0", "1e3",
		"999999999999999999", "-999999999999999999", "9223372036854775807", "9223372036854775808",
		"-9223372036854775808", "-9223372036854775809", "18446744073709551616"} {
		n, ok := parseInt([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		if ok != (err == nil) || ok && n != want {
			t.Errorf("%q: %d %v, strconv: %d %v", s, n, ok, want, err)
		}
	}
}

// The reading call's own answer is read into its target in the pass that checks the response;
// any other answer keeps its result (a copy: the read buffer is reused), and so does one the
// hand-written reader leaves to encoding/json.
func TestOwnAnswerReadWithTheResponse(t *testing.T) {
	result := `{"created_at":1,"data":{},"expires_at":2,"id":"i","idle_timeout_s":3,"issuer":"apple","last_seen_at":4,"sub":"x","user":null}`
	var want Session
	json.Unmarshal([]byte(result), &want)
	for _, c := range []struct {
		body    string
		decoded bool
		err     bool
	}{
		{`{"id":9,"ok":true,"result":` + result + `}`, true, false},
		{`{"ok":true,"result":` + result + `,"id":9}`, false, false},                 // the id after the result
		{`{"id":8,"ok":true,"result":` + result + `}`, false, false},                 // another call's
		{`{"id":9,"ok":true,"result":` + result + `,"id":8}`, false, false},          // an id repeated: the last one's
		{`{"id":9,"ok":true,"result":{"a":1},"result":` + result + `}`, true, false}, // the last result
		{`{"id":9,"ok":true,"result":` + result + `,"result":{"ID":"x"}}`, false, false},
		{`{"id":9,"ok":true,"result":{"ID":"x"}}`, false, false}, // left to encoding/json
		{`{"id":9,"ok":false,"error":{"code":"internal"},"result":` + result + `}`, false, false},
		{`{"id":9,"ok":true,"result":{"id":"i",}}`, false, true},              // not JSON: the connection's error
		{`{"id":9,"ok":true,"result":{"sub":"x","ID":1,"a":[}}`, false, true}, // not JSON past what the reader left
		{`{"id":9,"ok":true,"result":{"user":{"sub":"x"}}`, false, true},
	} {
		body := []byte(c.body)
		var s Session
		id, _, o, err := parseResponse(body, 9, &s)
		if (err != nil) != c.err || o.decoded != c.decoded {
			t.Errorf("%s: decoded %v, error %v", c.body, o.decoded, err)
			continue
		}
		if err != nil || o.err != nil {
			continue
		}
		for i := range body {
			body[i] = 'X' // the buffer is reused: nothing read from it may change
		}
		if o.decoded {
			if id != 9 || o.result != nil || !reflect.DeepEqual(s, want) {
				t.Errorf("%s: %d %s %s", c.body, id, o.result, dump(s))
			}
		} else if !json.Valid(o.result) {
			t.Errorf("%s: result %q", c.body, o.result)
		}
	}
}
