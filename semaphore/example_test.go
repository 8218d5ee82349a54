package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/semaphore"
	"github.com/dcsync/dcsync/store/memory"
)

func Example() {
	ctx := context.Background()
	store := memory.New() // or sqlite.Open, hbase.New, aerospike.New

	sems, err := semaphore.New(store, "billing", "dc1", semaphore.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	// At most 3 exports run at once, across every process of the store.
	exports, err := sems.Open(ctx, "exports", 3)
	if err != nil {
		panic(err)
	}
	p, err := exports.Acquire(ctx, 2, semaphore.Wait(time.Minute))
	if err != nil {
		panic(err)
	}
	// Renew the permits' leases while the work runs; work ends if any is lost.
	work := p.KeepAlive(ctx)
	fmt.Println("permits:", p.Len(), "running:", work.Err() == nil)

	// Two more are refused, all or nothing: only one is free.
	_, err = exports.TryAcquire(ctx, 2)
	fmt.Println("refused:", errors.Is(err, dcsync.ErrLockUnavailable))

	// Each permit has a slot and a fencing token, strictly increasing per slot.
	for _, q := range p.Permits() {
		fmt.Println("token of its slot:", q.Token)
	}
	if err := p.Release(ctx); err != nil {
		panic(err)
	}

	// Opening with another count is refused; Resize changes it.
	_, err = sems.Open(ctx, "exports", 5)
	fmt.Println("other count:", errors.Is(err, dcsync.ErrConflict))
	if err := sems.Resize(ctx, "exports", 5); err != nil {
		panic(err)
	}
	st, _ := sems.Status(ctx, "exports")
	fmt.Println("permits now:", st.Permits)
	// Output:
	// permits: 2 running: true
	// refused: true
	// token of its slot: 1
	// token of its slot: 1
	// other count: true
	// permits now: 5
}
