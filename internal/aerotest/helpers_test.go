package aerotest

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	aslog "github.com/aerospike/aerospike-client-go/v8/logger"
	"github.com/aerospike/aerospike-client-go/v8/types"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	aslog.Logger.SetLogger(clientLog)
	aslog.Logger.SetLevel(aslog.WARNING)
	goleak.VerifyTestMain(m)
}

// capturedLog collects the Go client's log lines.
type capturedLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *capturedLog) Printf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *capturedLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

var clientLog = &capturedLog{}

// fakeClock is an injectable clock for TTL tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	srv, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func newClient(t *testing.T, srv *Server) *as.Client {
	t.Helper()
	cp := as.NewClientPolicy()
	cp.Timeout = 5 * time.Second
	c, err := as.NewClientWithPolicy(cp, srv.Host(), srv.Port())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func key(t *testing.T, set string, k any) *as.Key {
	t.Helper()
	kk, err := as.NewKey("test", set, k)
	if err != nil {
		t.Fatal(err)
	}
	return kk
}

// rc extracts the result code of a client error (OK for nil).
func rc(err error) types.ResultCode {
	if err == nil {
		return types.OK
	}
	var ae *as.AerospikeError
	if errors.As(err, &ae) {
		return ae.ResultCode
	}
	return types.COMMON_ERROR
}

func wantRC(t *testing.T, what string, err error, want types.ResultCode) {
	t.Helper()
	if got := rc(err); got != want {
		t.Fatalf("%s: result code %v (%d), want %v (%d); err=%v", what, got, got, want, want, err)
	}
}

func writePolicy(mut func(p *as.WritePolicy)) *as.WritePolicy {
	p := as.NewWritePolicy(0, 0)
	p.MaxRetries = 0
	p.TotalTimeout = 2 * time.Second
	if mut != nil {
		mut(p)
	}
	return p
}

func containsAny(lines []string, words ...string) []string {
	var out []string
	for _, l := range lines {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// realServerEnv names the address (host:port) of a real Aerospike server
// for the tests that run against both aerotest and the real thing.
const realServerEnv = "DCSYNC_AEROSPIKE"

// target is a server a behaviour test runs against: aerotest, or the real
// Aerospike server named by DCSYNC_AEROSPIKE (namespace "test" with
// nsup-period > 0 and namespace "nonsup" without nsup, as
// testenv/aerospike/aerospike.conf.in configures it).
type target struct {
	name string  // "aerotest" or "real"
	srv  *Server // nil for the real server
	host string
	port int
	run  string // unique per test, for keys
	base int64  // unique per test, for integer keys

	mu   sync.Mutex
	keys []*as.Key
}

func (tg *target) real() bool { return tg.srv == nil }

// aerotestLikeReal is the aerotest configuration matching the real test
// server's.
func aerotestLikeReal() Options {
	return Options{Namespaces: []string{"test", "nonsup"}, NsupDisabled: []string{"nonsup"}}
}

// forEachTarget runs f as the subtests "aerotest" and "real". Without
// DCSYNC_AEROSPIKE the real subtest fails when CI=true and is skipped
// otherwise.
func forEachTarget(t *testing.T, f func(t *testing.T, tg *target)) {
	t.Helper()
	t.Run("aerotest", func(t *testing.T) {
		srv := startServer(t, aerotestLikeReal())
		f(t, newTarget(t, "aerotest", srv, srv.Host(), srv.Port()))
	})
	t.Run("real", func(t *testing.T) {
		host, port := realServer(t)
		f(t, newTarget(t, "real", nil, host, port))
	})
}

// realServer returns the real server's address or ends the test.
func realServer(t *testing.T) (string, int) {
	t.Helper()
	addr := os.Getenv(realServerEnv)
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: CI requires the real Aerospike server (testenv/aerospike/up)", realServerEnv)
		}
		t.Skipf("%s is not set: skipping the real-server run (start one with testenv/aerospike/up)", realServerEnv)
	}
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s=%q: %v", realServerEnv, addr, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatalf("%s=%q: %v", realServerEnv, addr, err)
	}
	return host, port
}

