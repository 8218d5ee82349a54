package queue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// The invariants that the consumer's files name at their top and that no other test
// checked: each of these tests fails when its invariant is broken.

// failing is a store whose offset writes fail while failing is set: with a
// Connection error (the write's outcome unknown), or with LockLost when fenced (as
// when another owner's token is stored).
type failing struct {
	*memory.Store
	failing atomic.Bool
	fenced  atomic.Bool
}

func (s *failing) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	switch {
	case s.fenced.Load():
		return driver.Errorf(dcsync.LockLost, "test", "fenced")
	case s.failing.Load():
		return driver.Errorf(dcsync.Connection, "test", "offset write failed")
	}
	return s.Store.CommitQueueOffset(ctx, name, group, p, off)
}

// newFailing returns a queue of one partition and group "g" on a failing store, with
// one event enqueued, and a consumer of it.
func newFailing(t *testing.T, ctx context.Context, opts ...queue.Option) (*failing, *queue.Queue, *queue.Consumer) {
	t.Helper()
	s := &failing{Store: memory.New()}
	t.Cleanup(func() { s.Store.Close() })
	opts = append([]queue.Option{queue.WithLease(testLease), queue.WithPollInterval(20 * time.Millisecond)}, opts...)
	q, err := queue.Create(ctx, s, queue.Spec{Name: "f", Partitions: 1, Groups: []string{"g"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, queue.Event{Payload: []byte("e")}); err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return s, q, c
}

// Close records the partition's whole state before it lets the lock go: a delivery in
// flight counts as a failed attempt and Held is cleared (rebalance.go, releaseAll; retry.go,
// failed).
func TestCloseRecordsDeliveriesInFlightAsFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _, c := newFailing(t, ctx, queue.WithVisibility(time.Hour))
	m, err := c.Receive(ctx, 1)
	if err != nil || len(m) != 1 || m[0].Attempt != 1 {
		t.Fatalf("Receive: %+v %v", m, err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	offs, err := s.ReadQueueOffsets(ctx, "f", "g", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if off := offs[0]; off.Next != 0 || off.Attempts != 1 || off.Held {
		t.Fatalf("offset after Close with a delivery in flight: %+v, want next 0, 1 attempt, not held", off)
	}
}

// An Ack returns nil only once the ack is in the offset record: when the write fails,
// the Ack fails (ack.go).
func TestAckFailsWhenTheWriteFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, q, c := newFailing(t, ctx, queue.WithVisibility(time.Hour))
	m, err := c.Receive(ctx, 1)
	if err != nil || len(m) != 1 {
		t.Fatalf("Receive: %+v %v", m, err)
	}
	s.failing.Store(true)
	if err := c.Ack(ctx, m...); err == nil {
		t.Fatal("Ack whose offset write failed returned nil")
	}
	s.failing.Store(false)
	if lag, err := q.Lag(ctx, "g"); err != nil || lag[0].Next != 0 {
		t.Fatalf("lag %+v (%v), want the offset at 0", lag, err)
	}
}

// An Ack of a nacked delivery, or of a delivery that was delivered again, returns an
// error matching dcsync.ErrLockLost (ack.go, holding).
func TestAckOfANackedOrRedeliveredMessageIsLockLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, c := newFailing(t, ctx, queue.WithVisibility(200*time.Millisecond), queue.WithRetryBackoff(time.Hour, time.Hour))
	first, err := c.Receive(ctx, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("Receive: %+v %v", first, err)
	}
	// Its visibility runs out: it is delivered again, and that delivery is held for an
	// hour (a loaded machine may let its 200 ms pass too: then the next one).
	var again []*queue.Message
	for {
		again, err = c.Receive(ctx, 1)
		if err != nil || len(again) != 1 || again[0].Attempt < 2 {
			t.Fatalf("Receive after the visibility deadline: %+v %v, want attempt 2 or more", again, err)
		}
		err = c.Extend(ctx, again[0], time.Hour)
		if err == nil {
			break
		}
		if !errors.Is(err, dcsync.ErrLockLost) {
			t.Fatal(err)
		}
	}
	if err := c.Ack(ctx, first...); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Ack of a delivery that was delivered again = %v, want an error matching ErrLockLost", err)
	}
	if err := c.Nack(ctx, again[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, again...); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Ack of a nacked delivery = %v, want an error matching ErrLockLost", err)
	}
}

// An owner whose offset write is refused with LockLost drops the partition: it
// delivers its events again only after it took the partition anew, with a greater
// token, and starts from the record (commit.go, put; rebalance.go, drop).
func TestRefusedWriteDropsThePartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _, c := newFailing(t, ctx, queue.WithVisibility(time.Hour))
	m, err := c.Receive(ctx, 1)
	if err != nil || len(m) != 1 {
		t.Fatalf("Receive: %+v %v", m, err)
	}
	s.fenced.Store(true)
	if err := c.Ack(ctx, m...); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Ack whose write was refused = %v, want an error matching ErrLockLost", err)
	}
	s.fenced.Store(false)
	again, err := c.Receive(ctx, 1)
	if err != nil || len(again) != 1 || again[0].Seq != m[0].Seq {
		t.Fatalf("Receive after the refused Ack: %+v %v, want the event again", again, err)
	}
	if again[0].Token <= m[0].Token {
		t.Fatalf("delivered again with token %d after a refused write with token %d, want a greater one", again[0].Token, m[0].Token)
	}
	if err := c.Ack(ctx, again...); err != nil {
		t.Fatal(err)
	}
}

