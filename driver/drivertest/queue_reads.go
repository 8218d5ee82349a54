package drivertest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// The QueueReads part: ReadQueues, through the store's driver.QueueBatchReader when
// it has one ("Batch") and through driver.ReadQueues' loop on the store seen without
// it ("Loop"). Each read's result is exactly ReadQueue's on the same queue, read just
// after: the entries from the Floor for a read from below it, a fully trimmed
// partition, an empty one, a read from at or past the head, Max cutting a read,
// entries appended through another store handle after this one saw the heads, and on
// a store with holes (Harness.ReserveQueueSeqs) a read stopping before a reserved seq
// never written, also at its first seq, and reading an aborted seq's tombstone; and
// results in the order of the reads. Invalid input fails the batch with
// InvalidArgument before any I/O (also for an unknown queue, also with the context
// ended), an unknown queue with NotFound, and no reads return no results.

// singleReads is a store seen without its QueueBatchReader: driver.ReadQueues then
// takes its loop of ReadQueue calls.
type singleReads struct{ driver.QueueStore }

// readsPart is what runQueueReads set up in one partition: its bounds and the seqs it
// holds (a hole is a seq below Head that is in neither list).
type readsPart struct {
	floor, head uint64
	aborted     []uint64
}

// readsSetup creates the queue of the cases and fills its partitions (see want).
func readsSetup(t *testing.T, ctx context.Context, h Harness, s driver.Store) (driver.QueueSpec, map[int]readsPart) {
	t.Helper()
	spec := create(t, ctx, s, 12, "g")
	appendN := func(p, n int) {
		t.Helper()
		evs := make([]driver.QueueEvent, n)
		for i := range evs {
			// Keys, ids and payloads of varied sizes, one empty payload per batch.
			evs[i] = driver.QueueEvent{Partition: p, Key: fmt.Sprintf("k%d", i%3), Payload: bytes.Repeat([]byte{byte(p), byte(i)}, i)}
			if i%2 == 1 {
				evs[i].ID = unique(t)
			}
		}
		_, err := s.AppendQueue(ctx, spec.Name, evs)
		must(t, err, fmt.Sprintf("AppendQueue %d to partition %d", n, p))
	}
	trim := func(p int, below uint64) {
		t.Helper()
		_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", p, 1)
		must(t, err, "ClaimQueuePartition")
		must(t, s.CommitQueueOffset(ctx, spec.Name, "g", p, driver.QueueOffset{Token: 1, Next: below, Version: 1}), "CommitQueueOffset")
		must(t, s.TrimQueue(ctx, spec.Name, p, below), "TrimQueue")
	}
	parts := map[int]readsPart{}
	appendN(0, 10)
	parts[0] = readsPart{head: 10}
	appendN(1, 10)
	trim(1, 4)
	parts[1] = readsPart{floor: 4, head: 10}
	parts[2] = readsPart{} // never appended to
	appendN(3, 5)
	trim(3, 5)
	parts[3] = readsPart{floor: 5, head: 5}
	appendN(4, 30)
	parts[4] = readsPart{head: 30}
	if h.ReserveQueueSeqs != nil {
		reserve := func(p int) uint64 {
			t.Helper()
			seq, err := h.ReserveQueueSeqs(ctx, s, spec.Name, p, 1)
			must(t, err, fmt.Sprintf("ReserveQueueSeqs in partition %d", p))
			return seq
		}
		// Partition 5: 0 1 written, 2 a hole, 3 4 written, 5 aborted, 6 written.
		appendN(5, 2)
		if seq := reserve(5); seq != 2 {
			t.Fatalf("reserved seq %d in partition 5, want 2", seq)
		}
		appendN(5, 2)
		if seq := reserve(5); seq != 5 {
			t.Fatalf("reserved seq %d in partition 5, want 5", seq)
		}
		aborted, err := s.AbortQueueSeq(ctx, spec.Name, 5, 5)
		must(t, err, "AbortQueueSeq")
		if !aborted {
			t.Fatalf("AbortQueueSeq of the reserved seq 5 reported not aborted")
		}
		appendN(5, 1)
		parts[5] = readsPart{head: 7, aborted: []uint64{5}}
		// Partition 6: 0 a hole, 1 2 written.
		if seq := reserve(6); seq != 0 {
			t.Fatalf("reserved seq %d in partition 6, want 0", seq)
		}
		appendN(6, 2)
		parts[6] = readsPart{head: 3}
	} else {
		appendN(5, 7)
		parts[5] = readsPart{head: 7}
		appendN(6, 3)
		parts[6] = readsPart{head: 3}
	}
	for p := 7; p < 12; p++ {
		appendN(p, 3)
		parts[p] = readsPart{head: 3}
	}
	return spec, parts
}

