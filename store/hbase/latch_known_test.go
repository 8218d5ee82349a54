package hbase

import (
	"bytes"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// TestLatchCountDownCalls (real HBase): the first DC count-down of a latch by a store is
// 2 calls (the row and the server's clock, then the write), every later one 1; another
// store's update in between is noticed from the Increment's result and the version is
// replaced (2 calls), the counts exact throughout, and no older version of the cell is
// left alive under the newest (each is covered by a delete marker), so none can
// reappear when the newest ends.
func TestLatchCountDownCalls(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	other := openStore(t)
	defer other.Close()
	cnt := countCalls(s)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc1")
	must(t, s.CreateLatch(ctx, k, 100, time.Minute), "create")
	want := int64(100)
	down := func(st *Store, calls int) {
		t.Helper()
		cnt.take()
		n, err := st.AddLatch(ctx, k, -1)
		must(t, err, "count-down")
		want--
		if n != want {
			t.Fatalf("count %d, want %d", n, want)
		}
		if got := cnt.take(); st == s && sumCalls(got) != calls {
			t.Errorf("count-down: %v, want %d calls", got, calls)
		}
	}
	c := shared(t)
	q := []byte("count_dc1")
	// Every version of the cell but the newest is at or below a delete marker.
	alive := func(when string) {
		t.Helper()
		raw, err := c.MultiGet(ctx, s.latchTable, []hbaserpc.Get{{Row: latchRow(k), Raw: true, MaxVersions: 1000}})
		must(t, err, "raw read")
		var newest, deleted int64
		var puts []int64
		for _, x := range raw[0] {
			if !bytes.Equal(x.Qualifier, q) {
				continue
			}
			switch x.Type {
			case hbaserpc.CellPut:
				newest = max(newest, x.Timestamp)
				puts = append(puts, x.Timestamp)
			case hbaserpc.CellDeleteColumn:
				deleted = max(deleted, x.Timestamp)
			}
		}
		for _, ts := range puts {
			if ts != newest && ts > deleted {
				t.Errorf("%s: version %d of the cell is alive under the newest %d (deleted up to %d): it reappears when the newest ends", when, ts, newest, deleted)
			}
		}
	}
	down(s, 2)
	for i := 0; i < 5; i++ {
		down(s, 1)
		alive("after a count-down")
	}
	for i := 0; i < 3; i++ {
		down(other, 0)
		down(s, 2) // the write, then the replacement of its version
		alive("after a count-down following another store's")
		down(s, 1)
	}
	got, err := s.ReadLatches(ctx, []dcsync.Key{k})
	must(t, err, "read")
	if !got[0].Found || got[0].Count != want {
		t.Fatalf("read %+v, want %d", got[0], want)
	}
}
