package aerospike_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/chaos"
	"github.com/dcsync/dcsync/internal/faultproxy"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestChaosDroppedReplies runs internal/chaos's workers (goroutines on one lock and one
// count-up-down latch, every call and return recorded, checked for linearizability)
// against the real server through the fault proxy, which drops replies after the server
// applied the command and breaks connections.
func TestChaosDroppedReplies(t *testing.T) {
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		t.Run(level.String(), func(t *testing.T) {
			p := startProxy(t)
			c := dial(t, p.Addr())
			chaos.RunT(t, chaos.Scenario{
				Open: func(context.Context) (driver.Store, error) {
					return aerospike.New(c, aerospike.Config{Namespace: namespace, Timeout: 150 * time.Millisecond, Attempts: 8})
				},
				Goroutine:  4,
				Locks:      32, // fewer than the default: the latch workers keep their share of the store
				Duration:   5 * time.Second,
				MinLockOps: chaos.FaultMinLockOps, MaxDuration: chaos.FaultMaxDuration,
				Level:      level,
				Name:       unique("chaos"),
				Fault:      p.dropOrReset,
				FaultEvery: 300 * time.Millisecond,
			})
		})
	}
}

// proxyChaosDuration is how long each fault-proxy chaos run lasts: 10 s, or
// $DCSYNC_CHAOS_DURATION (a Go duration, e.g. 10m for a soak run).
func proxyChaosDuration(t *testing.T) time.Duration {
	if v := os.Getenv("DCSYNC_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("DCSYNC_CHAOS_DURATION=%q: %v", v, err)
		}
		return d
	}
	return 10 * time.Second
}

// TestChaosFaultProxy runs internal/chaos's lock and latch workers against the real
// server through internal/faultproxy, with every fault it has: delays, replies dropped
// after the server applied the command, connection resets, and requests held back and
// delivered after the client gave up on them and retried (a first attempt landing after
// its retry). The report's faults are what was asked for; the proxy's counts what
// happened (a held request ends delivered late, delivered while its client still
// waited, or lost to a reset).
func TestChaosFaultProxy(t *testing.T) {
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		t.Run(level.String(), func(t *testing.T) {
			p := faultproxy.Start(t, realServer(t))
			p.SetMaxHold(2 * time.Second)
			// A client that does not tend the cluster during the run: its tend requests
			// (an info request a second) go through the proxy too, and the proxy's
			// resets and dropped replies make enough of them fail that the client
			// drops the node; every operation then fails at once ("cluster is empty"),
			// as an outcome unknown to the checker. Two CI runs at load 10-47 ended with
			// no lock acquired and all but one latch operation unknown, the checker
			// timing out. The faults are for the data path, which this keeps.
			host, port := splitAddr(t, p.Addr())
			cp := as.NewClientPolicy()
			cp.TendInterval = time.Hour
			c, err := as.NewClientWithPolicy(cp, host, port)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			rep := chaos.RunT(t, chaos.Scenario{
				Open: func(context.Context) (driver.Store, error) {
					return aerospike.New(c, aerospike.Config{Namespace: namespace, Timeout: 150 * time.Millisecond, Attempts: 8})
				},
				Goroutine:  4,
				Duration:   proxyChaosDuration(t),
				MinLockOps: chaos.FaultMinLockOps, MaxDuration: max(chaos.FaultMaxDuration, proxyChaosDuration(t)),
				Level:      level,
				Name:       unique("chaosfp"),
				Fault:      p.Inject,
				Settle:     func() { p.Disarm(); p.ReleaseHeld() },
				FaultEvery: 250 * time.Millisecond,
			})
			p.ReleaseHeld()
			if err := p.WaitSettled(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			t.Logf("faultproxy aerospike %s: operations lock=%d latch=%d; proxy %v", level, rep.Acquisitions, rep.LatchOps, p.Counts())
			if c := p.Counts(); c.DroppedReplies == 0 || c.Held == 0 || c.Delays == 0 || c.Resets == 0 {
				t.Fatalf("the run did not inject every kind of fault: %v", c)
			}
		})
	}
}

// isMessage matches a chunk that starts an AS_MSG request (protocol version 2, type 3),
// not an info request (type 1) of the client's tend.
func isMessage(b []byte) bool { return len(b) >= 8 && b[0] == 2 && b[1] == 3 }

// TestFaultProxyReordersOnTheRealServer shows the fault behind a late-landing retry on
// the real server: a put is held by the proxy, its client times out and gives up, a
// later put of the same record goes through on another connection, and then the held
// put reaches the server, which applies the two in that order: the record ends with the
// first put's value.
func TestFaultProxyReordersOnTheRealServer(t *testing.T) {
	// The server may drop a held command whose timeout, counted from its arrival, ran
	// out before it could run it (a loaded machine): an attempt that shows no
	// reordering is repeated, and the test fails only if none of three does.
	for attempt := 1; attempt <= 3; attempt++ {
		if reorderOnce(t) {
			return
		}
		t.Logf("attempt %d: the held put was answered but not applied; trying again", attempt)
	}
	t.Fatal("in three attempts the held put never landed after the later one")
}

