package aerotest

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
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
