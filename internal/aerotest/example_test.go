package aerotest_test

import (
	"errors"
	"fmt"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync/internal/aerotest"
)

// Example starts a server, connects the official client to it, and shows
// create-only semantics, an in-doubt write caused by a dropped response,
// and the counters.
func Example() {
	srv, err := aerotest.Start(aerotest.Options{Namespaces: []string{"test"}})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	client, err := as.NewClient(srv.Host(), srv.Port())
	if err != nil {
		panic(err)
	}
	defer client.Close()

	key, _ := as.NewKey("test", "demo", "k1")
	wp := as.NewWritePolicy(0, 60)
	wp.RecordExistsAction = as.CREATE_ONLY
	fmt.Println("first put:", client.Put(wp, key, as.BinMap{"n": 1}) == nil)

	err = client.Put(wp, key, as.BinMap{"n": 2})
	var ae *as.AerospikeError
	fmt.Println("second put:", errors.As(err, &ae) && ae.ResultCode == types.KEY_EXISTS_ERROR)

	// The next write is applied but its response is lost.
	srv.DropResponses(1, nil)
	op := as.NewWritePolicy(0, 0)
	op.MaxRetries = 0
	op.TotalTimeout = 200 * time.Millisecond
	_, opErr := client.Operate(op, key, as.AddOp(as.NewBin("n", 10)))
	fmt.Println("in doubt:", opErr != nil && opErr.IsInDoubt())

	rec, err := client.Get(nil, key)
	if err != nil {
		panic(err)
	}
	fmt.Println("n:", rec.Bins["n"], "generation:", rec.Generation)
	fmt.Println("writes served:", srv.Stats().Writes)
	// Output:
	// first put: true
	// second put: true
	// in doubt: true
	// n: 11 generation: 2
	// writes served: 3
}
