package drivertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// The QueueCommits part: driver.QueueCommitter, on the stores that implement it. Each
// commit's outcome in a batch is exactly that of CommitQueueOffset applied alone, one
// after the other, on a twin queue set up the same way (applied; nil for the offset
// already stored; LockLost for a stale Version, another token, a partition never
// claimed), each record independent of the others, also where the store's memory of
// the stored offsets is out of date (written through another store); a rewind in a
// batch is refused below the Floor and applied, holding back later trims, at or above
// it; a batch failing validation, or naming an unknown queue, writes nothing.

// commitSetup creates a queue of 8 partitions read by group "g" and writes their
// offsets, some through s (which may remember them) and some through other (behind
// s's back), as commitBatch's comments say.
func commitSetup(t *testing.T, ctx context.Context, s, other driver.Store) driver.QueueSpec {
	t.Helper()
	spec := create(t, ctx, s, 8, "g")
	marks, err := driver.EncodeQueueMarks(4, []driver.QueueMark{{Seq: 6, Acked: true}})
	must(t, err, "EncodeQueueMarks")
	claim := func(st driver.Store, p int, token uint64) {
		t.Helper()
		_, err := st.ClaimQueuePartition(ctx, spec.Name, "g", p, token)
		must(t, err, fmt.Sprintf("ClaimQueuePartition %d token %d", p, token))
	}
	commit := func(st driver.Store, p int, off driver.QueueOffset) {
		t.Helper()
		must(t, st.CommitQueueOffset(ctx, spec.Name, "g", p, off), fmt.Sprintf("CommitQueueOffset %d %+v", p, off))
	}
	for _, p := range []int{0, 1, 2, 3, 5, 6, 7} {
		claim(s, p, 5)
	}
	commit(s, 0, driver.QueueOffset{Token: 5, Next: 3, Held: true, Version: 2})
	commit(s, 1, driver.QueueOffset{Token: 5, Next: 4, Attempts: 2, Held: true, Version: 3, Marks: marks})
	commit(s, 2, driver.QueueOffset{Token: 5, Next: 6, Held: true, Version: 4})
	commit(s, 3, driver.QueueOffset{Token: 5, Next: 2, Held: true, Version: 1})
	claim(s, 3, 9)
	for _, p := range []int{5, 6, 7} {
		commit(s, p, driver.QueueOffset{Token: 5, Next: 2, Held: true, Version: 1})
	}
	commit(other, 5, driver.QueueOffset{Token: 5, Next: 3, Held: true, Version: 2})
	commit(other, 6, driver.QueueOffset{Token: 5, Next: 8, Held: true, Version: 6})
	claim(other, 7, 7)
	return spec
}

// commitBatch is the batch of the cases, on commitSetup's offsets.
func commitBatch(t *testing.T) []driver.QueueCommit {
	marks, err := driver.EncodeQueueMarks(4, []driver.QueueMark{{Seq: 6, Acked: true}})
	must(t, err, "EncodeQueueMarks")
	return []driver.QueueCommit{
		{P: 0, Off: driver.QueueOffset{Token: 5, Next: 4, Held: true, Version: 3}},                            // applied
		{P: 1, Off: driver.QueueOffset{Token: 5, Next: 4, Attempts: 2, Held: true, Version: 3, Marks: marks}}, // already stored: nil
		{P: 2, Off: driver.QueueOffset{Token: 5, Next: 7, Held: true, Version: 3}},                            // stale Version 3 < 4: LockLost
		{P: 3, Off: driver.QueueOffset{Token: 5, Next: 3, Held: true, Version: 2}},                            // token 9 owns it: LockLost
		{P: 4, Off: driver.QueueOffset{Token: 5, Next: 1, Held: true, Version: 1}},                            // never claimed: LockLost
		{P: 5, Off: driver.QueueOffset{Token: 5, Next: 4, Held: true, Version: 3}},                            // s remembers V1, V2 stored: applied
		{P: 6, Off: driver.QueueOffset{Token: 5, Next: 4, Held: true, Version: 3}},                            // s remembers V1, V6 stored: LockLost
		{P: 7, Off: driver.QueueOffset{Token: 5, Next: 3, Held: true, Version: 2}},                            // s remembers token 5, 7 stored: LockLost
	}
}

