package queue_test

// Adversarial review (issue 15): retention trims against operator offset moves.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// gatedTrim holds the first TrimQueue until release is closed: a slow store reply
// (the delete of a trim pass is late), which any timing allows.
type gatedTrim struct {
	driver.Store
	once    sync.Once
	entered chan struct{}
	release chan struct{}
	done    chan struct{}
}

func (s *gatedTrim) TrimQueue(ctx context.Context, name string, p int, below uint64) error {
	first := false
	s.once.Do(func() { first = true })
	if !first {
		return s.Store.TrimQueue(ctx, name, p, below)
	}
	close(s.entered)
	<-s.release
	defer close(s.done)
	return s.Store.TrimQueue(ctx, name, p, below)
}

// FAILS ON MAIN (defect): a trim pass deletes events that a group's offset, moved
// back by queue.Reset (or Consumer.Seek) after the pass read it, still has to
// deliver. trimPass (queue/trim.go) reads the other groups' offsets once, then
// deletes below them; it re-reads the spec (for AddGroup) but not the offsets, so a
// Reset that returned Applied with To=0 is undone by a TrimQueue that lands after it:
// the floor rises above the group's stored offset and the replay the operator asked
// for is silently lost (the group's offset points below the floor). The documented
// invariant "a trim stops below the lowest offset of every group" does not hold.
func TestReviewTrimDoesNotUndoAReset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw := memory.New()
	defer raw.Close()
	gs := &gatedTrim{Store: raw, entered: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	opts := []queue.Option{queue.WithLease(testLease), queue.WithPollInterval(20 * time.Millisecond), queue.WithTrimPeriod(50 * time.Millisecond)}
	// Group a's consumer trims through the gated store; group b is run and reset
	// through the raw one.
	qa, err := queue.Create(ctx, gs, queue.Spec{Name: "q", Partitions: 1, Groups: []string{"a", "b"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := queue.Open(ctx, raw, "q", opts...)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := 0; i < n; i++ {
		if _, err := qa.Enqueue(ctx, queue.Event{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := qb.Consumer(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	receiveAll(t, ctx, b, n, true)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := qa.Consumer(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	receiveAll(t, ctx, a, n, true)
	// a's trim pass has read b's offset (10) and is deleting below it.
	select {
	case <-gs.entered:
	case <-ctx.Done():
		t.Fatal("no trim pass")
	}
	res, err := qb.Reset(ctx, "b", queue.ToEarliest())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Partitions) != 1 || !res.Partitions[0].Applied || res.Partitions[0].To != 0 {
		t.Fatalf("reset: %+v", res.Partitions)
	}
	close(gs.release)
	<-gs.done
	bd, err := raw.QueueBounds(ctx, "q", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	offs, err := raw.ReadQueueOffsets(ctx, "q", "b", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if bd[0].Floor > offs[0].Next {
		t.Fatalf("trim deleted events group b must deliver after its reset: floor %d above b's offset %d (reset returned To=0, Applied)", bd[0].Floor, offs[0].Next)
	}
}

// FAILS ON MAIN (defect): a consumer's own Seek back is undone by its trim pass in
// flight. maybeTrim (queue/trim.go) captures each owned partition's offset (next) when
// the pass starts, and trimPass deletes below it with no re-check; a Seek(p, 0) that
// returned nil after the pass started (nothing was below the floor then, so the Seek
// promised every event from 0 on again) is followed by a TrimQueue that deletes
// them: the floor ends above the offset the Seek wrote, and the replay is lost.
func TestReviewTrimDoesNotUndoASeek(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw := memory.New()
	defer raw.Close()
	gs := &gatedTrim{Store: raw, entered: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	q, err := queue.Create(ctx, gs, queue.Spec{Name: "q", Partitions: 1, Groups: []string{"a"}},
		queue.WithLease(testLease), queue.WithPollInterval(20*time.Millisecond), queue.WithTrimPeriod(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := 0; i < n; i++ {
		if _, err := q.Enqueue(ctx, queue.Event{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := q.Consumer(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	receiveAll(t, ctx, a, n, true)
	select {
	case <-gs.entered:
	case <-ctx.Done():
		t.Fatal("no trim pass")
	}
	if err := a.Seek(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	close(gs.release)
	<-gs.done
	bd, err := raw.QueueBounds(ctx, "q", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	offs, err := raw.ReadQueueOffsets(ctx, "q", "a", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if bd[0].Floor > offs[0].Next {
		t.Fatalf("trim deleted events the Seek asked for again: floor %d above a's offset %d (Seek(0, 0) returned nil)", bd[0].Floor, offs[0].Next)
	}
}

// FAILS ON MAIN (defect): queue.Reset with Force against a live consumer is undone by
// that consumer's trim pass in flight. The pass captured the consumer's own offset
// (10) before the reset broke its lock; the reset then writes offset 0 (Applied), and
// the consumer's TrimQueue, which no fence stops (trims carry no token), deletes
// events 0..9 after it: the replay the reset promised is lost, the group's offset
// stays below the floor.
func TestReviewTrimDoesNotUndoAForcedReset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw := memory.New()
	defer raw.Close()
	gs := &gatedTrim{Store: raw, entered: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	opts := []queue.Option{queue.WithLease(testLease), queue.WithPollInterval(20 * time.Millisecond), queue.WithTrimPeriod(50 * time.Millisecond)}
	q, err := queue.Create(ctx, gs, queue.Spec{Name: "q", Partitions: 1, Groups: []string{"a"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := queue.Open(ctx, raw, "q", opts...)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := 0; i < n; i++ {
		if _, err := q.Enqueue(ctx, queue.Event{Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := q.Consumer(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	receiveAll(t, ctx, a, n, true)
	select {
	case <-gs.entered:
	case <-ctx.Done():
		t.Fatal("no trim pass")
	}
	res, err := admin.Reset(ctx, "a", queue.ToEarliest(), queue.Force())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Partitions[0].Applied || res.Partitions[0].To != 0 {
		t.Fatalf("reset: %+v", res.Partitions)
	}
	close(gs.release)
	<-gs.done
	bd, err := raw.QueueBounds(ctx, "q", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	offs, err := raw.ReadQueueOffsets(ctx, "q", "a", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if bd[0].Floor > offs[0].Next {
		t.Fatalf("the fenced consumer's trim deleted events the forced reset asked for again: floor %d above the group's offset %d (reset returned To=0, Applied)", bd[0].Floor, offs[0].Next)
	}
}
