package hbase

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/chaos"
)

// init runs a queue chaos worker when this test binary was started as one (before
// TestMain: the worker needs nothing else of the package).
func init() {
	chaos.QueueChildMain(func(ctx context.Context, raw string) (driver.Store, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, err
		}
		return OpenURL(ctx, u)
	})
}

// queueOnly hands the chaos run the store without its Close: the test closes it.
type queueOnly struct{ driver.Store }

// TestQueueChaos runs internal/chaos's queue model on the real HBase: producers and
// consumers of two groups as goroutines and as processes; consumer processes paused
// (SIGSTOP) past their lease, processes killed (SIGKILL) and restarted, goroutine
// consumers frozen past their lease, consumers that nack, leave and join; and, below
// the goroutine workers' store, the store's fault layer: a conditional write (offset
// claims and commits, lock writes) applied with its reply lost, or not sent with the
// same error. The history of at least chaos.QueueCIEvents events (DCSYNC_SOAK: for
// that long) is checked by chaos.CheckQueue.
func TestQueueChaos(t *testing.T) {
	zk := zkQuorum(t)
	s := openQueueStore(t)
	t.Cleanup(func() { s.Close() })
	f := &faulty{ops: s.db}
	s.db = f
	child := url.URL{Scheme: "hbase", Host: zk, RawQuery: url.Values{"lock_table": {fixture.lockTable},
		"latch_table_suffix": {fixture.latchSuffix}, "queue_table": {queueFixture.table}}.Encode()}
	sc := chaos.QueueScenario{
		Open:      func(context.Context) (driver.Store, error) { return queueOnly{s}, nil },
		StoreURL:  child.String(),
		Producers: 1, Consumers: 2, ProcessProducers: 1, ProcessConsumers: 1,
		Events: chaos.QueueCIEvents, Duration: 3 * time.Minute, Batch: 64,
		Churn: 30, Pause: true, Kill: true, Freeze: true,
		Fault:      f.lostOrNotSent,
		FaultEvery: 400 * time.Millisecond,
	}
	sc.Soak()
	chaos.RunQueueT(t, sc, chaos.QueueCIEvents)
}