func runQueueCommits(t *testing.T, h Harness, s driver.Store, b driver.QueueCommitter) {
	t.Run("CommitIsTheSingleOp", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		other := h.open(t)
		batched, single := commitSetup(t, ctx, s, other), commitSetup(t, ctx, s, other)
		batch := commitBatch(t)
		ps := make([]int, len(batch))
		for i, c := range batch {
			ps[i] = c.P
		}
		for _, what := range []string{"the batch", "the same batch again"} {
			res, err := b.CommitQueueOffsets(ctx, batched.Name, "g", batch)
			must(t, err, "CommitQueueOffsets: "+what)
			if len(res) != len(batch) {
				t.Fatalf("%s: CommitQueueOffsets returned %d results for %d commits", what, len(res), len(batch))
			}
			for i, c := range batch {
				err := s.CommitQueueOffset(ctx, single.Name, "g", c.P, c.Off)
				if dcsync.CodeOf(err) != dcsync.CodeOf(res[i]) {
					t.Fatalf("%s: commit %d (partition %d, %+v): batch %v; single op %v", what, i, c.P, c.Off, res[i], err)
				}
			}
			// The outcomes the contract names, beside their equality with the single op's.
			const ok dcsync.Code = 0 // the code of a nil error
			applied := []dcsync.Code{ok, ok, dcsync.LockLost, dcsync.LockLost, dcsync.LockLost, ok, dcsync.LockLost, dcsync.LockLost}
			for i, code := range applied {
				wantCode(t, res[i], code, fmt.Sprintf("%s: commit %d (partition %d, %+v)", what, i, batch[i].P, batch[i].Off))
			}
			a, err := s.ReadQueueOffsets(ctx, batched.Name, "g", ps)
			must(t, err, "ReadQueueOffsets")
			z, err := s.ReadQueueOffsets(ctx, single.Name, "g", ps)
			must(t, err, "ReadQueueOffsets")
			for i, p := range ps {
				if a[i] != z[i] {
					t.Fatalf("%s: partition %d after the batch: %+v; after the single ops: %+v", what, p, a[i], z[i])
				}
				if (applied[i] == ok) != (a[i] == batch[i].Off) {
					t.Fatalf("%s: partition %d holds %+v after the commit %+v with outcome %v", what, p, a[i], batch[i].Off, res[i])
				}
			}
		}
		for _, none := range [][]driver.QueueCommit{nil, {}} {
			res, err := b.CommitQueueOffsets(ctx, batched.Name, "g", none)
			must(t, err, "CommitQueueOffsets of no commit")
			if len(res) != 0 {
				t.Fatalf("CommitQueueOffsets of no commit returned %d results", len(res))
			}
		}
	})

	// A rewind in a batch: refused with InvalidArgument below the Floor, writing
	// nothing of its record; stored at or above it, and then held back from the trims;
	// the other records of the batch applied.
	t.Run("RewindAgainstTheFloor", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 3, "g")
		var evs []driver.QueueEvent
		for i := range 10 {
			evs = append(evs, driver.QueueEvent{Partition: 0, Payload: []byte{byte(i)}}, driver.QueueEvent{Partition: 1, Payload: []byte{byte(i)}})
		}
		_, err := s.AppendQueue(ctx, spec.Name, evs)
		must(t, err, "AppendQueue")
		for p := range 3 {
			_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", p, 1)
			must(t, err, "ClaimQueuePartition")
		}
		at8 := driver.QueueOffset{Token: 1, Next: 8, Held: true, Version: 1}
		for p := range 2 {
			must(t, s.CommitQueueOffset(ctx, spec.Name, "g", p, at8), "CommitQueueOffset Next 8")
			must(t, s.TrimQueue(ctx, spec.Name, p, 6), "TrimQueue below 6")
			if f := bounds(t, ctx, s, spec.Name, p).Floor; f != 6 {
				t.Fatalf("partition %d: floor %d after a trim below 6 with the group at 8, want 6", p, f)
			}
		}
		batch := []driver.QueueCommit{
			{P: 0, Off: driver.QueueOffset{Token: 1, Next: 5, Held: true, Version: 2}}, // below the floor 6
			{P: 1, Off: driver.QueueOffset{Token: 1, Next: 7, Held: true, Version: 2}}, // above it
			{P: 2, Off: driver.QueueOffset{Token: 1, Held: true, Version: 1}},
		}
		res, err := b.CommitQueueOffsets(ctx, spec.Name, "g", batch)
		must(t, err, "CommitQueueOffsets")
		wantCode(t, res[0], dcsync.InvalidArgument, "rewind below the floor in a batch: from 8 to 5, floor 6")
		must(t, res[1], "rewind above the floor in a batch: from 8 to 7, floor 6")
		must(t, res[2], "a commit beside the rewinds")
		offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0, 1, 2})
		must(t, err, "ReadQueueOffsets")
		if offs[0] != at8 || offs[1] != batch[1].Off || offs[2] != batch[2].Off {
			t.Fatalf("after the batch of rewinds: offsets %+v, want %+v (the refused rewind wrote nothing), %+v, %+v", offs, at8, batch[1].Off, batch[2].Off)
		}
		must(t, s.TrimQueue(ctx, spec.Name, 1, 10), "TrimQueue below 10 after the rewind to 7")
		if f := bounds(t, ctx, s, spec.Name, 1).Floor; f != 7 {
			t.Fatalf("a trim after the batch's rewind to 7 raised the floor to %d, want 7", f)
		}
		es, _ := readAll(t, ctx, s, spec.Name, 1, 7)
		if len(es) != 3 || es[0].Seq != 7 || es[0].Payload[0] != 7 {
			t.Fatalf("entries from the rewound offset 7: %+v, want seqs 7 to 9", es)
		}
	})

	// A batch with an invalid commit, of an empty group or of an unknown queue fails as
	// a whole, writing nothing.
	t.Run("ValidationFailsTheBatch", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 2, "g")
		_, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 3)
		must(t, err, "ClaimQueuePartition")
		good := driver.QueueCommit{P: 0, Off: driver.QueueOffset{Token: 3, Next: 1, Held: true, Version: 1}}
		bads := map[string]driver.QueueCommit{
			"a partition twice":     {P: 0, Off: driver.QueueOffset{Token: 3, Next: 2, Held: true, Version: 2}},
			"a negative partition":  {P: -1, Off: good.Off},
			"a partition too large": {P: driver.MaxQueuePartitions + driver.MaxQueueGroups, Off: good.Off},
			"negative attempts":     {P: 1, Off: driver.QueueOffset{Token: 3, Attempts: -1, Version: 1}},
			"marks not encoded":     {P: 1, Off: driver.QueueOffset{Token: 3, Version: 1, Marks: "\xff\xff\xff"}},
		}
		for what, bad := range bads {
			res, err := b.CommitQueueOffsets(ctx, spec.Name, "g", []driver.QueueCommit{good, bad})
			wantCode(t, err, dcsync.InvalidArgument, "CommitQueueOffsets with "+what)
			if res != nil {
				t.Fatalf("CommitQueueOffsets with %s returned results beside its error", what)
			}
		}
		_, err = b.CommitQueueOffsets(ctx, spec.Name, "", []driver.QueueCommit{good})
		wantCode(t, err, dcsync.InvalidArgument, "CommitQueueOffsets of an empty group")
		_, err = b.CommitQueueOffsets(ctx, unique(t)+"-none", "g", []driver.QueueCommit{good})
		wantCode(t, err, dcsync.NotFound, "CommitQueueOffsets of an unknown queue")
		offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
		must(t, err, "ReadQueueOffsets")
		if offs[0] != (driver.QueueOffset{Token: 3}) {
			t.Fatalf("a batch that failed validation wrote partition 0: %+v", offs[0])
		}
	})
}
