package aerospike_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"go.uber.org/goleak"

	"github.com/dcsync/dcsync/store/aerospike"
)

// Environment: the real server the suite runs against, and what child processes of the
// suite use to reach it.
const (
	envReal      = "DCSYNC_AEROSPIKE"
	envRealNS    = "DCSYNC_AEROSPIKE_NAMESPACE"
	envChildAddr = "DCSYNC_AEROSPIKE_TEST_ADDR"
	envChildNS   = "DCSYNC_AEROSPIKE_TEST_NS"
)

// namespace is the namespace every test writes to: $DCSYNC_AEROSPIKE_NAMESPACE, "test"
// by default.
var namespace = "test"

func TestMain(m *testing.M) {
	if ns := os.Getenv(envRealNS); ns != "" {
		namespace = ns
	}
	conformanceChildMain()
	goleak.VerifyTestMain(m)
}

// realServer returns the address (host:port) of the real Aerospike server every test
// of this package runs against, $DCSYNC_AEROSPIKE. When it is not set the test fails if
// $CI is "true" (a backend that cannot be reached is a failure in CI), and is skipped
// otherwise. The namespace is the package variable namespace.
func realServer(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(envReal)
	if addr == "" {
		const msg = envReal + " is not set: start a real Aerospike server with " +
			"`DCSYNC_ASD=/path/to/asd testenv/aerospike/up` and export the " + envReal +
			"=host:port it prints (./scripts/test does both when DCSYNC_ASD is set)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " [CI=true: failing]")
		}
		t.Skip(msg)
	}
	return addr
}

func storeURL(addr, ns string) *url.URL {
	return &url.URL{Scheme: "aerospike", Host: addr, Path: "/" + ns}
}

func splitAddr(t testing.TB, addr string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return host, p
}

// dial connects a raw client to addr (host:port), closed when the test ends.
func dial(t testing.TB, addr string) *as.Client {
	t.Helper()
	host, p := splitAddr(t, addr)
	c, err := as.NewClient(host, p)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// realClient dials the real server (see realServer).
func realClient(t testing.TB) *as.Client { return dial(t, realServer(t)) }

// newStore returns a store on c with cfg (namespace namespace unless set), closed when
// the test ends.
func newStore(t testing.TB, c *as.Client, cfg aerospike.Config) *aerospike.Store {
	t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = namespace
	}
	s, err := aerospike.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// unique returns prefix and a random suffix: the real server is shared and long-lived,
// so every name a test writes must be new.
func unique(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
