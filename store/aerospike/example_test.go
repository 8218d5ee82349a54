package aerospike_test

import (
	"context"
	"fmt"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync/internal/aerotest"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/aerospike"
)

// Example wires a store onto an already-connected client (here an in-process test
// server), then takes a lock and counts a latch down through packages lock and latch.
func Example() {
	srv, err := aerotest.Start(aerotest.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := as.NewClient(srv.Host(), srv.Port())
	if err != nil {
		panic(err)
	}
	defer client.Close()

	store, err := aerospike.New(client, aerospike.Config{Namespace: "test"})
	if err != nil {
		panic(err)
	}
	defer store.Close() // leaves the client open: it was given, not dialled
	ctx := context.Background()

	locks, _ := lock.New(store, "orders", "dc1")
	l, err := locks.TryAcquire(ctx, "nightly-batch", lock.TTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println("token:", l.Token())
	_, err = locks.TryAcquire(ctx, "nightly-batch")
	fmt.Println("second acquire:", err != nil)
	fmt.Println("release:", l.Release(ctx))

	latches, _ := latch.New(store, "orders", "dc1")
	c, err := latches.CreateCountDown(ctx, "shards", 2)
	if err != nil {
		panic(err)
	}
	c.CountDown(ctx)
	n, _ := c.CountDown(ctx)
	fmt.Println("count:", n, "wait:", c.Wait(ctx))
	// Output:
	// token: 1
	// second acquire: true
	// release: <nil>
	// count: 0 wait: <nil>
}
