// Package queuetest is the conformance suite of driver.QueueStore and of package queue
// on top of it. A store's tests call RunStore (the storage contract alone) or Run (that
// and the queue's delivery guarantees) with a Harness that opens the store.
//
// RunStore checks every rule of the QueueStore contract: queue creation and groups,
// validation before any write (read back afterwards), consecutive sequence numbers per
// partition in event order, reads bounded by from, max, Floor and Head, tombstones,
// idempotency ids within the dedup window, fenced claims and commits of offsets, batched
// bounds and offsets, trimming, and exact results under concurrent goroutines and, where
// the store is shared between processes, concurrent OS processes.
//
// The suite gives every queue a unique name, so it can run against a shared,
// long-lived server and table. Timing is never asserted.
package queuetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/suitekit"
)

// QueueTestStore is a store with locks, latches and a queue: what package queue needs.
type QueueTestStore interface {
	driver.Store
	driver.QueueStore
}

// Harness tells the suite how to reach the store under test.
type Harness struct {
	// Open returns a store for one test. Stores returned by different calls share state
	// (the same file, server or table). The suite closes each one when its test ends.
	Open func(t *testing.T) QueueTestStore
	// ProcessEnv, when set, returns the environment (NAME=value) a child process needs
	// to open the same store through the function passed to ChildMain; the suite then
	// runs its multi-process cases. Leave it nil for a store that lives in one process.
	ProcessEnv func(t *testing.T) []string
	// Holes reports that the store reserves sequence numbers before it writes their
	// events (so a reserved seq may be unwritten, and AbortQueueSeq may tombstone it).
	Holes bool
}

// RunStore runs the cases of the storage contract, driver.QueueStore.
func RunStore(t *testing.T, h Harness) {
	t.Run("Spec", func(t *testing.T) { runSpec(t, h) })
	t.Run("Validation", func(t *testing.T) { runValidation(t, h) })
	t.Run("Append", func(t *testing.T) { runAppend(t, h) })
	t.Run("Read", func(t *testing.T) { runRead(t, h) })
	t.Run("Trim", func(t *testing.T) { runTrim(t, h) })
	t.Run("Abort", func(t *testing.T) { runAbort(t, h) })
	t.Run("Dedup", func(t *testing.T) { runDedup(t, h) })
	t.Run("Offsets", func(t *testing.T) { runOffsets(t, h) })
	t.Run("Names", func(t *testing.T) { runNames(t, h) })
	t.Run("Concurrency", func(t *testing.T) { runConcurrency(t, h) })
	t.Run("Processes", func(t *testing.T) {
		if h.ProcessEnv == nil {
			t.Skip("store lives in one process; no multi-process cases")
		}
		runStoreProcesses(t, h)
	})
}

// Run runs RunStore and the cases of package queue on top of the store.
func Run(t *testing.T, h Harness) {
	RunStore(t, h)
	t.Run("Queue", func(t *testing.T) { runFront(t, h) })
	t.Run("AcrossOwners", func(t *testing.T) { runExactlyOnceAcrossOwners(t, h) })
}

// unique returns a queue name no earlier run of the suite has used, at most 64 bytes.
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

func (h Harness) open(t *testing.T) QueueTestStore {
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

// create makes a queue with a unique name, partitions and groups, and returns its spec
// as read back.
func create(t *testing.T, ctx context.Context, s driver.QueueStore, partitions int, groups ...string) driver.QueueSpec {
	t.Helper()
	if len(groups) == 0 {
		groups = []string{"g"}
	}
	spec := driver.QueueSpec{Name: unique(t), Partitions: partitions, Groups: groups}
	must(t, s.CreateQueue(ctx, spec), "CreateQueue "+spec.Name)
	got, err := s.ReadQueueSpec(ctx, spec.Name)
	must(t, err, "ReadQueueSpec")
	return got
}

// bounds reads one partition's bounds.
func bounds(t *testing.T, ctx context.Context, s driver.QueueStore, name string, p int) driver.QueueBounds {
	t.Helper()
	b, err := s.QueueBounds(ctx, name, []int{p})
	must(t, err, "QueueBounds")
	if len(b) != 1 {
		t.Fatalf("QueueBounds of 1 partition returned %d", len(b))
	}
	return b[0]
}

// readAll reads partition p from from to its end, checking that the entries are
// consecutive.
func readAll(t *testing.T, ctx context.Context, s driver.QueueStore, name string, p int, from uint64) ([]driver.QueueEntry, driver.QueueBounds) {
	t.Helper()
	var out []driver.QueueEntry
	var b driver.QueueBounds
	for {
		r, err := s.ReadQueue(ctx, name, p, from, 1000)
		must(t, err, "ReadQueue")
		b = r.QueueBounds
		checkConsecutive(t, r, from)
		out = append(out, r.Entries...)
		if len(r.Entries) == 0 {
			return out, b
		}
		from = r.Entries[len(r.Entries)-1].Seq + 1
	}
}

// checkConsecutive checks a read's entries run from max(from, Floor) without a gap.
func checkConsecutive(t *testing.T, r driver.QueueRead, from uint64) {
	t.Helper()
	start := max(from, r.Floor)
	for i, e := range r.Entries {
		if e.Seq != start+uint64(i) {
			t.Fatalf("ReadQueue from %d (floor %d): entry %d has seq %d, want %d", from, r.Floor, i, e.Seq, start+uint64(i))
		}
	}
	if n := uint64(len(r.Entries)); n > 0 && start+n > r.Head {
		t.Fatalf("ReadQueue returned seqs up to %d, beyond head %d", start+n-1, r.Head)
	}
}