// wantEntries is how many entries a read of part from from, at most limit, returns:
// from max(from, floor), up to limit, the head or the first hole (holes are the seqs
// 2 of partition 5 and 0 of partition 6 on a store with holes).
func wantEntries(h Harness, p int, part readsPart, from uint64, limit int) int {
	start := max(from, part.floor)
	n := 0
	for seq := start; seq < part.head && n < limit; seq++ {
		if h.ReserveQueueSeqs != nil && ((p == 5 && seq == 2) || (p == 6 && seq == 0)) {
			break
		}
		n++
	}
	return n
}

// sameRead fails t unless got is the single ReadQueue's result want.
func sameRead(t *testing.T, what string, got driver.QueueReadResult, want driver.QueueRead) {
	t.Helper()
	if got.Err != nil {
		t.Fatalf("%s: error %v, want ReadQueue's result %+v", what, got.Err, want.QueueBounds)
	}
	if got.QueueBounds != want.QueueBounds || len(got.Entries) != len(want.Entries) {
		t.Fatalf("%s: bounds %+v and %d entries, ReadQueue reads %+v and %d", what, got.QueueBounds, len(got.Entries), want.QueueBounds, len(want.Entries))
	}
	for k, e := range got.Entries {
		w := want.Entries[k]
		if e.Seq != w.Seq || e.Key != w.Key || e.ID != w.ID || e.Aborted != w.Aborted || !bytes.Equal(e.Payload, w.Payload) || !e.At.Equal(w.At) {
			t.Fatalf("%s: entry %d is %+v, ReadQueue reads %+v", what, k, e, w)
		}
	}
}

