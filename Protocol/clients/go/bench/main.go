// Command bench times one call at depth 1 from Go: keyholed's session.get through this client,
// against a plain RESP GET of a 300-byte value over net.Conn to redis-server's Unix socket.
//
//	go run ./bench --keyhole SOCKET --redis-socket PATH --seconds S
//
// One process, one connection each, one call at a time. It creates its own session and sets its
// own key, warms up, then alternates rounds of each and prints one JSON line: the medians over
// rounds of the mean wall and CPU (this process's) µs per call; floor_us, the same session.get with
// no client at all (the frame written on a plain net.Conn and its answer read whole, not decoded),
// the least any Go client could pay; and the requests each server was sent, warm-up and setup
// included, so that the caller can divide the server's CPU time by them.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	keyhole "keyhole/clients/go"
)

func main() {
	khSocket := flag.String("keyhole", "", "keyholed's socket")
	redisSocket := flag.String("redis-socket", "", "redis-server's Unix socket")
	seconds := flag.Float64("seconds", 5, "how long to measure, both together")
	flag.Parse()
	if *khSocket == "" || *redisSocket == "" {
		flag.Usage()
		os.Exit(2)
	}
	ctx := context.Background()
	kh, err := keyhole.Dial(ctx, *khSocket)
	if err != nil {
		log.Fatal(err)
	}
	defer kh.Close()
	s, err := kh.CreateSession(ctx, fmt.Sprintf("bench-go-%d", os.Getpid()), keyhole.SessionOptions{})
	if err != nil {
		log.Fatal(err)
	}
	rc, err := net.Dial("unix", *redisSocket)
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	r := &resp{c: rc, br: bufio.NewReader(rc)}
	key := fmt.Sprintf("bench:go:%d", os.Getpid())
	value := strings.Repeat("v", 300)
	if err := r.do("SET", key, value); err != nil {
		log.Fatal(err)
	}

	khCall := func() {
		if _, err := kh.GetSession(ctx, s.Token); err != nil {
			log.Fatal(err)
		}
	}
	redisGet := func() {
		if err := r.do("GET", key); err != nil {
			log.Fatal(err)
		}
		if len(r.last) != 300 {
			log.Fatalf("GET returned %d bytes", len(r.last))
		}
	}
	raw, err := net.Dial("unix", *khSocket)
	if err != nil {
		log.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]any{"id": 1, "op": "session.get", "args": map[string]any{"session": s.Token}})
	rawFrame := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	rawFrame = append(rawFrame, payload...)
	answer := make([]byte, 65536)
	floorCall := func() {
		if _, err := raw.Write(rawFrame); err != nil {
			log.Fatal(err)
		}
		got := 0
		for got < 4 || got < 4+int(binary.BigEndian.Uint32(answer)) {
			n, err := raw.Read(answer[got:])
			if err != nil {
				log.Fatal(err)
			}
			got += n
		}
	}
	for i := 0; i < 2000; i++ { // warm up
		khCall()
		redisGet()
		floorCall()
	}
	const roundCalls = 500
	var floorRounds []float64
	var khRounds, redisRounds, khCPU, redisCPU []float64
	calls := 0
	end := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	for time.Now().Before(end) || len(khRounds) < 3 {
		wall, cpu := round(khCall, roundCalls)
		khRounds, khCPU = append(khRounds, wall), append(khCPU, cpu)
		wall, cpu = round(redisGet, roundCalls)
		redisRounds, redisCPU = append(redisRounds, wall), append(redisCPU, cpu)
		wall, _ = round(floorCall, roundCalls)
		floorRounds = append(floorRounds, wall)
		calls += roundCalls
	}
	raw.Close()
	kh.RevokeSession(ctx, s.Token)
	r.do("DEL", key)
	out, _ := json.Marshal(map[string]any{"client": "go", "keyhole_session_get_us": median(khRounds),
		"redis_get_us": median(redisRounds), "floor_us": median(floorRounds), "keyhole_cpu_us": median(khCPU), "redis_cpu_us": median(redisCPU),
		"keyhole_requests": 2*calls + 2000 + 2 + 2000, "redis_requests": calls + 2000 + 2, // warm-up; create, revoke; set, del; floor
		"calls": calls})
	fmt.Println(string(out))
}

// round returns the mean wall and CPU µs per call of n calls.
func round(f func(), n int) (float64, float64) {
	cpuStart := cpuTime()
	start := time.Now()
	for i := 0; i < n; i++ {
		f()
	}
	wall := time.Since(start)
	return float64(wall.Microseconds()) / float64(n), float64((cpuTime() - cpuStart).Microseconds()) / float64(n)
}

// cpuTime is the CPU time this process has used, every thread.
func cpuTime() time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		log.Fatal(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + m) / 2
	}
	return float64(int(m*100+0.5)) / 100
}

// resp is a minimal RESP2 client: commands as arrays of bulk strings, replies read whole.
type resp struct {
	c    net.Conn
	br   *bufio.Reader
	buf  []byte
	last []byte
}

func (r *resp) do(args ...string) error {
	b := r.buf[:0]
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	r.buf = b
	if _, err := r.c.Write(b); err != nil {
		return err
	}
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	switch line[0] {
	case '+', ':':
		return nil
	case '-':
		return fmt.Errorf("redis: %s", strings.TrimSpace(string(line[1:])))
	case '$':
		n, err := strconv.Atoi(strings.TrimSpace(string(line[1:])))
		if err != nil || n < 0 {
			r.last = nil
			return err
		}
		if cap(r.last) < n+2 {
			r.last = make([]byte, n+2)
		}
		r.last = r.last[:n+2]
		if _, err := io.ReadFull(r.br, r.last); err != nil {
			return err
		}
		r.last = r.last[:n]
		return nil
	}
	return fmt.Errorf("redis: unexpected reply %q", line)
}
