package rwlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/rwlock"
	"github.com/dcsync/dcsync/store/memory"
)

func Example() {
	ctx := context.Background()
	store := memory.New() // or sqlite.Open, hbase.New, aerospike.New

	locks, err := rwlock.New(store, "catalog", "dc1", rwlock.WithTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	// Readers share the lock.
	r1, err := locks.AcquireRead(ctx, "prices")
	if err != nil {
		panic(err)
	}
	r2, err := locks.AcquireRead(ctx, "prices")
	if err != nil {
		panic(err)
	}
	// A writer is refused while they hold (Wait(0): try once).
	_, err = locks.AcquireWrite(ctx, "prices", rwlock.Wait(0))
	fmt.Println("writer refused:", errors.Is(err, dcsync.ErrLockUnavailable))
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)

	// The writer gets in once they left; its token fences stale writers.
	w, err := locks.AcquireWrite(ctx, "prices", rwlock.Wait(time.Minute))
	if err != nil {
		panic(err)
	}
	work := w.KeepAlive(ctx) // ends if the lease is lost
	fmt.Println("writer token:", w.Token(), "running:", work.Err() == nil)

	// Downgrade: keep reading what was written, with no instant without a hold.
	r, err := w.Downgrade(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("now:", r.Mode())
	_ = r.Release(ctx)
	// Output:
	// writer refused: true
	// writer token: 2 running: true
	// now: read
}
