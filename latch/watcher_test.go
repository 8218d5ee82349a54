package latch

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/memory"
)

// gatedStore holds the first ReadLatches call until gate is closed.
type gatedStore struct {
	*memory.Store
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedStore) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]dcsync.LatchCount, error) {
	g.once.Do(func() {
		g.entered <- struct{}{}
		<-g.gate
	})
	return g.Store.ReadLatches(ctx, keys)
}

// TestWatcherStopsWhenItsPollEndsTheLastWait pins a race the suite once hit: a local
// count-down wakes the waiters while the watcher is mid-read (its poke fills the kick
// slot), a new waiter's poke is then dropped, and the watcher's next poll ends that
// waiter. The loop must then stop, not sleep out its (here one-hour) interval.
func TestWatcherStopsWhenItsPollEndsTheLastWait(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	g := &gatedStore{Store: memory.New(), entered: make(chan struct{}), gate: make(chan struct{})}
	m, err := New(g, "c", "dc1", WithPollInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	x, err := m.CreateCountDown(ctx, "x", 1)
	if err != nil {
		t.Fatal(err)
	}
	y, err := m.CreateCountDown(ctx, "y", 0)
	if err != nil {
		t.Fatal(err)
	}
	xDone := make(chan error, 1)
	go func() { xDone <- x.Wait(ctx) }()
	<-g.entered // the watcher is reading x, and stays there
	if _, err := x.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-xDone; err != nil { // woken locally
		t.Fatal(err)
	}
	yDone := make(chan error, 1)
	go func() { yDone <- y.Wait(ctx) }()
	for { // until y's waiter is registered
		m.watch.mu.Lock()
		n := len(m.watch.latches)
		m.watch.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(g.gate)
	if err := <-yDone; err != nil {
		t.Fatal(err)
	}
}
