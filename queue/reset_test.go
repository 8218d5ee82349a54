package queue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// resetQueue makes a queue "r" of two partitions and group "g" on s, with 3 keyed
// events in each partition.
func resetQueue(t *testing.T, ctx context.Context, s driver.Store) *queue.Queue {
	t.Helper()
	q, err := queue.Create(ctx, s, queue.Spec{Name: "r", Partitions: 2, Groups: []string{"g"}},
		queue.WithLease(testLease), queue.WithPollInterval(20*time.Millisecond), queue.WithRetention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var evs []queue.Event
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		evs = append(evs, queue.Event{Key: k, Payload: []byte(k)})
	}
	if _, err := q.Enqueue(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	return q
}

// drain receives and acks n messages with a fresh consumer, then closes it.
func drain(t *testing.T, ctx context.Context, q *queue.Queue, n int) []*queue.Message {
	t.Helper()
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var got []*queue.Message
	for len(got) < n {
		ms, err := c.Receive(ctx, n-len(got))
		if err != nil {
			t.Fatalf("receive after %d of %d: %v", len(got), n, err)
		}
		if err := c.Ack(ctx, ms...); err != nil {
			t.Fatal(err)
		}
		got = append(got, ms...)
	}
	return got
}

func nexts(t *testing.T, ctx context.Context, q *queue.Queue) []uint64 {
	t.Helper()
	d, err := q.Describe(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, p := range d.Groups[0].Partitions {
		if !p.Dead {
			out = append(out, p.Next)
		}
	}
	return out
}

// Reset moves every partition's offset (ToEarliest, ToLatest, ToSeq), and a
// consumer then delivers from there; DryRun writes nothing.
func TestResetMovesOffsets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	q := resetQueue(t, ctx, s)
	drain(t, ctx, q, 6)
	before := nexts(t, ctx, q)
	plan, err := q.Reset(ctx, "g", queue.ToEarliest(), queue.DryRun())
	if err != nil || !plan.DryRun || len(plan.Partitions) != 2 || plan.Partitions[0].To != 0 || plan.Partitions[0].Applied {
		t.Fatalf("dry run = %+v, %v", plan, err)
	}
	if got := nexts(t, ctx, q); got[0] != before[0] || got[1] != before[1] {
		t.Fatalf("a dry run moved the offsets from %v to %v", before, got)
	}
	res, err := q.Reset(ctx, "g", queue.ToEarliest())
	if err != nil || !res.Partitions[0].Applied || !res.Partitions[1].Applied {
		t.Fatalf("Reset = %+v, %v", res, err)
	}
	if got := nexts(t, ctx, q); got[0] != 0 || got[1] != 0 {
		t.Fatalf("offsets after ToEarliest = %v, want [0 0]", got)
	}
	if again := drain(t, ctx, q, 6); len(again) != 6 {
		t.Fatalf("redelivered %d, want 6", len(again))
	}
	if _, err := q.Reset(ctx, "g", queue.ToSeq(map[int]uint64{1: 1})); err != nil {
		t.Fatal(err)
	}
	if got := nexts(t, ctx, q); got[0] != before[0] || got[1] != 1 {
		t.Fatalf("offsets after ToSeq{1:1} = %v, want [%d 1]", got, before[0])
	}
	if _, err := q.Reset(ctx, "g", queue.ToLatest()); err != nil {
		t.Fatal(err)
	}
	if got := nexts(t, ctx, q); got[0] != before[0] || got[1] != before[1] {
		t.Fatalf("offsets after ToLatest = %v, want %v", got, before)
	}
	_, err = q.Reset(ctx, "g", queue.ToSeq(map[int]uint64{7: 0}))
	if !errors.Is(err, dcsync.ErrInvalidArgument) {
		t.Fatalf("Reset of partition 7 = %v, want InvalidArgument", err)
	}
	_, err = q.Reset(ctx, "nope", queue.ToLatest())
	if !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("Reset of a missing group = %v, want NotFound", err)
	}
}

