package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/memory"
)

// The loop fallback of driver.CommitQueueOffsets (a store without QueueCommitter, here
// memory) keeps the capability's contract: validation and an unknown queue fail the
// batch as a whole, writing nothing; otherwise each result is CommitQueueOffset's.
func TestCommitQueueOffsetsFallback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	if _, ok := any(s).(driver.QueueCommitter); ok {
		t.Skip("memory implements QueueCommitter: this tests the fallback")
	}
	spec := driver.QueueSpec{Name: "fallback", Partitions: 2, Groups: []string{"g"}}
	if err := s.CreateQueue(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimQueuePartition(ctx, "fallback", "g", 0, 5); err != nil {
		t.Fatal(err)
	}
	commits := []driver.QueueCommit{{P: 0, Off: driver.QueueOffset{Token: 5, Next: 1, Version: 1}}, {P: 1, Off: driver.QueueOffset{Token: 9, Next: 1, Version: 1}}}
	res, err := driver.CommitQueueOffsets(ctx, s, "none", "g", commits)
	if dcsync.CodeOf(err) != dcsync.NotFound || res != nil {
		t.Fatalf("unknown queue: %v, %v; want NotFound for the batch", res, err)
	}
	if _, err := driver.CommitQueueOffsets(ctx, s, "fallback", "g", append(commits, commits[0])); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("a partition twice: %v, want InvalidArgument", err)
	}
	offs, err := s.ReadQueueOffsets(ctx, "fallback", "g", []int{0})
	if err != nil || offs[0].Next != 0 {
		t.Fatalf("after the refused batches partition 0 is %+v, %v; want untouched", offs, err)
	}
	res, err = driver.CommitQueueOffsets(ctx, s, "fallback", "g", commits)
	if err != nil || len(res) != 2 || res[0] != nil || dcsync.CodeOf(res[1]) != dcsync.LockLost {
		t.Fatalf("batch: %v, %v; want [nil, LockLost]", res, err)
	}
}
