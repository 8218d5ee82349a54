package hbase

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// TestReviewTrimOfAMarkedQueueIsNotFound (review, issue 15; real HBase): a queue whose
// DeleteQueue set its deletion mark and was cut short reads as deleted to every call
// that reads the spec (DeleteQueue's doc). A consumer's store that has the spec cached
// trims it: the trim reads the spec cell (raiseFloor) and must find no queue
// (NotFound), not a bad spec (Internal: "queue ... bad spec").
func TestReviewTrimOfAMarkedQueueIsNotFound(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 3*time.Minute)
	name := "revtrimdel-" + randHex(6)
	spec := driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{"g"}}
	must(t, s.CreateQueue(ctx, spec), "CreateQueue")
	consumer := openStore(t) // caches the spec
	defer consumer.Close()
	_, err := consumer.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, Payload: []byte("a")}, {Partition: 0, Payload: []byte("b")}})
	must(t, err, "AppendQueue")
	_, err = consumer.ClaimQueuePartition(ctx, name, "g", 0, 1)
	must(t, err, "ClaimQueuePartition")
	must(t, consumer.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 2, Version: 1}), "CommitQueueOffset")
	defer func() {
		s.queue().db = nil
		_ = s.DeleteQueue(context.Background(), name)
	}()

	// A DeleteQueue that dies right after setting its mark.
	_, db, err := s.qready(ctx, "test")
	must(t, err, "qready")
	c := &cutOps{queueOps: db, mode: crashAfter, k: 1}
	s.queue().db = c
	if err := s.DeleteQueue(ctx, name); err == nil {
		t.Fatal("DeleteQueue cut after its mark returned nil")
	}
	s.queue().db = nil
	fresh := openStore(t)
	defer fresh.Close()
	if _, err := fresh.ReadQueueSpec(ctx, name); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("the marked queue: ReadQueueSpec = %v, want NotFound", err)
	}

	err = consumer.TrimQueue(ctx, name, 0, 2)
	if dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("TrimQueue of a queue marked deleted = %v (code %v), want NotFound", err, dcsync.CodeOf(err))
	}
}