// A key's later event is not handed out while an earlier one is in flight from an
// earlier Receive (deliver.go, collect).
func TestKeyOrderHoldsAcrossReceives(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, q, c := newFailing(t, ctx, queue.WithVisibility(time.Hour))
	if _, err := q.Enqueue(ctx, queue.Event{Key: "k", Payload: []byte("k1")}, queue.Event{Key: "k", Payload: []byte("k2")}); err != nil {
		t.Fatal(err)
	}
	first, err := c.Receive(ctx, 2) // the keyless "e", then k1
	for err == nil && len(first) < 2 {
		var more []*queue.Message
		more, err = c.Receive(ctx, 2-len(first))
		first = append(first, more...)
	}
	if err != nil || len(first) != 2 || string(first[1].Payload) != "k1" {
		t.Fatalf("Receive: %+v %v, want e and k1", first, err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	more, err := c.Receive(rctx, 10)
	rcancel()
	if len(more) > 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with k1 in flight, Receive returned %d messages (%v), want none: k2 waits for k1", len(more), err)
	}
	if err := c.Ack(ctx, first...); err != nil {
		t.Fatal(err)
	}
	next, err := c.Receive(ctx, 10)
	if err != nil || len(next) != 1 || string(next[0].Payload) != "k2" {
		t.Fatalf("Receive after k1's ack: %+v %v, want k2", next, err)
	}
}

// A partition no longer assigned is drained: nothing more is handed out from it, its
// deliveries in flight can still be acked, and once none is in flight it is released
// to its new owner (rebalance.go, rebalance; deliver.go, collect).
func TestDrainingHandsOutNothingAndWaitsForAcks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	opts := []queue.Option{queue.WithLease(testLease), queue.WithPollInterval(20 * time.Millisecond), queue.WithVisibility(time.Hour)}
	q, err := queue.Create(ctx, base, queue.Spec{Name: "dr", Partitions: 2, Groups: []string{"g"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string // two keys of partition 1, which moves to the second member
	for i := 0; len(keys) < 2; i++ {
		if k := string(rune('a' + i)); queue.Partition(k, 2) == 1 {
			keys = append(keys, k)
		}
	}
	if _, err := q.Enqueue(ctx, queue.Event{Key: keys[0], Payload: []byte("A")}, queue.Event{Key: keys[1], Payload: []byte("B")}); err != nil {
		t.Fatal(err)
	}
	c1, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(context.Background())
	a, err := c1.Receive(ctx, 1)
	if err != nil || len(a) != 1 || string(a[0].Payload) != "A" {
		t.Fatalf("c1: %+v %v, want A", a, err)
	}
	c2, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(context.Background())
	for ps := c1.Partitions(); len(ps) != 1 || ps[0] != 0; ps = c1.Partitions() {
		if ctx.Err() != nil {
			t.Fatalf("c1 still owns %v", ps)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// c1 drains partition 1: B, buffered, is not handed out by it.
	rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	more, err := c1.Receive(rctx, 10)
	rcancel()
	if len(more) > 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("c1 draining partition 1 returned %d messages (%v), want none", len(more), err)
	}
	if err := c1.Ack(ctx, a...); err != nil {
		t.Fatalf("Ack of A, in flight while its partition drains: %v", err)
	}
	b, err := c2.Receive(ctx, 10)
	if err != nil || len(b) != 1 || string(b[0].Payload) != "B" || b[0].Attempt != 1 {
		t.Fatalf("c2: %+v %v, want B, attempt 1", b, err)
	}
	if err := c2.Ack(ctx, b...); err != nil {
		t.Fatal(err)
	}
}
