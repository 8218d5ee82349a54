package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// The QueueClaims part: driver.QueueClaimer, on the stores that implement it. Each
// claim's outcome in a batch is exactly that of ClaimQueuePartition applied in the
// order of the claims (a greater token writes the token only, an equal one nothing, a
// lower one is refused with LockLost and the stored offset); a batch failing validation,
// or naming an unknown queue, writes nothing.

// claimSetup gives partitions 1 and 2 of a new queue of 4 (group "g") an owner each:
// partition 1 token 5 with a committed offset (Next 4, Attempts 2, Held, Version 7,
// marks), partition 2 token 9 with nothing committed; partitions 0 and 3 were never
// claimed.
func claimSetup(t *testing.T, ctx context.Context, s driver.Store) driver.QueueSpec {
	t.Helper()
	spec := create(t, ctx, s, 4, "g")
	marks, err := driver.EncodeQueueMarks(4, []driver.QueueMark{{Seq: 5, Acked: true}})
	must(t, err, "EncodeQueueMarks")
	_, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 1, 5)
	must(t, err, "ClaimQueuePartition")
	must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 1, driver.QueueOffset{Token: 5, Next: 4, Attempts: 2, Held: true, Version: 7, Marks: marks}), "CommitQueueOffset")
	_, err = s.ClaimQueuePartition(ctx, spec.Name, "g", 2, 9)
	must(t, err, "ClaimQueuePartition")
	return spec
}

// claimBatch is the batch of the cases: a first claim, a greater token over a
// committed offset, a lower token, the same claim again (an equal token), and the
// same partition claimed by a greater token then a lower one.
var claimBatch = []driver.QueueClaim{{P: 0, Token: 3}, {P: 1, Token: 6}, {P: 2, Token: 4}, {P: 1, Token: 6}, {P: 3, Token: 8}, {P: 3, Token: 7}}

func runQueueClaims(t *testing.T, s driver.Store, b driver.QueueClaimer) {
	t.Run("ClaimIsTheSingleOp", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		batched, single := claimSetup(t, ctx, s), claimSetup(t, ctx, s)
		res, err := b.ClaimQueuePartitions(ctx, batched.Name, "g", claimBatch)
		must(t, err, "ClaimQueuePartitions")
		if len(res) != len(claimBatch) {
			t.Fatalf("ClaimQueuePartitions returned %d results for %d claims", len(res), len(claimBatch))
		}
		for i, c := range claimBatch {
			off, err := s.ClaimQueuePartition(ctx, single.Name, "g", c.P, c.Token)
			if dcsync.CodeOf(err) != dcsync.CodeOf(res[i].Err) || off != res[i].Offset {
				t.Fatalf("claim %d (partition %d, token %d): batch %+v, %v; single op %+v, %v", i, c.P, c.Token, res[i].Offset, res[i].Err, off, err)
			}
		}
		// The outcomes the contract names, beside their equality with the single op's.
		wantCode(t, res[2].Err, dcsync.LockLost, "a claim of a lower token")
		wantCode(t, res[5].Err, dcsync.LockLost, "a claim of a lower token than an earlier claim of the batch")
		if res[1].Offset.Token != 6 || res[1].Offset.Next != 4 || res[1].Offset.Version != 7 || !res[1].Offset.Held || res[2].Offset.Token != 9 {
			t.Fatalf("claims returned %+v and %+v; want the committed offset with token 6, and the stored token 9", res[1].Offset, res[2].Offset)
		}
		ps := []int{0, 1, 2, 3}
		a, err := s.ReadQueueOffsets(ctx, batched.Name, "g", ps)
		must(t, err, "ReadQueueOffsets")
		z, err := s.ReadQueueOffsets(ctx, single.Name, "g", ps)
		must(t, err, "ReadQueueOffsets")
		for i := range ps {
			if a[i] != z[i] {
				t.Fatalf("partition %d after the batch: %+v; after the single ops: %+v", i, a[i], z[i])
			}
		}
		res, err = b.ClaimQueuePartitions(ctx, batched.Name, "g", nil)
		must(t, err, "ClaimQueuePartitions of no claim")
		if len(res) != 0 {
			t.Fatalf("ClaimQueuePartitions of no claim returned %d results", len(res))
		}
	})

	// A batch with an invalid claim or an unknown queue fails as a whole, writing
	// nothing.
	t.Run("ValidationFailsTheBatch", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		spec := create(t, ctx, s, 2, "g")
		for _, bad := range []driver.QueueClaim{{P: 1, Token: 0}, {P: -1, Token: 3}, {P: 1, Token: 1 << 63}} {
			res, err := b.ClaimQueuePartitions(ctx, spec.Name, "g", []driver.QueueClaim{{P: 0, Token: 3}, bad})
			wantCode(t, err, dcsync.InvalidArgument, "ClaimQueuePartitions with an invalid claim")
			if res != nil {
				t.Fatalf("ClaimQueuePartitions with %+v returned results beside its error", bad)
			}
		}
		_, err := b.ClaimQueuePartitions(ctx, spec.Name, "", []driver.QueueClaim{{P: 0, Token: 3}})
		wantCode(t, err, dcsync.InvalidArgument, "ClaimQueuePartitions of an empty group")
		_, err = b.ClaimQueuePartitions(ctx, unique(t)+"-none", "g", []driver.QueueClaim{{P: 0, Token: 3}})
		wantCode(t, err, dcsync.NotFound, "ClaimQueuePartitions of an unknown queue")
		offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
		must(t, err, "ReadQueueOffsets")
		if offs[0].Token != 0 {
			t.Fatalf("a batch that failed validation claimed partition 0: %+v", offs[0])
		}
	})
}
