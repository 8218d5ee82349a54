// Package storetest is the conformance suite every dcsync store passes. A store's tests
// call Run with a Harness that opens the store; the suite drives the store both directly
// and through packages lock and latch, and checks every rule of the store contract:
// create-only latches, NotFound for missing latches, DC and XDC scopes, TTL expiry,
// batched waiting, owner-checked release and refresh, strictly increasing fencing
// tokens, lease takeover, keep-alive and its loss signal, input validation before any
// I/O, and exact results under concurrent goroutines and, where the store is shared
// between processes, concurrent OS processes.
//
// The suite uses unique names for everything it writes, so it can run against a shared,
// long-lived server. Timing is never asserted; TTL cases sleep just past short leases.
package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/suitekit"
)

// Harness tells the suite how to reach the store under test.
type Harness struct {
	// Open returns a store for one test. Stores returned by different calls should
	// share state (the same file, server or table) when the store is meant to be shared
	// between processes; the suite closes each one when the test ends.
	Open func(t *testing.T) driver.Store
	// OpenOwn, when set, returns a store the test may close without affecting other
	// tests (for a harness whose Open shares one store and ignores Close). Defaults to
	// Open.
	OpenOwn func(t *testing.T) driver.Store
	// ProcessEnv, when set, returns the environment (NAME=value) a child process needs
	// to open the same store through the function passed to ChildMain; the suite then
	// runs its multi-process cases. Leave it nil for a store that lives in one process.
	ProcessEnv func(t *testing.T) []string
	// PollInterval is the latch watcher's interval in the suite (50ms if zero).
	PollInterval time.Duration
	// Farm and OtherFarm are the farm ids the suite uses ("dc1" and "dc2" if empty).
	Farm, OtherFarm string
}

func (h *Harness) defaults() {
	if h.PollInterval == 0 {
		h.PollInterval = 50 * time.Millisecond
	}
	if h.Farm == "" {
		h.Farm = "dc1"
	}
	if h.OtherFarm == "" {
		h.OtherFarm = "dc2"
	}
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	h.defaults()
	t.Run("Latch", func(t *testing.T) { runLatch(t, h) })
	t.Run("Lock", func(t *testing.T) { runLock(t, h) })
	t.Run("Validation", func(t *testing.T) { runValidation(t, h) })
	t.Run("IDs", func(t *testing.T) { runIDs(t, h) })
	t.Run("Processes", func(t *testing.T) {
		if h.ProcessEnv == nil {
			t.Skip("store lives in one process; no multi-process cases")
		}
		runProcesses(t, h)
	})
}

// unique returns a name no earlier run of the suite has used.
func unique(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	base := t.Name()
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[i+1:]
	}
	return base + "-" + hex.EncodeToString(b[:])
}

// quiet discards the logs of the managers the suite makes: injected faults are expected.
var quiet = slog.New(slog.DiscardHandler)

// client is the client id the suite writes under.
const client = "storetest"

func (h Harness) open(t *testing.T) driver.Store {
	t.Helper()
	s := h.Open(t)
	t.Cleanup(func() { s.Close() })
	return s
}

// The suite's shorthands for the shared helpers.
var (
	ctxT     = suitekit.Context
	wantCode = suitekit.WantCode
	must     = suitekit.Must
)

// noLeaks checks, when the test ends and after the stores it opened are closed, that
// the test left no goroutine behind. Call it before opening anything.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}
