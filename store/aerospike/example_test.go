package aerospike_test

import (
	"context"
	"fmt"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/aerospike"
)

// Example wires a store onto an already-connected client, then takes a lock and counts a
// latch down through packages lock and latch. The namespace must have nsup-period > 0
// (or allow-ttl-without-nsup): every lock and latch record carries a TTL.
func Example() {
	client, aerr := as.NewClient("127.0.0.1", 3000)
	if aerr != nil {
		panic(aerr)
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
	fmt.Println("release:", l.Release(ctx))

	latches, _ := latch.New(store, "orders", "dc1")
	c, err := latches.CreateCountDown(ctx, "shards", 2)
	if err != nil {
		panic(err)
	}
	c.CountDown(ctx)
	n, _ := c.CountDown(ctx)
	fmt.Println("count:", n, "wait:", c.Wait(ctx))
}
