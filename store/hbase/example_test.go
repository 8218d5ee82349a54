package hbase_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/url"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/hbase"
)

// Example opens a store from outside the module with Open (the store owns its
// connection) and uses it through the lock and latch managers. It needs a running HBase
// (testenv/hbase/up), so it has no checked output: go test compiles it but does not run
// it.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Creates dcsync_locks and D_LTCH_distributed_latch with the Java schema, if absent,
	// on their first use.
	store, err := hbase.Open(ctx, hbase.Options{
		Quorum:    []string{"127.0.0.1:21818"},
		LockTable: "dcsync_locks",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // closes the connection Open made

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

// ExampleOpen sets every option a deployment usually names: the quorum, HBase's root
// znode, the tables the Java services use, and the client's timeouts.
func ExampleOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := hbase.Open(ctx, hbase.Options{
		Quorum:           []string{"zk1.example.com:2181", "zk2.example.com:2181", "zk3.example.com:2181"},
		ZKRoot:           "/hbase",
		LockTable:        "dlm_locks",         // the table the Java DLM services use
		LatchTableSuffix: "distributed_latch", // D_LTCH_distributed_latch
		DialTimeout:      5 * time.Second,
		RPCTimeout:       10 * time.Second,
		Logger:           slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	fmt.Println(store.LockTable(), store.LatchTable())
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
