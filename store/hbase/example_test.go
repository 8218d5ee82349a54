package hbase_test

import (
	"context"
	"fmt"
	"log"
	"net/url"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/hbase"
)

// Example shares a connection with the rest of an application, as the Java libraries
// do, and uses the store through the lock and latch managers. It needs a running HBase
// (testenv/hbase/up), so it has no checked output.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, err := hbaserpc.Dial(ctx, hbaserpc.Config{ZKQuorum: "127.0.0.1:21818"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close() // the store does not close a client it was given

	// Creates dcsync_locks and D_LTCH_distributed_latch with the Java schema if absent.
	store, err := hbase.New(ctx, client, hbase.Config{LockTable: "dcsync_locks"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	locks, err := lock.New(store, "billing", "dc1", lock.WithLevel(dcsync.XDC))
	if err != nil {
		log.Fatal(err)
	}
	l, err := locks.Acquire(ctx, "nightly-invoices", lock.TTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fencing token:", l.Token())
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}

	latches, err := latch.New(store, "billing", "dc1")
	if err != nil {
		log.Fatal(err)
	}
	done, err := latches.CreateCountDown(ctx, "shards-loaded", 3)
	if err != nil {
		log.Fatal(err)
	}
	n, err := done.CountDown(ctx)
	fmt.Println("left:", n, err)
}

// ExampleOpenURL opens a store that owns its connection: Close closes it.
func ExampleOpenURL() {
	u, err := url.Parse("hbase://zk1:2181,zk2:2181?lock_table=dlm_locks&latch_table_suffix=distributed_latch&zk_root=/hbase")
	if err != nil {
		log.Fatal(err)
	}
	store, err := hbase.OpenURL(context.Background(), u)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	fmt.Println(store.LockTable(), store.LatchTable())
}
