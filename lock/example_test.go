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

// A lease is treated as over a little before TTL after the acquisition was sent: here
// 2% of the TTL plus 50 ms early. Deadline says when; KeepAlive's context ends then
// unless the lease was renewed.
func ExampleWithSafetyMargin() {
	ctx := context.Background()
	locks, err := lock.New(memory.New(), "billing", "dc1", lock.WithSafetyMargin(0.02, 50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	l, err := locks.TryAcquire(ctx, "nightly-invoices", lock.TTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	left := time.Until(l.Deadline())
	fmt.Println("counted locally at most 9.75s:", left <= 9750*time.Millisecond && left > 9*time.Second)
	// Output:
	// counted locally at most 9.75s: true
}
