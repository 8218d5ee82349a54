package queue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// trimBeforeCommit raises partition 0's floor to floor (a trim of another process)
// just before the first CommitQueueOffset of group.
type trimBeforeCommit struct {
	driver.Store
	group string
	floor uint64
	once  sync.Once
	err   error
}

func (s *trimBeforeCommit) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	if group == s.group {
		s.once.Do(func() { s.err = s.Store.TrimQueue(ctx, name, 0, s.floor) })
	}
	return s.Store.CommitQueueOffset(ctx, name, group, p, off)
}

// A reset whose target a trim passed after the plan read the floor: the store refuses
// the move back below the floor, writing nothing, and the reset keeps the target
// within the new floor, as it does at planning (To and Floor report it).
func TestResetKeptWithinARaisedFloor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw := memory.New()
	defer raw.Close()
	opts := []queue.Option{queue.WithLease(testLease), queue.WithPollInterval(20 * time.Millisecond), queue.WithTrimPeriod(time.Hour)}
	q, err := queue.Create(ctx, raw, queue.Spec{Name: "q", Partitions: 1, Groups: []string{"a", "b"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := q.Enqueue(ctx, queue.Event{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"a", "b"} {
		c, err := q.Consumer(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		receiveAll(t, ctx, c, 10, true)
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ts := &trimBeforeCommit{Store: raw, group: "b", floor: 5}
	admin, err := queue.Open(ctx, ts, "q", opts...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := admin.Reset(ctx, "b", queue.ToEarliest())
	if err != nil || ts.err != nil {
		t.Fatalf("reset: %v (trim: %v)", err, ts.err)
	}
	if pr := res.Partitions[0]; !pr.Applied || pr.To != 5 || pr.Floor != 5 {
		t.Fatalf("reset after a trim to 5 raced its plan (floor 0): %+v, want applied, to 5, floor 5", pr)
	}
	offs, err := raw.ReadQueueOffsets(ctx, "q", "b", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if offs[0].Next != 5 {
		t.Fatalf("group b's offset %d after the reset, want 5", offs[0].Next)
	}
}

// A Seek below the floor starts at the floor: the store refuses the move back below
// it, and Seek moves to the floor instead.
func TestSeekBelowTheFloorStartsThere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw := memory.New()
	defer raw.Close()
	q, err := queue.Create(ctx, raw, queue.Spec{Name: "q", Partitions: 1, Groups: []string{"a"}},
		queue.WithLease(testLease), queue.WithPollInterval(20*time.Millisecond), queue.WithTrimPeriod(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := q.Enqueue(ctx, queue.Event{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := q.Consumer(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	receiveAll(t, ctx, a, 10, true)
	if err := raw.TrimQueue(ctx, "q", 0, 6); err != nil {
		t.Fatal(err)
	}
	if err := a.Seek(ctx, 0, 2); err != nil {
		t.Fatalf("Seek(0, 2) with the floor at 6: %v", err)
	}
	offs, err := raw.ReadQueueOffsets(ctx, "q", "a", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if offs[0].Next != 6 {
		t.Fatalf("offset %d after Seek(0, 2) with the floor at 6, want 6", offs[0].Next)
	}
	msgs := receiveAll(t, ctx, a, 4, true)
	if msgs[0].Seq != 6 {
		t.Fatalf("first delivery after the seek: seq %d, want 6", msgs[0].Seq)
	}
}
