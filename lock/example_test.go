package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

func Example() {
	ctx := context.Background()
	store := memory.New() // or sqlite.Open, hbase.New, aerospike.New

	locks, err := lock.New(store, "billing", "dc1", lock.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	l, err := locks.Acquire(ctx, "nightly-invoices", lock.Wait(time.Minute))
	if err != nil {
		panic(err)
	}
	// Renew the lease while the job runs; jobCtx ends if the lease is lost.
	jobCtx := l.KeepAlive(ctx)
	fmt.Println("token:", l.Token(), "running:", jobCtx.Err() == nil)

	// Another acquirer is refused while the lock is held.
	_, err = locks.TryAcquire(ctx, "nightly-invoices")
	fmt.Println("held:", errors.Is(err, dcsync.ErrLockUnavailable))

	if err := l.Release(ctx); err != nil {
		panic(err)
	}
	// A new acquisition gets a greater fencing token.
	l2, _ := locks.TryAcquire(ctx, "nightly-invoices")
	fmt.Println("next token:", l2.Token())
	_ = l2.Release(ctx)
	// Output:
	// token: 1 running: true
	// held: true
	// next token: 2
}
