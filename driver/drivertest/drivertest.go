// Package drivertest is the conformance suite of the store contract, package driver:
// every dcsync store passes it, and so must a new back end. A store's tests call [Run]
// once with a [Harness] that opens the store; Run runs every case as a subtest:
//
//	Latch, Lock      the lock and latch rules, through packages lock and latch and on
//	                 the store directly: create-only latches, NotFound for missing
//	                 latches, DC and XDC scopes, TTL expiry, batched waiting,
//	                 owner-checked release and refresh, strictly increasing fencing
//	                 tokens, lease takeover, keep-alive and its loss signal
//	Validation, IDs  input validation before any I/O; the ids the Java libraries use
//	Processes        exact results across concurrent OS processes (Harness.ProcessEnv)
//	Listing          ListLocks, ListLatches and DeleteLatch, when the store implements
//	                 driver.LockLister, driver.LatchLister and driver.LatchDeleter
//	                 (found by type assertion on a store Harness.Open returns)
//	LockBatch        RefreshLocks and InspectLocks, when the store implements
//	                 driver.LockBatcher: each lock's outcome that of the single op
//	                 (held, lost to another owner, free, released, lapsed), a batch
//	                 failing validation writes nothing, no lease ends before an end
//	                 a refresh reported
//	LockMove         AcquireLocks and ReleaseLocks, when the store implements
//	                 driver.LockMover: each lock's outcome that of the single op in
//	                 request order (tokens strictly increase, a held lock is never
//	                 taken, a release frees only the owner's lock), a batch failing
//	                 validation writes nothing
//	QueueClaims      ClaimQueuePartitions, when the store implements
//	                 driver.QueueClaimer: each claim's outcome that of the single op
//	                 in order, a batch failing validation writes nothing
//	QueueCommits     CommitQueueOffsets, when the store implements
//	                 driver.QueueCommitter: each commit's outcome that of the single
//	                 op, rewinds against the Floor, a batch failing validation writes
//	                 nothing
//	QueueReads       ReadQueues, through driver.QueueBatchReader when the store
//	                 implements it and through driver.ReadQueues' loop: each read's
//	                 result that of ReadQueue (floors, holes, tombstones, empty
//	                 partitions, Max, heads beyond what the store saw), bad input
//	                 and an unknown queue failing the batch
//	Registers        driver.RegisterStore: create at generation 0, Conflict (returning the stored register, writing
//	                 nothing) at any other generation, values byte-exact up to
//	                 driver.MaxRegisterValue, DC and XDC addressing, independence of
//	                 the lock and latch of the same key, one winner per generation
//	                 among racing swaps, ReadRegisters in key order, validation
//	                 before any I/O
//	Election         package election: never two leaders (goroutines and OS
//	                 processes), tokens strictly increase, Proclaim visible to
//	                 Leader, a stale leader's Proclaim refused and writing nothing,
//	                 Resign handing over in arrival order, observers seeing every
//	                 leader in order, 1,000 observers reading in one batched pair
//	RWLock           package rwlock: never a writer beside a reader nor two
//	                 writers (goroutines and processes), readers overlap, writer tokens strictly increase, a
//	                 writer is not starved by a stream of readers, a downgrade leaves
//	                 no gap
//	Queue            the driver.QueueStore contract (Queue/Spec, Queue/Append, ...),
//	                 package queue on top of it (Queue/Front) and its exactly-once
//	                 guarantees across owners (Queue/AcrossOwners)
//	Semaphore        package semaphore: never more than N permits granted
//	                 (goroutines, OS processes, under a shrink), tokens strictly
//	                 increasing per slot, all-or-nothing without deadlock, a
//	                 crashed holder's permits back after the lease
//
// A part runs alone by its name: `go test -run TestConformance/Queue/Front` runs the
// cases over package queue only.
//
// A new back end's test file (see also the example of Run):
//
//	func TestMain(m *testing.M) {
//		// In a child process of the multi-process cases: run its part and exit.
//		drivertest.ChildMain(func(ctx context.Context) (driver.Store, error) {
//			return mystore.Open(ctx, os.Getenv("MYSTORE_TEST_PATH"))
//		})
//		os.Exit(m.Run())
//	}
//
//	func TestConformance(t *testing.T) {
//		path := filepath.Join(t.TempDir(), "test.db")
//		drivertest.Run(t, drivertest.Harness{
//			Open: func(t *testing.T) driver.Store {
//				s, err := mystore.Open(context.Background(), path)
//				if err != nil {
//					t.Fatal(err)
//				}
//				return s
//			},
//			ProcessEnv: func(t *testing.T) []string { return []string{"MYSTORE_TEST_PATH=" + path} },
//		})
//	}
//
// A store that lives in one process leaves ProcessEnv nil and needs no ChildMain.
// [Bench] and [Timed] are the benchmarks a store's tests run beside their own.
//
// The suite uses unique names for everything it writes, so it can run against a shared,
// long-lived server. Timing is never asserted; TTL cases sleep just past short leases.
package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync/driver"
)

