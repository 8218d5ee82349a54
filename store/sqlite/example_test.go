package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/sqlite"
)

// ExampleOpen opens a store in a file of its own (created with the dcsync tables),
// takes a lock and counts a latch down. Every process on this host that opens the same
// file shares these locks and latches.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "dcsync-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(dir, "dcsync.db"), sqlite.WithBusyTimeout(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	locks, err := lock.New(store, "billing", "dc1")
	if err != nil {
		panic(err)
	}
	l, err := locks.TryAcquire(ctx, "nightly-invoices", lock.TTL(time.Minute))
	if err != nil {
		panic(err)
	}
	fmt.Println("token:", l.Token())
	fmt.Println("release:", l.Release(ctx))

	latches, err := latch.New(store, "billing", "dc1")
	if err != nil {
		panic(err)
	}
	c, err := latches.CreateCountDown(ctx, "shards", 2)
	if err != nil {
		panic(err)
	}
	_, _ = c.CountDown(ctx)
	n, err := c.CountDown(ctx)
	fmt.Println("count:", n, err)
	fmt.Println("wait:", c.Wait(ctx))
	// Output:
	// token: 1
	// release: <nil>
	// count: 0 <nil>
	// wait: <nil>
}
