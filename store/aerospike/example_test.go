package aerospike_test

import (
	"context"
	"fmt"
	"net/url"
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

// ExampleNew takes a client the application already configured (authentication,
// timeouts, several seed hosts), as the Java libraries take one, and sets the store's
// sets and retry policy. The Config fields left zero take their defaults.
func ExampleNew() {
	policy := as.NewClientPolicy()
	policy.User, policy.Password = "app", "secret" // Enterprise security, if enabled
	policy.Timeout = 5 * time.Second
	client, aerr := as.NewClientWithPolicyAndHost(policy,
		as.NewHost("aero1.example.com", 3000), as.NewHost("aero2.example.com", 3000))
	if aerr != nil {
		panic(aerr)
	}
	defer client.Close()

	store, err := aerospike.New(client, aerospike.Config{
		Namespace:      "locks",             // nsup-period > 0; see docs/stores/aerospike.md
		LockSetSuffix:  "distributed_lock",  // sets DC#<farm>#distributed_lock, XDC#distributed_lock
		LatchSetSuffix: "distributed_latch", // set D_LTCH#distributed_latch
		Attempts:       5,
		Timeout:        time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()
}

// ExampleOpenURL dials the cluster itself; the store owns that client and Close closes
// it.
func ExampleOpenURL() {
	u, err := url.Parse("aerospike://127.0.0.1:3000/test?lock_set_suffix=distributed_lock&timeout=500ms")
	if err != nil {
		panic(err)
	}
	store, err := aerospike.OpenURL(context.Background(), u)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	fmt.Println("opened")
}
