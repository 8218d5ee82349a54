package aerospike_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestConformance runs the conformance suite (locks, latches, listing, the queue store
// contract and package queue on top of it), multi-process cases included, against the
// real server.
func TestConformance(t *testing.T) {
	addr := realServer(t)
	drivertest.Run(t, drivertest.Harness{
		Open: func(t *testing.T) driver.Store {
			s, err := aerospike.OpenURL(context.Background(), storeURL(addr, namespace))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		ProcessEnv: func(t *testing.T) []string {
			return []string{envChildAddr + "=" + addr, envChildNS + "=" + namespace}
		},
		Holes:            true,
		ReserveQueueSeqs: reserveQueueSeqs,
	})
}

// conformanceChildMain runs a child process of the suite's multi-process cases (TestMain
// calls it first).
func conformanceChildMain() {
	drivertest.ChildMain(func(ctx context.Context) (driver.Store, error) {
		return aerospike.OpenURL(ctx, storeURL(os.Getenv(envChildAddr), os.Getenv(envChildNS)))
	})
}

// reserveQueueSeqs reserves n seqs of partition p as an append's try does, and writes
// none of them: the suite's holes (drivertest.Harness.ReserveQueueSeqs).
func reserveQueueSeqs(ctx context.Context, s driver.Store, name string, p, n int) (uint64, error) {
	return aerospike.ReserveQueueSeqs(ctx, s.(*aerospike.Store), name, p, n, time.Now().UnixNano())
}
