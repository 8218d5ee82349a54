package queue_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
)

// counting counts a store's queue reads.
type counting struct {
	*memory.Store
	bounds, reads atomic.Int64
}

func (s *counting) QueueBounds(ctx context.Context, name string, ps []int) ([]driver.QueueBounds, error) {
	s.bounds.Add(1)
	return s.Store.QueueBounds(ctx, name, ps)
}

func (s *counting) ReadQueue(ctx context.Context, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	s.reads.Add(1)
	return s.Store.ReadQueue(ctx, name, p, from, max)
}

// ReadQueues counts a batched read as one partition read per partition it reads.
func (s *counting) ReadQueues(ctx context.Context, name string, reads []driver.QueueReadReq) ([]driver.QueueReadResult, error) {
	s.reads.Add(int64(len(reads)))
	return s.Store.ReadQueues(ctx, name, reads)
}

// Consumers of one queue in one process share one watcher: while 8 consumers (of 8
// groups) wait on an idle queue, the store sees about one batched bounds read per poll
// interval, not one per consumer, and no partition reads at all. An event enqueued
// through another store handle (as by another process) still wakes every group.
func TestIdleConsumersShareOneWatcher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	s := &counting{Store: base}
	const interval = 20 * time.Millisecond
	groups := []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"}
	q, err := queue.Create(ctx, s, queue.Spec{Name: "w", Partitions: 4, Groups: groups}, queue.WithPollInterval(interval))
	if err != nil {
		t.Fatal(err)
	}
	var cs []*queue.Consumer
	for _, g := range groups {
		c, err := q.Consumer(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		cs = append(cs, c)
	}
	for _, c := range cs {
		for len(c.Partitions()) < 4 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	got := make([]int, len(cs))
	start := time.Now()
	b0, r0 := s.bounds.Load(), s.reads.Load()
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each waits until the event comes (bounded by the test's deadline): the
			// event is enqueued after a second of idle waiting, and a loaded machine
			// may take that long again to enqueue and deliver it.
			msgs, err := c.Receive(ctx, 10)
			if err != nil {
				t.Error(err)
			}
			got[i] = len(msgs)
			c.Ack(ctx, msgs...)
		}()
	}
	time.Sleep(time.Second)
	idle := time.Since(start)
	bounds, reads := s.bounds.Load()-b0, s.reads.Load()-r0
	t.Logf("%d bounds reads and %d partition reads in %v", bounds, reads, idle)
	// The bound counts intervals in the time that passed: a slow machine only lowers
	// the count. One consumer polling on its own would make 8 times as many.
	if limit := int64(idle/interval)*2 + int64(len(cs)); bounds > limit {
		t.Errorf("%d bounds reads in %v of idle waiting by %d consumers, want at most %d (one per %v, shared)", bounds, idle, len(cs), limit, interval)
	}
	if bounds == 0 {
		t.Errorf("no bounds reads while consumers waited")
	}
	if reads > int64(len(cs))*4 {
		t.Errorf("%d partition reads on an idle queue", reads)
	}
	// An event from another handle (another process, as far as this one can tell).
	other, err := queue.Open(ctx, base, "w")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Enqueue(ctx, queue.Event{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, n := range got {
		if n != 1 {
			t.Errorf("group %s received %d events, want 1", groups[i], n)
		}
	}
}

// An idle hub backs off: while nothing changes it reads once per 8 poll intervals, not
// once per interval. The bound counts the reads a doubling backoff can make in the
// time that passed (a slow machine only lowers the count); without the backoff a
// consumer waiting 2 s with a 10 ms interval makes up to 200.
func TestIdleHubBacksOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := memory.New()
	defer base.Close()
	s := &counting{Store: base}
	const interval = 10 * time.Millisecond
	q, err := queue.Create(ctx, s, queue.Spec{Name: "b", Partitions: 4, Groups: []string{"g"}}, queue.WithPollInterval(interval))
	if err != nil {
		t.Fatal(err)
	}
	c, err := q.Consumer(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for len(c.Partitions()) < 4 {
		time.Sleep(5 * time.Millisecond)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Receive(rctx, 1)
	}()
	time.Sleep(100 * time.Millisecond) // the first wait's reads
	b0 := s.bounds.Load()
	start := time.Now()
	time.Sleep(2 * time.Second)
	idle := time.Since(start)
	bounds := s.bounds.Load() - b0
	rcancel()
	<-done
	t.Logf("%d bounds reads in %v of idle waiting", bounds, idle)
	if limit := int64(idle/(8*interval)) + 5; bounds > limit {
		t.Errorf("%d bounds reads in %v of idle waiting, want at most %d (one per 8 intervals of %v)", bounds, idle, limit, interval)
	}
	if bounds == 0 {
		t.Errorf("no bounds reads while the consumer waited")
	}
}
