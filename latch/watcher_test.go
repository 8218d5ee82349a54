package latch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/memory"
)

// gatedStore holds the first ReadLatches call until gate is closed.
type gatedStore struct {
	*memory.Store
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedStore) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]driver.LatchCount, error) {
	g.once.Do(func() {
		g.entered <- struct{}{}
		<-g.gate
	})
	return g.Store.ReadLatches(ctx, keys)
}

// TestWatcherStopsWhenNobodyWaits pins a race the suite once hit: a local count-down
// wakes the waiters while the watcher is mid-read, and a new waiter joins, which that
// read (begun before it) must not answer. When the new waiter leaves too, the loop must
// stop at once, not sleep out its (here one-hour) interval: goleak checks it.
func TestWatcherStopsWhenNobodyWaits(t *testing.T) {
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
	yCtx, leave := context.WithCancel(ctx)
	yDone := make(chan error, 1)
	go func() { yDone <- y.Wait(yCtx) }()
	waitUntil(t, "y's wait registers", func() bool { return waiting(g) == 1 })
	close(g.gate)
	settle(g)
	leave()
	if err := <-yDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("y.Wait = %v, want a context.Canceled error (the next read is an hour away)", err)
	}
}