func newTarget(t *testing.T, name string, srv *Server, host string, port int) *target {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	tg := &target{name: name, srv: srv, host: host, port: port,
		run:  hex.EncodeToString(b[:6]),
		base: int64(binary.BigEndian.Uint64(b[:]) >> 8)}
	if srv == nil {
		// Leave nothing behind on the shared server.
		t.Cleanup(func() {
			c, err := as.NewClient(host, port)
			if err != nil {
				return
			}
			defer c.Close()
			tg.mu.Lock()
			defer tg.mu.Unlock()
			for _, k := range tg.keys {
				c.Delete(nil, k)
			}
		})
	}
	return tg
}

// client connects a client to the target, closed at the end of the test.
func (tg *target) client(t *testing.T) *as.Client {
	t.Helper()
	cp := as.NewClientPolicy()
	cp.Timeout = 5 * time.Second
	c, err := as.NewClientWithPolicy(cp, tg.host, tg.port)
	if err != nil {
		t.Fatalf("connect to %s: %v", tg.name, err)
	}
	t.Cleanup(c.Close)
	return c
}

// key returns a key in namespace "test" unique to this test: string keys
// get a run prefix, integer keys an offset.
func (tg *target) key(t *testing.T, set string, k any) *as.Key {
	t.Helper()
	return tg.nsKey(t, "test", set, k)
}

func (tg *target) nsKey(t *testing.T, ns, set string, k any) *as.Key {
	t.Helper()
	switch v := k.(type) {
	case string:
		k = tg.run + "/" + v
	case int:
		k = tg.base + int64(v)
	}
	kk, err := as.NewKey(ns, set, k)
	if err != nil {
		t.Fatal(err)
	}
	tg.mu.Lock()
	tg.keys = append(tg.keys, kk)
	tg.mu.Unlock()
	return kk
}

// capture is a TCP proxy in front of a target that records the AS_MSG
// frames going through it, to compare wire bytes.
type capture struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frames []capFrame
	wg     sync.WaitGroup
	conns  map[net.Conn]struct{}
}

type capFrame struct {
	toServer bool
	b        []byte
}

func startCapture(t *testing.T, tg *target) *capture {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp := &capture{ln: ln, target: net.JoinHostPort(tg.host, strconv.Itoa(tg.port)), conns: map[net.Conn]struct{}{}}
	cp.wg.Add(1)
	go cp.accept()
	t.Cleanup(func() {
		ln.Close()
		cp.mu.Lock()
		for c := range cp.conns {
			c.Close()
		}
		cp.mu.Unlock()
		cp.wg.Wait()
	})
	return cp
}

func (cp *capture) accept() {
	defer cp.wg.Done()
	for {
		c, err := cp.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", cp.target)
		if err != nil {
			c.Close()
			continue
		}
		cp.mu.Lock()
		cp.conns[c], cp.conns[s] = struct{}{}, struct{}{}
		cp.mu.Unlock()
		cp.wg.Add(2)
		go cp.pipe(c, s, true)
		go cp.pipe(s, c, false)
	}
}

func (cp *capture) pipe(from, to net.Conn, toServer bool) {
	defer cp.wg.Done()
	defer from.Close()
	defer to.Close()
	r := bufio.NewReader(from)
	for {
		f, err := readRawFrame(r)
		if err != nil {
			return
		}
		if f[1] != protoTypeInfo {
			cp.mu.Lock()
			cp.frames = append(cp.frames, capFrame{toServer: toServer, b: f})
			cp.mu.Unlock()
		}
		if _, err := to.Write(f); err != nil {
			return
		}
	}
}

// replies returns and forgets the AS_MSG reply frames captured so far.
func (cp *capture) replies() [][]byte {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out [][]byte
	for _, f := range cp.frames {
		if !f.toServer {
			out = append(out, f.b)
		}
	}
	cp.frames = nil
	return out
}

// client connects a client through the proxy.
func (cp *capture) client(t *testing.T) *as.Client {
	t.Helper()
	addr := cp.ln.Addr().(*net.TCPAddr)
	cp2 := as.NewClientPolicy()
	cp2.Timeout = 5 * time.Second
	c, err := as.NewClientWithPolicy(cp2, "127.0.0.1", addr.Port)
	if err != nil {
		t.Fatalf("connect through capture: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
