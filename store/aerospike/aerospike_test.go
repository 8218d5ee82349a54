package aerospike_test

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"go.uber.org/goleak"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/aerotest"
	"github.com/dcsync/dcsync/store/aerospike"
	"github.com/dcsync/dcsync/store/storetest"
)

// Environment: a real server to run against, and what child processes of the suite use
// to reach the parent's server.
const (
	envReal      = "DCSYNC_AEROSPIKE"
	envRealNS    = "DCSYNC_AEROSPIKE_NAMESPACE"
	envChildAddr = "DCSYNC_AEROSPIKE_TEST_ADDR"
	envChildNS   = "DCSYNC_AEROSPIKE_TEST_NS"
)

func TestMain(m *testing.M) {
	storetest.ChildMain(func(ctx context.Context) (dcsync.Store, error) {
		return aerospike.OpenURL(ctx, storeURL(os.Getenv(envChildAddr), os.Getenv(envChildNS)))
	})
	goleak.VerifyTestMain(m)
}

func storeURL(addr, ns string) *url.URL {
	return &url.URL{Scheme: "aerospike", Host: addr, Path: "/" + ns}
}

// startServer starts an in-process server for one test, closed when the test ends.
func startServer(t testing.TB) *aerotest.Server {
	t.Helper()
	srv, err := aerotest.Start(aerotest.Options{Namespaces: []string{"test"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// dial connects a raw client, closed when the test ends.
func dial(t testing.TB, addr string) *as.Client {
	t.Helper()
	u := storeURL(addr, "x")
	host, port := u.Hostname(), u.Port()
	p := 3000
	if port != "" {
		var err error
		if p, err = parsePort(port); err != nil {
			t.Fatal(err)
		}
	}
	c, err := as.NewClient(host, p)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

func parsePort(s string) (int, error) {
	u, err := url.Parse("x://h:" + s)
	if err != nil {
		return 0, err
	}
	var p int
	for _, c := range u.Port() {
		p = p*10 + int(c-'0')
	}
	return p, nil
}

// newStore returns a store on c with cfg (namespace "test" unless set), closed when the
// test ends.
func newStore(t testing.TB, c *as.Client, cfg aerospike.Config) *aerospike.Store {
	t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = "test"
	}
	s, err := aerospike.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func harness(addr, ns string) storetest.Harness {
	return storetest.Harness{
		Open: func(t *testing.T) dcsync.Store {
			s, err := aerospike.OpenURL(context.Background(), storeURL(addr, ns))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		ProcessEnv: func(t *testing.T) []string {
			return []string{envChildAddr + "=" + addr, envChildNS + "=" + ns}
		},
	}
}

func TestConformance(t *testing.T) {
	srv := startServer(t)
	storetest.Run(t, harness(srv.Addr(), "test"))
}

// TestConformanceRealServer runs the suite against the server at $DCSYNC_AEROSPIKE
// (host:port), namespace $DCSYNC_AEROSPIKE_NAMESPACE (default "test").
func TestConformanceRealServer(t *testing.T) {
	addr := os.Getenv(envReal)
	if addr == "" {
		t.Skip(envReal + " is not set")
	}
	ns := os.Getenv(envRealNS)
	if ns == "" {
		ns = "test"
	}
	storetest.Run(t, harness(addr, ns))
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
