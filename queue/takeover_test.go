package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// stalling is a store whose lock renewals fail while stalled: its consumer's leases
// run out as if its process were paused or cut off. It counts offset writes.
type stalling struct {
	*memory.Store
	stalled atomic.Bool
	commits atomic.Int64
}

func (s *stalling) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	s.commits.Add(1)
	return s.Store.CommitQueueOffset(ctx, name, group, p, off)
}

func (s *stalling) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	if s.stalled.Load() {
		return driver.LockState{}, driver.Errorf(dcsync.Connection, "test", "stalled")
	}
	return s.Store.RefreshLock(ctx, k, owner, ttl)
}

// RefreshLocks fails while stalled too: KeepAlive renews through it on a store with
// driver.LockBatcher, as memory is.
func (s *stalling) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	if s.stalled.Load() {
		return nil, driver.Errorf(dcsync.Connection, "test", "stalled")
	}
	return s.Store.RefreshLocks(ctx, reqs)
}

// A consumer whose lease runs out while it holds unacked messages: its partitions move
// to the other consumer, which gets the same events with a greater token; the zombie's
// late ack is refused with LockLost and changes no offset.
func TestZombieAckRefusedAndEventsMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	za, zb := &stalling{Store: base}, &stalling{Store: base}
	opts := []queue.Option{queue.WithPollInterval(20 * time.Millisecond), queue.WithVisibility(time.Hour)}
	// a's lease is let lapse; b's must be kept until its ack.
	qa, err := queue.Create(ctx, za, queue.Spec{Name: "z", Partitions: 1, Groups: []string{"g"}}, append(opts, queue.WithLease(zombieLease))...)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := queue.Open(ctx, zb, "z", append(opts, queue.WithLease(testLease))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qa.Enqueue(ctx, queue.Event{Payload: []byte("e0")}, queue.Event{Payload: []byte("e1")}); err != nil {
		t.Fatal(err)
	}
	a, err := qa.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	held, err := a.Receive(ctx, 10)
	if err != nil || len(held) != 2 {
		t.Fatalf("a: %v %v", held, err)
	}
	b, err := qb.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	za.stalled.Store(true) // a's leases lapse
	got, err := b.Receive(ctx, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("b: %v %v", got, err)
	}
	if got[0].Token <= held[0].Token || string(got[0].Payload) != "e0" {
		t.Fatalf("b got %q with token %d, a had token %d", got[0].Payload, got[0].Token, held[0].Token)
	}
	if err := a.Ack(ctx, held...); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("zombie ack: %v, want LockLost", err)
	}
	// The store-side fence: a commit with a's token is refused, whatever a believes.
	err = base.CommitQueueOffset(ctx, "z", "g", 0, driver.QueueOffset{Token: held[0].Token, Next: 2, Held: true})
	if !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("stale-token commit: %v, want LockLost", err)
	}
	lag, _ := qb.Lag(ctx, "g")
	if lag[0].Next != 0 {
		t.Fatalf("offset moved to %d by a zombie", lag[0].Next)
	}
	if err := b.Ack(ctx, got...); err != nil {
		t.Fatal(err)
	}
	lag, _ = qb.Lag(ctx, "g")
	if lag[0].Next != 2 || lag[0].Lag != 0 {
		t.Fatalf("after b's ack: %+v", lag[0])
	}
}

