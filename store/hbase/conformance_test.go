package hbase

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
)

// TestConformance runs the conformance suite (locks, latches, listing, the queue store
// contract and package queue on top of it), multi-process cases included, on the real
// cluster, in the run's tables (its one queue table among them).
func TestConformance(t *testing.T) {
	zk := zkQuorum(t)
	openQueueStore(t).Close() // the run's tables
	drivertest.Run(t, drivertest.Harness{
		Open: func(t *testing.T) driver.Store { return openQueueStore(t) },
		ProcessEnv: func(t *testing.T) []string {
			return []string{envZK + "=" + zk, envLockTable + "=" + fixture.lockTable,
				envLatchSuffix + "=" + fixture.latchSuffix, envQueueTable + "=" + queueFixture.table}
		},
		Holes:            true,
		ReserveQueueSeqs: reserveQueueSeqs,
	})
}

// conformanceChildMain runs a child process of the suite's multi-process cases, on the
// run's tables (TestMain calls it first).
func conformanceChildMain() {
	drivertest.ChildMain(func(ctx context.Context) (driver.Store, error) {
		q := url.Values{"lock_table": {os.Getenv(envLockTable)}, "latch_table_suffix": {os.Getenv(envLatchSuffix)}}
		// The secure conformance run's children add the Kerberos parameters.
		if sec, err := url.ParseQuery(os.Getenv(envSecurity)); err == nil {
			for k, v := range sec {
				q[k] = v
			}
		}
		s, err := OpenURL(ctx, &url.URL{Scheme: "hbase", Host: os.Getenv(envZK), RawQuery: q.Encode()})
		if err != nil {
			return nil, err
		}
		setQueueTable(s, os.Getenv(envQueueTable))
		return s, nil
	})
}

// reserveQueueSeqs reserves n seqs of partition p as an append's reservation does, and
// writes none of them: the suite's holes (drivertest.Harness.ReserveQueueSeqs).
func reserveQueueSeqs(ctx context.Context, st driver.Store, name string, p, n int) (uint64, error) {
	s := st.(*Store)
	table, db, err := s.qready(ctx, "test.Reserve")
	if err != nil {
		return 0, err
	}
	evs, idx := make([]driver.QueueEvent, n), make([]int, n)
	for i := range evs {
		evs[i].Partition, idx[i] = p, i
	}
	a := newAppender(s, db, table, name, "test.Reserve", time.Hour, evs)
	if err := a.reserve(ctx, idx); err != nil {
		return 0, err
	}
	return a.seq[0], nil
}
