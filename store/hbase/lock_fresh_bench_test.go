package hbase

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// BenchmarkLockFreshAcquire (real HBase) measures what a group's members joining
// together cost the store: freshAcquirers goroutines on one Store, each taking a key
// never taken with AcquireLock (a queue's member slots of a new group), all released
// once every one is held. It reports the median wall time from the first acquire sent
// to the last one held, and the HBase RPCs per acquire (the client's own counters):
//
//	DCSYNC_HBASE_ZK=127.0.0.1:22818 go test -run '^$' -bench LockFreshAcquire -benchtime 10x ./store/hbase/
func BenchmarkLockFreshAcquire(b *testing.B) {
	s := openStore(b)
	defer s.Close()
	c := shared(b)
	ctx := context.Background()
	const n = freshAcquirers
	if _, err := s.InspectLock(ctx, key(dcsync.XDC, "dc1")); dcsync.CodeOf(err) != dcsync.NotFound {
		b.Fatal(err) // the table is ready before the clock starts
	}
	rpcs := func() int64 {
		var sum int64
		for _, v := range c.Calls() {
			sum += v
		}
		return sum
	}
	var walls []time.Duration
	var calls int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		keys := make([]dcsync.Key, n)
		for j := range keys {
			keys[j] = dcsync.Key{Level: dcsync.XDC, Client: "hbtest", Farm: "dc1", Name: fmt.Sprintf("fresh-%s/m/%d", randHex(6), j)}
		}
		before := rpcs()
		t0 := time.Now()
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.AcquireLock(ctx, k, "member", 20*time.Second); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		walls = append(walls, time.Since(t0))
		calls += rpcs() - before
		b.StopTimer()
		for _, k := range keys {
			if err := s.ReleaseLock(ctx, k, "member"); err != nil {
				b.Error(err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(walls)
	b.ReportMetric(float64(walls[len(walls)/2].Microseconds())/1000, "ms-wall-p50")
	b.ReportMetric(float64(calls)/float64(b.N*n), "rpcs/acquire")
}

// freshAcquirers is how many keys BenchmarkLockFreshAcquire takes at once: the
// consumers of the scale benchmark's group (C = 64).
const freshAcquirers = 64
