package aerospike_test

import (
	"testing"
)

// TestReviewTrimHeldBackByAGroupAddedMeanwhile (review, issue 15; real server): the
// TrimQueue contract stops the Floor at "every group's" offset "that stand when the
// Floor is raised", a group with no offset being at 0. A group added (AddQueueGroup
// returned) between the trim's read of the spec and offsets and its raise of the
// Floor stands at 0 when the Floor is raised; the trim guard does not cover the spec,
// so the raise lands and the new group's events 0..9 are trimmed.
func TestReviewTrimHeldBackByAGroupAddedMeanwhile(t *testing.T) {
	s := queueStore(t, realServer(t))
	other := queueStore(t, realServer(t))
	ctx := ctxT(t)
	name, ran := trimRace(t, s, "trim-offsets-read", func(name string) {
		_, err := other.AddQueueGroup(ctx, name, "g2")
		must(t, err, "AddQueueGroup inside the trim")
	})
	must(t, s.TrimQueue(ctx, name, 0, 10), "TrimQueue below 10")
	if !ran() {
		t.Fatal("the trim read no offsets")
	}
	offs, err := other.ReadQueueOffsets(ctx, name, "g2", []int{0})
	must(t, err, "ReadQueueOffsets")
	if f := floorOf(t, s, name); f > offs[0].Next {
		t.Fatalf("the trim raised the Floor to %d past group g2's offset %d, which stood (added) before the Floor was raised", f, offs[0].Next)
	}
}
