package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/memory"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestQueueDedupWindow checks that ids are remembered for the spec's window by the
// store's clock, and forgotten after it.
func TestQueueDedupWindow(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := memory.New(memory.WithClock(clock.Now))
	ctx := context.Background()
	spec := driver.QueueSpec{Name: "q", Partitions: 1, Groups: []string{"g"}, Dedup: time.Minute}
	if err := s.CreateQueue(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ReadQueueSpec(ctx, "q"); !got.Created.Equal(clock.Now()) {
		t.Fatalf("Created = %v, want the store's clock %v", got.Created, clock.Now())
	}
	appendID := func(id string) driver.QueueAppend {
		t.Helper()
		res, err := s.AppendQueue(ctx, "q", []driver.QueueEvent{{ID: id}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	appendID("a")
	clock.Add(30 * time.Second)
	appendID("b")
	clock.Add(29 * time.Second)
	if r := appendID("a"); !r.Duplicate || r.Seq != 0 {
		t.Fatalf("id a 59s later = %+v, want a duplicate of seq 0", r)
	}
	clock.Add(time.Second)
	if r := appendID("a"); r.Duplicate || r.Seq != 2 {
		t.Fatalf("id a 60s later = %+v, want appended again at seq 2", r)
	}
	if r := appendID("b"); !r.Duplicate || r.Seq != 1 {
		t.Fatalf("id b 30s later = %+v, want a duplicate of seq 1", r)
	}
	clock.Add(30 * time.Second)
	if r := appendID("b"); r.Duplicate || r.Seq != 3 {
		t.Fatalf("id b 60s later = %+v, want appended again at seq 3", r)
	}
	// The re-appended a is remembered from its new time.
	if r := appendID("a"); !r.Duplicate || r.Seq != 2 {
		t.Fatalf("id a after its re-append = %+v, want a duplicate of seq 2", r)
	}
}

// TestQueueContextAndClose checks that a done context and a closed store change nothing.
func TestQueueContextAndClose(t *testing.T) {
	s := memory.New()
	ctx := context.Background()
	spec := driver.QueueSpec{Name: "q", Partitions: 1, Groups: []string{"g"}}
	if err := s.CreateQueue(ctx, spec); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.AppendQueue(done, "q", []driver.QueueEvent{{}}); dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("AppendQueue with a done context = %v, want Connection", err)
	}
	if err := s.CreateQueue(done, driver.QueueSpec{Name: "q2", Partitions: 1, Groups: []string{"g"}}); dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("CreateQueue with a done context = %v, want Connection", err)
	}
	if b, err := s.QueueBounds(ctx, "q", []int{0}); err != nil || b[0].Head != 0 {
		t.Fatalf("bounds after a cancelled append = %+v, %v; want head 0", b, err)
	}
	if _, err := s.ReadQueueSpec(ctx, "q2"); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("queue created with a done context: %v", err)
	}
	s.Close()
	if _, err := s.AppendQueue(ctx, "q", []driver.QueueEvent{{}}); dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("AppendQueue on a closed store = %v, want Connection", err)
	}
	if _, err := s.ReadQueue(ctx, "q", 0, 0, 1); dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("ReadQueue on a closed store = %v, want Connection", err)
	}
}

// TestQueueStoresAreSeparate checks that two stores never share queues.
func TestQueueStoresAreSeparate(t *testing.T) {
	a, b := memory.New(), memory.New()
	ctx := context.Background()
	spec := driver.QueueSpec{Name: "q", Partitions: 1, Groups: []string{"g"}}
	if err := a.CreateQueue(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadQueueSpec(ctx, "q"); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("queue of one store seen in another: %v", err)
	}
	if err := b.CreateQueue(ctx, spec); err != nil {
		t.Fatalf("CreateQueue of the same name in another store: %v", err)
	}
}
