package queue_test

// Adversarial review (issue 15): queue.Delete WithForce against a live consumer.

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
)

// FAILS ON MAIN (defect): a consumer of a queue deleted WithForce acks into the new
// queue created under the same name. queue.Delete's doc promises "a consumer of the
// deleted queue can never ack into a new one of the same name" and that its consumers
// get LockLost or NotFound; but the consumer, once its old partition is dropped (its
// ack refused with LockLost, or its renewal failing), re-takes the partition lock
// (free: Delete freed it) with a fresh token and claims the NEW queue's offset record
// with it (rebalance.go, takeMany/adopt: nothing checks that the queue it claims is
// the one it opened), then delivers the new queue's events and its acks are stored. A
// consumer an operator meant to cut off (an old version of the application, a queue
// re-created with another spec) keeps consuming, with its stale spec.
func TestReviewDeletedQueuesConsumerStaysOut(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		s := memory.New()
		defer s.Close()
		deletedQueuesConsumerStaysOut(t, s)
	})
	t.Run("sqlite", func(t *testing.T) {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		deletedQueuesConsumerStaysOut(t, s)
	})
}

func deletedQueuesConsumerStaysOut(t *testing.T, s driver.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := []queue.Option{queue.WithLease(testLease), queue.WithPollInterval(20 * time.Millisecond)}
	spec := queue.Spec{Name: "q", Partitions: 1, Groups: []string{"g"}}
	q, err := queue.Create(ctx, s, spec, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, queue.Event{Payload: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	old := receiveAll(t, ctx, c, 1, false)
	if err := queue.Delete(ctx, s, "q", queue.WithForce()); err != nil {
		t.Fatal(err)
	}
	q2, err := queue.Create(ctx, s, spec, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q2.Enqueue(ctx, queue.Event{Payload: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, old...); err == nil {
		t.Fatal("the ack of the deleted queue's delivery was stored in the new queue")
	}
	// A consumer cut off returns an error (or nothing) here; one bounded wait.
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	ms, err := c.Receive(rctx, 1)
	if err != nil || len(ms) == 0 {
		return
	}
	if err := c.Ack(ctx, ms...); err == nil {
		offs, _ := s.ReadQueueOffsets(ctx, "q", "g", []int{0})
		t.Fatalf("the deleted queue's consumer received %q of the re-created queue and acked it (the new queue's offset is now %+v)", ms[0].Payload, offs[0])
	}
}
