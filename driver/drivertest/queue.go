package drivertest

import (
	"context"
	"testing"

	"github.com/dcsync/dcsync/driver"
)

// runQueue runs the queue cases: the storage contract, driver.QueueStore (every rule of
// it: queue creation and groups, validation before any write (read back afterwards),
// consecutive sequence numbers per partition in event order, reads bounded by from, max,
// Floor and Head, tombstones, idempotency ids within the dedup window, fenced claims and
// commits of offsets, batched bounds and offsets, trimming, and exact results under
// concurrent goroutines and processes); then package queue on top of it (Front) and its
// exactly-once guarantees across owners (AcrossOwners).
func runQueue(t *testing.T, h Harness) {
	t.Run("Spec", func(t *testing.T) { runSpec(t, h) })
	t.Run("Validation", func(t *testing.T) { runQueueValidation(t, h) })
	t.Run("Append", func(t *testing.T) { runAppend(t, h) })
	t.Run("Read", func(t *testing.T) { runRead(t, h) })
	t.Run("Trim", func(t *testing.T) { runTrim(t, h) })
	t.Run("TrimHeldBack", func(t *testing.T) { runTrimHeldBack(t, h) })
	t.Run("Abort", func(t *testing.T) { runAbort(t, h) })
	t.Run("Dedup", func(t *testing.T) { runDedup(t, h) })
	t.Run("Offsets", func(t *testing.T) { runOffsets(t, h) })
	t.Run("Names", func(t *testing.T) { runNames(t, h) })
	t.Run("List", func(t *testing.T) { runQueueList(t, h) })
	t.Run("Concurrency", func(t *testing.T) { runConcurrency(t, h) })
	t.Run("Processes", func(t *testing.T) {
		if h.ProcessEnv == nil {
			t.Skip("store lives in one process; no multi-process cases")
		}
		runQueueProcesses(t, h)
	})
	t.Run("Front", func(t *testing.T) { runFront(t, h) })
	t.Run("AcrossOwners", func(t *testing.T) { runExactlyOnceAcrossOwners(t, h) })
	t.Run("Delete", func(t *testing.T) { runQueueDelete(t, h) })
}

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