// ToTime finds each partition's first event at or after the time.
func TestResetToTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	q := resetQueue(t, ctx, s)
	drain(t, ctx, q, 6)
	res, err := q.Reset(ctx, "g", queue.ToTime(time.Now().Add(-time.Hour)))
	if err != nil || res.Partitions[0].To != 0 || res.Partitions[1].To != 0 {
		t.Fatalf("ToTime(an hour ago) = %+v, %v; want every offset at 0", res, err)
	}
	res, err = q.Reset(ctx, "g", queue.ToTime(time.Now().Add(time.Hour)))
	if err != nil || res.Partitions[0].To != res.Partitions[0].Head || res.Partitions[1].To != res.Partitions[1].Head {
		t.Fatalf("ToTime(in an hour) = %+v, %v; want every offset at its head", res, err)
	}
}

// A reset is refused, writing nothing, while a member slot or a partition lock of the
// group is held; DryRun reports them.
func TestResetRefusedWhileLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	q := resetQueue(t, ctx, s)
	drain(t, ctx, q, 6)
	before := nexts(t, ctx, q)
	// A partition lock held, no member slot (a consumer between join and leave).
	locks, err := lock.New(s, queue.DefaultClient, queue.DefaultFarm, lock.WithTTL(testLease))
	if err != nil {
		t.Fatal(err)
	}
	lk, err := locks.TryAcquire(ctx, "queue:1:r1:gp/1", lock.Level(dcsync.XDC))
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.Reset(ctx, "g", queue.ToEarliest())
	if !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("Reset with partition 1's lock held = %v, want LockUnavailable", err)
	}
	if got := nexts(t, ctx, q); got[0] != before[0] || got[1] != before[1] {
		t.Fatalf("a refused reset moved the offsets from %v to %v", before, got)
	}
	plan, err := q.Reset(ctx, "g", queue.ToEarliest(), queue.DryRun())
	if err != nil || !plan.Live() || plan.Partitions[1].Owner == nil || plan.Partitions[1].Owner.Token != lk.Token() {
		t.Fatalf("dry run = %+v, %v; want partition 1 owned with token %d", plan, err, lk.Token())
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A member slot held, no partition lock (a consumer that joined and owns nothing yet).
	if lk, err = locks.TryAcquire(ctx, "queue:1:r1:gm/0", lock.Level(dcsync.XDC)); err != nil {
		t.Fatal(err)
	}
	_, err = q.Reset(ctx, "g", queue.ToEarliest())
	if !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("Reset with member slot 0 held = %v, want LockUnavailable", err)
	}
	if got := nexts(t, ctx, q); got[0] != before[0] || got[1] != before[1] {
		t.Fatalf("a refused reset moved the offsets from %v to %v", before, got)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A live consumer.
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for len(c.Partitions()) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	_, err = q.Reset(ctx, "g", queue.ToEarliest())
	if !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("Reset with a live consumer = %v, want LockUnavailable", err)
	}
	if got := nexts(t, ctx, q); got[0] != before[0] || got[1] != before[1] {
		t.Fatalf("a refused reset moved the offsets from %v to %v", before, got)
	}
}

// With Force, a live owner's lock is broken and the reset's fresh token fences it: its
// ack of a message delivered before is refused and moves nothing, and it delivers from
// the reset offset once it takes the partition again.
func TestResetFencesTheOwnerItBroke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	q := resetQueue(t, ctx, s)
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var held []*queue.Message
	for len(held) < 6 {
		ms, err := c.Receive(ctx, 6-len(held))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ms...)
	}
	res, err := q.Reset(ctx, "g", queue.ToLatest(), queue.Force())
	if err != nil || !res.Live() {
		t.Fatalf("forced Reset = %+v, %v", res, err)
	}
	if err := c.Ack(ctx, held...); err == nil {
		t.Fatal("the broken owner's ack of messages delivered before the reset succeeded")
	}
	d, err := q.Describe(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Groups[0].Partitions[:2] {
		if p.Next != p.Head || p.Attempts != 0 {
			t.Fatalf("partition %d after a forced ToLatest and a refused ack: next %d attempts %d, want head %d, 0", p.Partition, p.Next, p.Attempts, p.Head)
		}
	}
	// The consumer serves the new events from the reset offset.
	if _, err := q.Enqueue(ctx, queue.Event{Key: "a", Payload: []byte("new")}); err != nil {
		t.Fatal(err)
	}
	ms, err := c.Receive(ctx, 10)
	if err != nil || len(ms) != 1 || string(ms[0].Payload) != "new" {
		t.Fatalf("after the reset the consumer received %v, %v; want the new event only", ms, err)
	}
}

