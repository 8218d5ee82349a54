package aerospike_test

import (
	"testing"

	"github.com/dcsync/dcsync/driver"
)

// TestReviewTrimDuringDeleteLeavesNothing (review, issue 15; real server): a queue
// deleted (DeleteQueue returned) between a trim's reads and its raise of the floor: the
// queue created again under the name starts empty (heads at 0, floor 0): the trim's
// write does not recreate the old head. (The trim's own error is only logged: the
// trimming store had the queue cached, which the delete's doc leaves undefined.)
func TestReviewTrimDuringDeleteLeavesNothing(t *testing.T) {
	s := queueStore(t, realServer(t))
	other := queueStore(t, realServer(t))
	ctx := ctxT(t)
	var spec driver.QueueSpec
	name, ran := trimRace(t, s, "trim-offsets-read", func(name string) {
		sp, err := other.ReadQueueSpec(ctx, name)
		must(t, err, "ReadQueueSpec")
		spec = sp
		must(t, other.DeleteQueue(ctx, name), "DeleteQueue inside the trim")
	})
	err := s.TrimQueue(ctx, name, 0, 10)
	if !ran() {
		t.Fatal("the trim read no offsets")
	}
	t.Logf("TrimQueue of a queue deleted meanwhile (by another store): %v", err)
	spec.Name = name
	must(t, other.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: spec.Partitions, Groups: spec.Groups, Dedup: spec.Dedup}), "CreateQueue again")
	b, err := other.QueueBounds(ctx, name, []int{0})
	must(t, err, "QueueBounds")
	if b[0] != (driver.QueueBounds{}) {
		t.Fatalf("the queue created again has bounds %+v, want none", b[0])
	}
	_ = other.DeleteQueue(ctx, name)
}
