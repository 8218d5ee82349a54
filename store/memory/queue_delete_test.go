package memory

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver/drivertest"
)

// queueRecords counts what s keeps of queue name, by kind.
func queueRecords(s *Store, name string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[string]int{}
	q, ok := s.qs[name]
	if !ok {
		return n
	}
	n["spec"] = 1
	n["partitions"] = len(q.parts)
	for _, p := range q.parts {
		n["entries"] += len(p.entries)
	}
	n["offsets"] = len(q.offsets)
	n["ids"] = len(q.ids) + len(q.idOrder)
	return n
}

// TestDeleteQueueLeavesNoRecord counts the store's records of a queue holding every
// kind before and after DeleteQueue.
func TestDeleteQueueLeavesNoRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := New()
	drivertest.PopulateQueue(t, ctx, s, "q")
	drivertest.PopulateQueue(t, ctx, s, "other")
	before, other := queueRecords(s, "q"), queueRecords(s, "other")
	for _, k := range []string{"spec", "partitions", "entries", "offsets", "ids"} {
		if before[k] == 0 {
			t.Fatalf("PopulateQueue wrote no %s: %v", k, before)
		}
	}
	if err := s.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if after := queueRecords(s, "q"); len(after) != 0 {
		t.Fatalf("records left after DeleteQueue: %v (before: %v)", after, before)
	}
	if got := queueRecords(s, "other"); len(got) != len(other) {
		t.Fatalf("another queue's records changed: %v, want %v", got, other)
	}
}
