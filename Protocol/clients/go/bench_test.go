package keyhole

import (
	"encoding/json"
	"strconv"
	"testing"
)

// The client's own work on one session.get, without the socket: go test -bench . -benchmem -run ^$

const benchAnswer = `{"id":2,"ok":true,"result":{"created_at":1730673678,"data":{},"expires_at":1733265678,"id":"6qYhoTcwJYOV9ynbXwYklw","idle_timeout_s":604800,"issuer":"apple","last_seen_at":1730673678,"sub":"x","user":{"created_at":1730673678,"issuer":"apple","last_login_at":1730673678,"sub":"x","updated_at":1730673678}}}`

const benchToken = "kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

func BenchmarkEncodeRequest(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		encodeRequest(uint64(i), "session.get", oneArg{"session", benchToken})
	}
}

func BenchmarkEncodeRequestStdlib(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		args, _ := json.Marshal(map[string]any{"session": benchToken})
		op, _ := json.Marshal("session.get")
		frame := append(append(append(append([]byte(`....{"v":1,"id":`), strconv.FormatUint(uint64(i), 10)...), op...), args...), '}')
		_ = frame
	}
}

func BenchmarkParseResponse(b *testing.B) {
	b.ReportAllocs()
	body := []byte(benchAnswer)
	for i := 0; i < b.N; i++ {
		if _, _, _, err := parseResponse(body, 0, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeSession(b *testing.B) {
	b.ReportAllocs()
	_, _, o, _ := parseResponse([]byte(benchAnswer), 0, nil)
	for i := 0; i < b.N; i++ {
		var s Session
		if err := decodeSession(o.result, &s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeSessionStdlib(b *testing.B) {
	b.ReportAllocs()
	_, _, o, _ := parseResponse([]byte(benchAnswer), 0, nil)
	for i := 0; i < b.N; i++ {
		var s Session
		if err := json.Unmarshal(o.result, &s); err != nil {
			b.Fatal(err)
		}
	}
}
