package aerospike_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/chaos"
	"github.com/dcsync/dcsync/store/aerospike"
)

// init runs a queue chaos worker when this test binary was started as one (before
// TestMain: the worker needs nothing else of the package).
func init() {
	chaos.QueueChildMain(func(ctx context.Context, raw string) (driver.Store, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		return aerospike.OpenURL(ctx, u)
	})
}

// queueOnly hands the chaos run the store without its Close: the test closes the
// client.
type queueOnly struct{ driver.Store }

// TestQueueChaos runs internal/chaos's queue model on the real Aerospike server:
// producers and consumers of two groups as goroutines (through the fault proxy, which
// drops replies after the server applied the command and breaks connections) and as
// processes (straight to the server); consumer processes paused (SIGSTOP) past their
// lease, processes killed (SIGKILL) and restarted, goroutine consumers frozen past
// their lease, consumers that nack, leave and join. The history of at least
// chaos.QueueCIEvents events (DCSYNC_SOAK: for that long) is checked by
// chaos.CheckQueue.
func TestQueueChaos(t *testing.T) {
	addr := realServer(t)
	p := startProxy(t)
	c := dial(t, p.Addr())
	sc := chaos.QueueScenario{
		Open: func(context.Context) (driver.Store, error) {
			s, err := aerospike.New(c, aerospike.Config{Namespace: namespace, Timeout: 300 * time.Millisecond, Attempts: 8})
			return queueOnly{s}, err
		},
		StoreURL:  storeURL(addr, namespace).String(),
		Producers: 1, Consumers: 2, ProcessProducers: 1, ProcessConsumers: 1,
		Events: chaos.QueueCIEvents, Duration: 3 * time.Minute, Batch: 64,
		Churn: 30, Pause: true, Kill: true, Freeze: true,
		Fault:      p.dropOrReset,
		FaultEvery: 400 * time.Millisecond,
	}
	sc.Soak()
	chaos.RunQueueT(t, sc, chaos.QueueCIEvents)
}
