package latch_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/store/memory"
)

func Example() {
	ctx := context.Background()
	store := memory.New()

	latches, err := latch.New(store, "etl", "dc1")
	if err != nil {
		panic(err)
	}
	done, err := latches.CreateCountDown(ctx, "load-2026-11-21", 3)
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	for shard := 0; shard < 3; shard++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each worker (usually another process or host) opens the latch by name.
			l, _ := latches.GetCountDown("load-2026-11-21")
			_, _ = l.CountDown(ctx)
		}()
	}
	if err := done.Wait(ctx); err != nil {
		panic(err)
	}
	wg.Wait()
	n, _ := done.Count(ctx)
	fmt.Println("all shards loaded; count", n)
	// Output: all shards loaded; count 0
}

func ExampleManager_GetOrCreateCountUpDown() {
	ctx := context.Background()
	latches, _ := latch.New(memory.New(), "etl", "dc1", latch.WithLevel(dcsync.XDC))
	inflight, _ := latches.GetOrCreateCountUpDown(ctx, "inflight")
	_, _ = inflight.CountUp(ctx)
	_, _ = inflight.CountUp(ctx)
	n, _ := inflight.CountDown(ctx)
	fmt.Println("in flight:", n)
	// Output: in flight: 1
}

// An XDC latch is one count summed across farms: each farm's manager updates its own
// farm's cell, and every reader sees the sum. Here two farms' managers share one store
// (in production, two data centres' processes share an HBase or Aerospike cluster).
func ExampleWithLevel_xdc() {
	ctx := context.Background()
	store := memory.New()
	dc1, _ := latch.New(store, "payments", "dc1", latch.WithLevel(dcsync.XDC), latch.WithTTL(time.Hour))
	dc2, _ := latch.New(store, "payments", "dc2", latch.WithLevel(dcsync.XDC), latch.WithTTL(time.Hour))

	// dc1 creates the latch: the whole latch, every farm's cell, ends an hour from now.
	a, err := dc1.CreateCountDown(ctx, "migration", 3)
	if err != nil {
		panic(err)
	}
	// dc2 counts the same latch down: its cell goes to -1, the sum to 2.
	b, _ := dc2.GetCountDown("migration")
	n, _ := b.CountDown(ctx)
	fmt.Println("after dc2's count-down:", n)
	_, _ = a.CountDown(ctx)
	n, _ = a.CountDown(ctx)
	fmt.Println("after dc1's two:", n)
	fmt.Println("dc2 sees it done:", b.Wait(ctx))

	// Each farm's share lives in its own cell (the Java layout: one row or record per
	// latch name, one cell per farm), which a DC-level reader in that farm sees alone.
	local, _ := latch.New(store, "payments", "dc2")
	dcView, _ := local.GetCountDown("migration")
	n, _ = dcView.Count(ctx)
	fmt.Println("dc2's own cell:", n)
	// Output:
	// after dc2's count-down: 2
	// after dc1's two: 0
	// dc2 sees it done: <nil>
	// dc2's own cell: -1
}
