package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// describeCounter counts the store calls Describe makes.
type describeCounter struct {
	*memory.Store
	calls, inspect, batches atomic.Int64
}

func (s *describeCounter) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	s.calls.Add(1)
	s.inspect.Add(1)
	return s.Store.InspectLock(ctx, k)
}

func (s *describeCounter) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	s.calls.Add(1)
	s.batches.Add(1)
	return s.Store.InspectLocks(ctx, keys)
}

func (s *describeCounter) QueueBounds(ctx context.Context, name string, ps []int) ([]driver.QueueBounds, error) {
	s.calls.Add(1)
	return s.Store.QueueBounds(ctx, name, ps)
}

func (s *describeCounter) ReadQueueOffsets(ctx context.Context, name, group string, ps []int) ([]driver.QueueOffset, error) {
	s.calls.Add(1)
	return s.Store.ReadQueueOffsets(ctx, name, group, ps)
}

func (s *describeCounter) ReadQueueSpec(ctx context.Context, name string) (driver.QueueSpec, error) {
	s.calls.Add(1)
	return s.Store.ReadQueueSpec(ctx, name)
}

// Describe reads a group in a fixed number of calls whatever P: the spec, then per
// group its bounds, its offsets and one batched read of its 2P+2 locks (P = 256
// here: 514 locks, under one batch), and reports the owner a consumer installed.
func TestDescribeIsBatched(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &describeCounter{Store: memory.New()}
	defer s.Store.Close()
	q, err := queue.Create(ctx, s, queue.Spec{Name: "d", Partitions: 256, Groups: []string{"g", "h"}},
		queue.WithLease(testLease), queue.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s.calls.Store(0)
	d, err := q.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.calls.Load(); got != 1+2*3 || s.inspect.Load() != 0 || s.batches.Load() != 2 {
		t.Fatalf("Describe of 2 groups of 256 partitions: %d calls (%d single lock reads, %d batches), want 7 (0, 2)", got, s.inspect.Load(), s.batches.Load())
	}
	if len(d.Groups) != 2 || len(d.Groups[0].Partitions) != 257 || !d.Groups[0].Partitions[256].Dead || d.Groups[1].Partitions[256].Partition != 257 {
		t.Fatalf("Describe = %d groups, want 2 of 256 event partitions then the dead-letter one", len(d.Groups))
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for len(c.Partitions()) < 256 {
		time.Sleep(10 * time.Millisecond)
	}
	d, err = q.Describe(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	g := d.Groups[0]
	if len(g.Members) != 1 || g.Members[0].Slot != 0 {
		t.Fatalf("members = %+v, want slot 0", g.Members)
	}
	for _, p := range g.Partitions[:256] {
		if p.Owner == nil || p.Owner.Token != p.Token || p.Token == 0 {
			t.Fatalf("partition %d: owner %+v, stored token %d; want the consumer's lock, whose token the record holds", p.Partition, p.Owner, p.Token)
		}
	}
	if g.Partitions[256].Owner != nil {
		t.Fatalf("the dead-letter partition is owned with no dead-letter consumer: %+v", g.Partitions[256].Owner)
	}
}