// Harness tells the suite how to reach the store under test.
type Harness struct {
	// Open returns a store for one test. Stores returned by different calls share state
	// (the same file, server or table), as the processes of an application share it;
	// the suite closes each one when its test ends.
	Open func(t *testing.T) driver.Store
	// OpenOwn, when set, returns a store the test may close without affecting other
	// tests (for a harness whose Open shares one store and ignores Close). Defaults to
	// Open.
	OpenOwn func(t *testing.T) driver.Store
	// ProcessEnv, when set, returns the environment (NAME=value) a child process needs
	// to open the same store through the function passed to ChildMain; the suite then
	// runs its multi-process cases. Leave it nil for a store that lives in one process.
	ProcessEnv func(t *testing.T) []string
	// Holes reports that the store reserves queue sequence numbers before it writes
	// their events (so a reserved seq may be unwritten, and AbortQueueSeq may tombstone
	// it).
	Holes bool
	// ReserveQueueSeqs, when set (a store with Holes), reserves n seqs of partition p
	// of queue name on s and writes none of them, as a producer that died after
	// reserving leaves them, and returns the first. The QueueReads part reads over
	// such holes and over their tombstones.
	ReserveQueueSeqs func(ctx context.Context, s driver.Store, name string, p, n int) (uint64, error)
	// PollInterval is the latch watcher's interval in the suite (50ms if zero).
	PollInterval time.Duration
	// Farm and OtherFarm are the farm ids the suite uses ("dc1" and "dc2" if empty).
	Farm, OtherFarm string
	// SkipPrimitives leaves out the parts of the primitives built only on locks and
	// registers (Election, RWLock, Semaphore), for a second harness on a back end whose
	// first harness runs them: over another connection (TLS, Kerberos) the store
	// operations they use are checked by the Lock and Registers parts, which still run,
	// and the primitives' own logic is the same code. A store's first harness never
	// sets it.
	SkipPrimitives bool
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

// Run runs the whole suite, each part a subtest (see the package documentation).
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
	t.Run("Listing", func(t *testing.T) {
		s, ok := h.open(t).(listingStore)
		if !ok {
			t.Skip("store does not implement driver.LockLister, driver.LatchLister and driver.LatchDeleter")
		}
		runListing(t, s)
	})
	t.Run("LockBatch", func(t *testing.T) {
		s := h.open(t)
		b, ok := s.(driver.LockBatcher)
		if !ok {
			t.Skip("store does not implement driver.LockBatcher")
		}
		runLockBatch(t, h, s, b)
	})
	t.Run("LockMove", func(t *testing.T) {
		s := h.open(t)
		b, ok := s.(driver.LockMover)
		if !ok {
			t.Skip("store does not implement driver.LockMover")
		}
		runLockMove(t, h, s, b)
	})
	t.Run("QueueClaims", func(t *testing.T) {
		s := h.open(t)
		b, ok := s.(driver.QueueClaimer)
		if !ok {
			t.Skip("store does not implement driver.QueueClaimer")
		}
		runQueueClaims(t, s, b)
	})
	t.Run("QueueCommits", func(t *testing.T) {
		s := h.open(t)
		b, ok := s.(driver.QueueCommitter)
		if !ok {
			t.Skip("store does not implement driver.QueueCommitter")
		}
		runQueueCommits(t, h, s, b)
	})
	t.Run("QueueReads", func(t *testing.T) { runQueueReads(t, h) })
	t.Run("Registers", func(t *testing.T) { runRegisters(t, h) })
	t.Run("Queue", func(t *testing.T) { runQueue(t, h) })
	if h.SkipPrimitives {
		return
	}
	t.Run("Election", func(t *testing.T) { runElection(t, h) })
	t.Run("RWLock", func(t *testing.T) { runRWLock(t, h) })
	t.Run("Semaphore", func(t *testing.T) { runSemaphore(t, h) })
}

// unique returns a name no earlier run of the suite has used, at most 53 bytes.
func unique(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	base := t.Name()
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[i+1:]
	}
	if len(base) > 40 {
		base = base[:40]
	}
	return base + "-" + hex.EncodeToString(b[:])
}

// quiet discards the logs of the managers the suite makes: injected faults are expected.
var quiet = slog.New(slog.DiscardHandler)

// client is the client id the suite writes under.
const client = "drivertest"

// open returns a store from Open, closed when the test ends.
func (h Harness) open(t *testing.T) driver.Store {
	t.Helper()
	s := h.Open(t)
	t.Cleanup(func() { s.Close() })
	return s
}

// noLeaks checks, when the test ends and after the stores it opened are closed, that
// the test left no goroutine behind. Call it before opening anything.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}
