package aerospike_test

import (
	"testing"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/aerospike"
)

// Writes that land late: the proxy holds a write's first try back (the client times out,
// in doubt, and retries), lets the retry and later writes land, then delivers the held
// try. Each test checks that the late try changes nothing (docs/stores/aerospike.md,
// "Writes that land late").

// TestQueueLateCommitCannotRewind is issue 14's defect 1: the first try of a commit of
// Next 5 is held back; its retry lands, then the owner commits Next 9; the held try is
// delivered last. With a filter on the token alone it applied and moved the offset back
// to 5 (the next owner would deliver acked events again); with the version in the
// filter it is filtered out.
func TestQueueLateCommitCannotRewind(t *testing.T) {
	addr := realServer(t)
	proxy := startProxy(t)
	s := queueStore(t, proxy.Addr())
	ctx := ctxT(t)
	spec := newQueue(t, queueStore(t, addr), 1)
	off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	marks, err := dcsync.EncodeQueueMarks(5, []dcsync.QueueMark{{Seq: 7, Acked: true}})
	if err != nil {
		t.Fatal(err)
	}
	first := dcsync.QueueOffset{Token: off.Token, Next: 5, Version: off.Version + 1, Marks: marks}
	proxy.HoldRequests(1, writesTo(aerospike.QueueOffsetSet))
	if err := s.CommitQueueOffset(ctx, spec.Name, "g", 0, first); err != nil {
		t.Fatalf("commit whose first try was held back: %v", err)
	}
	if n := proxy.Held(); n != 1 {
		t.Fatalf("%d requests held, want 1", n)
	}
	next := dcsync.QueueOffset{Token: off.Token, Next: 9, Version: first.Version + 1}
	if err := s.CommitQueueOffset(ctx, spec.Name, "g", 0, next); err != nil {
		t.Fatalf("the owner's next commit: %v", err)
	}
	codes, err := proxy.Deliver()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the late first try was answered with result code %v (27: filtered out)", codes)
	offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if offs[0] != next {
		t.Fatalf("after the late first try of a commit the offset is %+v, want %+v (it moved back)", offs[0], next)
	}
}

// TestQueueLateClaimChangesNothing: the first try of a claim is held back; its retry
// lands and the owner commits (releasing: Held false); the held claim is delivered
// last and changes nothing: its token is not above the stored one. (A claim filtered on
// "stored token <= token" that set Held, as before issue 14, marked the released
// partition held again.)
func TestQueueLateClaimChangesNothing(t *testing.T) {
	addr := realServer(t)
	proxy := startProxy(t)
	s := queueStore(t, proxy.Addr())
	ctx := ctxT(t)
	spec := newQueue(t, queueStore(t, addr), 1)
	proxy.HoldRequests(1, writesTo(aerospike.QueueOffsetSet))
	off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 3)
	if err != nil || off != (dcsync.QueueOffset{Token: 3}) {
		t.Fatalf("claim whose first try was held back = %+v %v", off, err)
	}
	if n := proxy.Held(); n != 1 {
		t.Fatalf("%d requests held, want 1", n)
	}
	if err := s.CommitQueueOffset(ctx, spec.Name, "g", 0, dcsync.QueueOffset{Token: 3, Next: 4, Version: 1}); err != nil {
		t.Fatal(err)
	}
	// An equal-token claim (a retry whose first try landed) returns the stored offset.
	if off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 3); err != nil || off != (dcsync.QueueOffset{Token: 3, Next: 4, Version: 1}) {
		t.Fatalf("claim again with the stored token = %+v %v", off, err)
	}
	codes, err := proxy.Deliver()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the late first try was answered with result code %v", codes)
	offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
	if err != nil || offs[0] != (dcsync.QueueOffset{Token: 3, Next: 4, Version: 1}) {
		t.Fatalf("offset after the late claim = %+v %v", offs, err)
	}
}