func runQueueReads(t *testing.T, h Harness) {
	type readsFunc func(ctx context.Context, s driver.Store, name string, reads []driver.QueueReadReq) ([]driver.QueueReadResult, error)
	ways := []struct {
		name string
		read readsFunc
	}{
		{"Batch", func(ctx context.Context, s driver.Store, name string, reads []driver.QueueReadReq) ([]driver.QueueReadResult, error) {
			return s.(driver.QueueBatchReader).ReadQueues(ctx, name, reads)
		}},
		{"Loop", func(ctx context.Context, s driver.Store, name string, reads []driver.QueueReadReq) ([]driver.QueueReadResult, error) {
			return driver.ReadQueues(ctx, singleReads{s}, name, reads)
		}},
	}
	for _, way := range ways {
		t.Run(way.name, func(t *testing.T) {
			s := h.open(t)
			if _, ok := s.(driver.QueueBatchReader); !ok && way.name == "Batch" {
				t.Skip("store does not implement driver.QueueBatchReader")
			}
			ctx := ctxT(t, 2*time.Minute)
			spec, parts := readsSetup(t, ctx, h, s)
			check := func(what string, reads []driver.QueueReadReq) {
				t.Helper()
				got, err := way.read(ctx, s, spec.Name, reads)
				must(t, err, what)
				if len(got) != len(reads) {
					t.Fatalf("%s: %d results for %d reads", what, len(got), len(reads))
				}
				for i, r := range reads {
					single, err := s.ReadQueue(ctx, spec.Name, r.P, r.From, r.Max)
					must(t, err, "ReadQueue")
					desc := fmt.Sprintf("%s: read %d (partition %d from %d max %d)", what, i, r.P, r.From, r.Max)
					sameRead(t, desc, got[i], single)
					part := parts[r.P]
					if got[i].Head != part.head || got[i].Floor != part.floor {
						t.Fatalf("%s: bounds %+v, want head %d floor %d", desc, got[i].QueueBounds, part.head, part.floor)
					}
					if n := wantEntries(h, r.P, part, r.From, r.Max); len(got[i].Entries) != n {
						t.Fatalf("%s: %d entries, want %d", desc, len(got[i].Entries), n)
					}
					for k, e := range got[i].Entries {
						aborted := false
						for _, a := range part.aborted {
							aborted = aborted || a == e.Seq
						}
						if e.Seq != max(r.From, part.floor)+uint64(k) || e.Aborted != aborted {
							t.Fatalf("%s: entry %d is seq %d aborted %t, want seq %d aborted %t", desc, k, e.Seq, e.Aborted, max(r.From, part.floor)+uint64(k), aborted)
						}
					}
				}
			}
			all := func(from uint64, limit int) []driver.QueueReadReq {
				var reads []driver.QueueReadReq
				for p := 11; p >= 0; p-- { // not in partition order: result i is read i's
					reads = append(reads, driver.QueueReadReq{P: p, From: from, Max: limit})
				}
				return reads
			}
			check("every partition from 0", all(0, 100))
			check("every partition from 1, max 2", all(1, 2))
			check("every partition from 3, max 1", all(3, 1))
			check("max and floors", []driver.QueueReadReq{
				{P: 0, From: 0, Max: 3}, {P: 4, From: 7, Max: 10}, {P: 1, From: 2, Max: 3}, {P: 5, From: 3, Max: 2},
				{P: 3, From: 0, Max: 5}, {P: 2, From: 0, Max: 1}, {P: 6, From: 1, Max: 10}, {P: 7, From: 2, Max: 1},
			})
			check("at and past the heads", []driver.QueueReadReq{
				{P: 0, From: 25, Max: 5}, {P: 4, From: 30, Max: 5}, {P: 1, From: 10, Max: 5}, {P: 3, From: 4, Max: 5},
				{P: 5, From: 2, Max: 5}, {P: 6, From: 0, Max: 5},
			})
			check("one read", []driver.QueueReadReq{{P: 4, From: 29, Max: driver.MaxQueueBatch}})
			// Appends through another handle, after s saw the heads: the reads find them.
			other := h.open(t)
			for _, p := range []int{4, 2, 9} {
				_, err := other.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Partition: p, Payload: []byte("a")}, {Partition: p, Payload: []byte("b")}})
				must(t, err, "AppendQueue through another store")
				part := parts[p]
				part.head += 2
				parts[p] = part
			}
			check("appended elsewhere", []driver.QueueReadReq{{P: 4, From: 28, Max: 100}, {P: 2, From: 0, Max: 100}, {P: 9, From: 0, Max: 4}, {P: 0, From: 0, Max: 100}})

			// No reads: no results, nothing read (an unknown queue too).
			got, err := way.read(ctx, s, unique(t), nil)
			if err != nil || len(got) != 0 {
				t.Fatalf("no reads: %v, %v; want no results and no error", got, err)
			}
			// An unknown queue fails the batch.
			got, err = way.read(ctx, s, unique(t), []driver.QueueReadReq{{P: 0, Max: 1}, {P: 1, Max: 1}})
			wantCode(t, err, dcsync.NotFound, "ReadQueues of an unknown queue")
			if got != nil {
				t.Fatalf("ReadQueues of an unknown queue returned results %v", got)
			}
			// Invalid input fails the batch before any I/O: on an unknown queue, with
			// the context ended, it is still InvalidArgument.
			ended, cancel := context.WithCancel(ctx)
			cancel()
			for _, bad := range []struct {
				what  string
				name  string
				reads []driver.QueueReadReq
			}{
				{"empty queue name", "", []driver.QueueReadReq{{P: 0, Max: 1}}},
				{"negative partition", spec.Name, []driver.QueueReadReq{{P: 0, Max: 1}, {P: -1, Max: 1}}},
				{"partition past the bound", spec.Name, []driver.QueueReadReq{{P: driver.MaxQueuePartitions + driver.MaxQueueGroups, Max: 1}}},
				{"max 0", spec.Name, []driver.QueueReadReq{{P: 0, Max: 1}, {P: 1, Max: 0}}},
				{"max past MaxQueueBatch", spec.Name, []driver.QueueReadReq{{P: 1, Max: driver.MaxQueueBatch + 1}}},
				{"a partition twice", spec.Name, []driver.QueueReadReq{{P: 1, Max: 1}, {P: 2, Max: 1}, {P: 1, From: 3, Max: 1}}},
			} {
				for _, c := range []struct {
					ctx  context.Context
					name string
				}{{ctx, bad.name}, {ended, bad.name}, {ctx, unique(t)}} {
					if bad.name == "" {
						c.name = ""
					}
					got, err := way.read(c.ctx, s, c.name, bad.reads)
					wantCode(t, err, dcsync.InvalidArgument, bad.what)
					if got != nil {
						t.Fatalf("%s: results %v with the error", bad.what, got)
					}
				}
			}
		})
	}
}