// reorderOnce holds a put, lets a later put of the same record through, delivers the
// held one and reports whether the record ends with the held put's value.
func reorderOnce(t *testing.T) bool {
	direct := realClient(t)
	p := faultproxy.Start(t, realServer(t))
	p.SetMaxHold(time.Minute)
	// A client that does not tend the cluster during the test: the proxy delivers the
	// held put once a later request and its reply have passed, and the client's tend
	// (an info request a second) would be such a request. With the put's 1 s timeout it
	// came right after the close, before the later put, every time.
	host, port := splitAddr(t, p.Addr())
	cp := as.NewClientPolicy()
	cp.TendInterval = time.Hour
	c, err := as.NewClientWithPolicy(cp, host, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	key, err := as.NewKey(namespace, "faultproxy", unique("reorder"))
	if err != nil {
		t.Fatal(err)
	}
	wp := as.NewWritePolicy(0, 0)
	wp.TotalTimeout, wp.SocketTimeout, wp.MaxRetries = time.Second, time.Second, 0
	if err := c.Put(wp, key, as.BinMap{"v": "zero"}); err != nil {
		t.Fatal(err)
	}

	p.HoldMatching(1, isMessage)
	err = c.Put(wp, key, as.BinMap{"v": "first"})
	var ae as.Error
	if err == nil || !errors.As(err, &ae) || !ae.Matches(types.TIMEOUT) {
		t.Fatalf("the held put returned %v, want a timeout", err)
	}
	// The proxy has seen the client close that connection (a proxy that delivered at
	// the close would have delivered by now).
	if err := p.WaitAbandoned(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	wp2 := as.NewWritePolicy(0, 0)
	if err := c.Put(wp2, key, as.BinMap{"v": "second"}); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitSettled(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := p.Counts(); got.HeldLate != 1 {
		t.Fatalf("the held put was not delivered after its client closed: %v", got)
	}
	rec, err := direct.Get(nil, key, "v")
	if err != nil {
		t.Fatal(err)
	}
	switch v := rec.Bins["v"]; v {
	case "first":
		return true
	case "second":
		return false
	default:
		t.Fatalf("the record holds %v", v)
	}
	return false
}

// ownServer starts an Aerospike server of this test's own (testenv/aerospike/up with its
// own run directory) whose namespace test is kept in a file, and stops it when the test
// ends. restart kills it with SIGKILL and starts it again on the same port, on the same
// file. It needs $DCSYNC_ASD, the server binary; without it the test is skipped (CI=true:
// fails).
func ownServer(t *testing.T) (addr string, restart func() error) {
	t.Helper()
	if os.Getenv("DCSYNC_ASD") == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("DCSYNC_ASD is not set [CI=true: failing]: the restart test starts its own server")
		}
		t.Skip("DCSYNC_ASD is not set: the restart test starts its own server")
	}
	dir, err := filepath.Abs("../../testenv/aerospike")
	if err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
	env := append(os.Environ(), "DCSYNC_AEROSPIKE_RUN_DIR="+run, "DCSYNC_AEROSPIKE_STORAGE=file")
	script := func(name string) (string, error) {
		cmd := exec.Command(filepath.Join(dir, name))
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("testenv/aerospike/%s: %v\n%s", name, err, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return strings.TrimPrefix(lines[len(lines)-1], "DCSYNC_AEROSPIKE="), nil
	}
	addr, err = script("up")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := script("down"); err != nil {
			t.Error(err)
		}
	})
	return addr, func() error {
		got, err := script("restart")
		if err == nil && got != addr {
			err = fmt.Errorf("the restarted server listens on %s, not %s", got, addr)
		}
		return err
	}
}

// TestChaosServerRestart runs the chaos workers through the fault proxy against a server
// of the test's own with its data in a file, with the proxy's faults and, now and then,
// the server killed with SIGKILL and started again: what was acknowledged before the
// crash must still be there after it (the latch history says so: a lost update cannot
// be linearized).
//
// It runs only with DCSYNC_AEROSPIKE_RESTART_TEST=1: on a loaded 2-core machine a
// restart of asd takes seconds, and a CI run under load once made no lock operation at
// all in its 15 s (docs/reliability.md has the figures of the runs made).
func TestChaosServerRestart(t *testing.T) {
	if os.Getenv("DCSYNC_AEROSPIKE_RESTART_TEST") != "1" {
		t.Skip("set DCSYNC_AEROSPIKE_RESTART_TEST=1 to kill -9 and restart a server of the test's own during a chaos run")
	}
	addr, restart := ownServer(t)
	p := faultproxy.Start(t, addr)
	p.SetMaxHold(2 * time.Second)
	c := dial(t, p.Addr())
	n := 0
	rep := chaos.RunT(t, chaos.Scenario{
		Open: func(context.Context) (driver.Store, error) {
			return aerospike.New(c, aerospike.Config{Namespace: "test", Timeout: 150 * time.Millisecond, Attempts: 8})
		},
		Goroutine: 4,
		Duration:  max(15*time.Second, proxyChaosDuration(t)),
		// A loaded machine restarts the server slowly: the run goes on (for at most two
		// minutes) until the lock workers have done something between restarts.
		MinLockOps:  20,
		MaxDuration: max(2*time.Minute, proxyChaosDuration(t)),
		Level:       dcsync.XDC,
		Name:        unique("chaosrestart"),
		Fault: func(r *rand.Rand) string {
			if n++; n%24 == 4 {
				if err := restart(); err != nil {
					t.Error(err)
				}
				p.CountRestart()
				return "server-restart"
			}
			return p.Inject(r)
		},
		FaultEvery: 250 * time.Millisecond,
	})
	p.ReleaseHeld()
	if err := p.WaitSettled(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("faultproxy aerospike restart: operations lock=%d latch=%d; proxy %v", rep.Acquisitions, rep.LatchOps, p.Counts())
	if p.Counts().ServerRestarts == 0 {
		t.Fatal("the server was not restarted")
	}
}