// fencing is a store on which, when armed, a later owner claims the partition (with a
// greater token) just before the reset's claim, and a joiner tries to take the
// partition's lock while the reset writes its offset.
type fencing struct {
	*memory.Store
	locks      *lock.Manager
	armed      atomic.Bool
	joinerErr  atomic.Value
	laterToken uint64
}

func (s *fencing) ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (driver.QueueOffset, error) {
	if s.armed.Load() && s.laterToken != 0 {
		if _, err := s.Store.ClaimQueuePartition(ctx, name, group, p, token+s.laterToken); err != nil {
			return driver.QueueOffset{}, err
		}
	}
	return s.Store.ClaimQueuePartition(ctx, name, group, p, token)
}

func (s *fencing) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	if s.armed.Load() && s.locks != nil {
		lk, err := s.locks.TryAcquire(ctx, "queue:1:r1:gp/"+string(rune('0'+p)), lock.Level(dcsync.XDC))
		if err == nil {
			_ = lk.Release(ctx)
			err = errors.New("a joiner took the partition's lock while the reset wrote its offset")
		}
		s.joinerErr.Store(err)
	}
	return s.Store.CommitQueueOffset(ctx, name, group, p, off)
}

// The reset holds the partition's lock while it writes: a joiner cannot take it then.
func TestResetHoldsThePartitionWhileItWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &fencing{Store: memory.New()}
	defer s.Store.Close()
	q := resetQueue(t, ctx, s)
	var err error
	if s.locks, err = lock.New(s.Store, queue.DefaultClient, queue.DefaultFarm, lock.WithTTL(testLease)); err != nil {
		t.Fatal(err)
	}
	s.armed.Store(true)
	if _, err := q.Reset(ctx, "g", queue.ToLatest()); err != nil {
		t.Fatal(err)
	}
	if err, _ := s.joinerErr.Load().(error); !errors.Is(err, dcsync.ErrLockUnavailable) {
		t.Fatalf("a joiner's TryAcquire during the reset's write = %v, want LockUnavailable", err)
	}
}

// An owner that claims the partition after the reset took its lock (the reset's lease
// lapsed, say) wins: the reset's write is refused and the owner's record stays.
func TestResetRefusedByALaterOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &fencing{Store: memory.New(), laterToken: 1000}
	defer s.Store.Close()
	q := resetQueue(t, ctx, s)
	s.armed.Store(true)
	res, err := q.Reset(ctx, "g", queue.ToLatest())
	if !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("Reset after a later owner's claim = %+v, %v; want LockLost", res, err)
	}
	s.armed.Store(false)
	if got := nexts(t, ctx, q); got[0] != 0 || got[1] != 0 {
		t.Fatalf("offsets after a refused reset = %v, want [0 0]", got)
	}
}

// Lag labels the dead-letter partition, and only it.
func TestLagLabelsTheDeadLetterPartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := memory.New()
	defer s.Close()
	q := resetQueue(t, ctx, s)
	lags, err := q.Lag(ctx, "g")
	if err != nil || len(lags) != 3 {
		t.Fatalf("Lag = %v, %v", lags, err)
	}
	for i, l := range lags {
		if l.Dead != (i == 2) || (l.Dead && l.Partition != 2) {
			t.Fatalf("Lag[%d] = %+v: only the last (partition 2) is the dead-letter partition", i, l)
		}
	}
}