// A consumer that dies holding an event (no release) makes its successor count a
// failed attempt: with max attempts 2, the second death dead-letters the event.
func TestDeathsCountAsAttempts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	opts := []queue.Option{queue.WithPollInterval(20 * time.Millisecond), queue.WithMaxAttempts(2)}
	// The consumers that die have leases that lapse; the last one's must be kept.
	q, err := queue.Create(ctx, base, queue.Spec{Name: "d", Partitions: 1, Groups: []string{"g"}}, append(opts, queue.WithLease(testLease))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, queue.Event{Payload: []byte("poison")}, queue.Event{Payload: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	for death := 1; death <= 2; death++ {
		s := &stalling{Store: base}
		qd, err := queue.Open(ctx, s, "d", append(opts, queue.WithLease(zombieLease))...)
		if err != nil {
			t.Fatal(err)
		}
		c, err := qd.Consumer(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		m, err := c.Receive(ctx, 1)
		t.Logf("death %d: received after %v", death, time.Since(t0))
		if err != nil || string(m[0].Payload) != "poison" || m[0].Attempt != death {
			t.Fatalf("death %d: %+v %v", death, m, err)
		}
		s.stalled.Store(true)
		for len(c.Partitions()) > 0 { // wait until its lease is gone
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("death %d: lost after %v", death, time.Since(t0))
		// It "dies": never releases. Close only stops its goroutines now.
		c.Close(ctx)
		t.Logf("death %d: closed after %v", death, time.Since(t0))
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	t0 := time.Now()
	m, err := c.Receive(ctx, 1)
	t.Logf("third received after %v", time.Since(t0))
	if err != nil || string(m[0].Payload) != "ok" {
		t.Fatalf("after two deaths: %+v %v", m, err)
	}
	lag, _ := q.Lag(ctx, "g")
	if dl := lag[len(lag)-1]; dl.Head != 1 {
		t.Fatalf("dead-letter partition: %+v", dl)
	}
}

// While a consumer streams a partition, each batch costs one offset write (its ack):
// the ack keeps the offset marked held for the events buffered behind it, so the next
// Receive does not write before it delivers. A death in the middle of the stream
// counts an attempt against the event at the offset; once the consumer has caught up,
// its ack clears the mark and a death costs nothing.
func TestStreamingKeepsOffsetHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	// a streams 10 batches (its renewals must succeed) before it is let die; b takes
	// over. Both keep a lease a loaded machine keeps; the test waits a's out.
	opts := []queue.Option{queue.WithLease(testLease), queue.WithPollInterval(20 * time.Millisecond), queue.WithVisibility(time.Hour)}
	q, err := queue.Create(ctx, base, queue.Spec{Name: "s", Partitions: 1, Groups: []string{"g"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var evs []queue.Event
	for range 12 {
		evs = append(evs, queue.Event{Payload: []byte("e")})
	}
	if _, err := q.Enqueue(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	offset := func() driver.QueueOffset {
		t.Helper()
		offs, err := base.ReadQueueOffsets(ctx, "s", "g", []int{0})
		if err != nil {
			t.Fatal(err)
		}
		return offs[0]
	}
	s := &stalling{Store: base}
	qa, err := queue.Open(ctx, s, "s", opts...)
	if err != nil {
		t.Fatal(err)
	}
	a, err := qa.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	for i := range 10 {
		m, err := a.Receive(ctx, 1)
		if err != nil || len(m) != 1 || m[0].Seq != uint64(i) || m[0].Attempt != 1 {
			t.Fatalf("receive %d: %+v %v", i, m, err)
		}
		if i == 0 {
			s.commits.Store(0) // the claim's writes and the first delivery's mark
		}
		if err := a.Ack(ctx, m...); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.commits.Load(); n != 10 {
		t.Fatalf("10 batches streamed with %d offset writes, want 10 (one per ack)", n)
	}
	if off := offset(); off.Next != 10 || !off.Held {
		t.Fatalf("offset after 10 acks with 2 events left: %+v, want next 10, held", off)
	}
	s.stalled.Store(true) // a dies in the middle of the stream
	for len(a.Partitions()) > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	a.Close(ctx)
	b, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	m, err := b.Receive(ctx, 10)
	if err != nil || len(m) != 2 || m[0].Seq != 10 || m[0].Attempt != 2 || m[1].Attempt != 1 {
		t.Fatalf("after a death mid-stream: %+v %v, want seqs 10 (attempt 2) and 11 (attempt 1)", m, err)
	}
	if err := b.Ack(ctx, m...); err != nil {
		t.Fatal(err)
	}
	if off := offset(); off.Next != 12 || off.Held {
		t.Fatalf("offset after catching up: %+v, want next 12, not held", off)
	}
}

// versions records the Version of every offset write, by token, in the order the
// writes reach the store.
type versions struct {
	*memory.Store
	mu   sync.Mutex
	seen map[uint64][]uint64
}

func (s *versions) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	s.mu.Lock()
	s.seen[off.Token] = append(s.seen[off.Token], off.Version)
	s.mu.Unlock()
	return s.Store.CommitQueueOffset(ctx, name, group, p, off)
}

// Concurrent Acks and Nacks of one partition write the offset one at a time, each
// with a Version above the one before: none is refused as stale.
func TestOffsetVersionsIncreasePerOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	s := &versions{Store: base, seen: map[uint64][]uint64{}}
	opts := []queue.Option{queue.WithLease(10 * time.Second), queue.WithVisibility(time.Hour), queue.WithRetryBackoff(time.Millisecond, time.Millisecond)}
	q, err := queue.Create(ctx, s, queue.Spec{Name: "v", Partitions: 1, Groups: []string{"g"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var evs []queue.Event
	for i := range n {
		evs = append(evs, queue.Event{Key: fmt.Sprint(i), Payload: []byte(fmt.Sprint(i))})
	}
	if _, err := q.Enqueue(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	acked := 0
	for acked < n {
		msgs, err := c.Receive(ctx, 50)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			wg.Go(func() {
				if m.Attempt == 1 && m.Seq%7 == 0 {
					errs[i] = c.Nack(ctx, m)
					return
				}
				errs[i] = c.Ack(ctx, m)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("message %d: %v", msgs[i].Seq, err)
			}
			if msgs[i].Attempt > 1 || msgs[i].Seq%7 != 0 {
				acked++
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for tok, vs := range s.seen {
		for i := 1; i < len(vs); i++ {
			if vs[i] <= vs[i-1] {
				t.Fatalf("token %d wrote version %d after %d", tok, vs[i], vs[i-1])
			}
		}
		t.Logf("token %d: %d writes", tok, len(vs))
	}
	if lag, _ := q.Lag(ctx, "g"); lag[0].Lag != 0 {
		t.Fatalf("lag %+v", lag[0])
	}
}
