package aerospike_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/aerospike"
)

// queueRecords counts the records of a queue of spec that exist, by kind, from their
// keys (aerospike.QueueRecordKeys), with one batch exists per kind.
func queueRecords(t *testing.T, c *as.Client, s *aerospike.Store, spec driver.QueueSpec, heads []uint64) map[string]int {
	t.Helper()
	n := map[string]int{}
	for kind, keys := range aerospike.QueueRecordKeys(s, spec, heads, drivertest.PopulatedIDs(spec)) {
		found, err := c.BatchExists(nil, keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, ok := range found {
			if ok {
				n[kind]++
			}
		}
	}
	return n
}

// TestDeleteQueueLeavesNoRecord counts the records of a queue holding every kind
// before and after DeleteQueue.
func TestDeleteQueueLeavesNoRecord(t *testing.T) {
	addr := realServer(t)
	s := queueStore(t, addr)
	c := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name, otherName := unique("del"), unique("del")
	spec := drivertest.PopulateQueue(t, ctx, s, name)
	otherSpec := drivertest.PopulateQueue(t, ctx, s, otherName)
	defer s.DeleteQueue(context.Background(), otherName)
	ps := make([]int, spec.StoragePartitions())
	for p := range ps {
		ps[p] = p
	}
	b, err := s.QueueBounds(ctx, name, ps)
	must(t, err, "QueueBounds")
	heads := make([]uint64, len(b))
	for p := range b {
		heads[p] = b[p].Head
	}
	before, other := queueRecords(t, c, s, spec, heads), queueRecords(t, c, s, otherSpec, heads)
	for _, k := range []string{"spec", "head", "entry", "offset", "id"} {
		if before[k] == 0 {
			t.Fatalf("PopulateQueue wrote no %s record: %v", k, before)
		}
	}
	must(t, s.DeleteQueue(ctx, name), "DeleteQueue")
	if after := queueRecords(t, c, s, spec, heads); len(after) != 0 {
		t.Fatalf("records left after DeleteQueue: %v (before: %v)", after, before)
	}
	if got := queueRecords(t, c, s, otherSpec, heads); fmt.Sprint(got) != fmt.Sprint(other) {
		t.Fatalf("another queue's records changed: %v, want %v", got, other)
	}
}
