package latch_test

import (
	"context"
	"fmt"
	"sync"

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
