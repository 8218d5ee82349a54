package hbase

import (
	"context"
	"net/url"
	"os"
	"testing"

	"github.com/dcsync/dcsync/queue/queuetest"
)

// TestQueueConformance runs the queue conformance suite (the QueueStore contract and
// package queue on top of it) on the real cluster, in the run's one queue table.
func TestQueueConformance(t *testing.T) {
	zk := zkQuorum(t)
	openQueueStore(t).Close() // the run's tables
	queuetest.Run(t, queuetest.Harness{
		Open: func(t *testing.T) queuetest.QueueTestStore { return openQueueStore(t) },
		ProcessEnv: func(t *testing.T) []string {
			return []string{envZK + "=" + zk, envLockTable + "=" + fixture.lockTable,
				envLatchSuffix + "=" + fixture.latchSuffix, envQueueTable + "=" + queueFixture.table}
		},
		Holes: true,
	})
}

// queueChildMain runs a queuetest child process (TestMain calls it first).
func queueChildMain() {
	queuetest.ChildMain(func(ctx context.Context) (queuetest.QueueTestStore, error) {
		s, err := OpenURL(ctx, &url.URL{Scheme: "hbase", Host: os.Getenv(envZK),
			RawQuery: url.Values{"lock_table": {os.Getenv(envLockTable)}, "latch_table_suffix": {os.Getenv(envLatchSuffix)}}.Encode()})
		if err != nil {
			return nil, err
		}
		setQueueTable(s, os.Getenv(envQueueTable))
		return s, nil
	})
}
