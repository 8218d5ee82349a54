package hbase

import (
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/layout"
)

// TestLatchOneCallServerClockBehind (real HBase; found by the review of issue 15): the one-call
// DC count-down (latch_known.go) bounds the server's time from below by a clock probe
// the store made earlier, S + (t - R). That holds for the region server that answered
// the probe; after the region moves to another server whose clock is behind (HBase
// tolerates 30 s of skew between servers, hbase.master.maxclockskew), the bound is too
// high, the Increment's TTL (latch end - bound) too short, and the new version of the
// farm cell ends before the latch does: the DC latch would vanish early. addKnown sees
// it in the Increment's result (a version below the bound) and replaces that version at
// once with one that ends at the latch's end. Simulated by moving the
// remembered probe 25 s ahead (what a probe of a server 25 s ahead of the current one
// gives); the full path reads the serving server's clock and is not affected.
func TestLatchOneCallServerClockBehind(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	k := key(dcsync.DC, "dc1")
	const ttl = 40 * time.Second
	created := time.Now()
	must(t, s.CreateLatch(ctx, k, 100, ttl), "create")
	_, err := s.AddLatch(ctx, k, -1) // the full path: remembers the cell and a probe
	must(t, err, "first count-down")
	row, q := latchRow(k), layout.HBaseLatchQualifier(k.Farm)
	l, ok := s.latchMem.get(row, q)
	if !ok {
		t.Fatal("the first count-down left no memory of the cell")
	}
	l.anchorS += (25 * time.Second).Milliseconds()
	s.latchMem.put(row, q, l)
	n, err := s.AddLatch(ctx, k, -1) // the one-call path
	must(t, err, "second count-down")
	if n != 98 {
		t.Fatalf("count %d, want 98", n)
	}
	time.Sleep(20 * time.Second)
	if time.Since(created) >= ttl-2*time.Second {
		t.Skip("the machine stalled until the latch's own end; nothing to tell")
	}
	got, err := s.ReadLatches(ctx, []dcsync.Key{k})
	must(t, err, "read")
	if !got[0].Found {
		t.Errorf("the DC latch (ttl %v) is gone %v after its creation: the one-call count-down gave the farm cell a TTL that ends it early", ttl, time.Since(created).Round(time.Second))
	}
}
