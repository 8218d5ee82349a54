package hbase

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// TestJavaMaskedHolds: the count of Java holds a raw read shows unreleased (one Put
// more than the family markers at or after the oldest live Java Put), on rows as HBase
// returns them (newest version first).
func TestJavaMaskedHolds(t *testing.T) {
	put := func(q string, ts int64, v string) hbaserpc.Cell {
		return hbaserpc.Cell{Family: famLock, Qualifier: []byte(q), Value: []byte(v), Timestamp: ts, Type: hbaserpc.CellPut}
	}
	marker := func(ts int64) hbaserpc.Cell {
		return hbaserpc.Cell{Family: famLock, Qualifier: []byte{}, Timestamp: ts, Type: hbaserpc.CellDeleteFamily}
	}
	cells := func(cs ...hbaserpc.Cell) []hbaserpc.Cell { return cs }
	for _, c := range []struct {
		name string
		raw  []hbaserpc.Cell
		want int
	}{
		{"empty row", nil, 0},
		{"Java hold released", cells(marker(105), put("L", 100, "M")), 0},
		{"released within its millisecond", cells(marker(100), put("L", 100, "M")), 0},
		{"next Java acquire hidden by the release", cells(marker(105), put("L", 105, "M"), put("L", 100, "M")), 1},
		{"hidden acquire stamped before the release (client clock behind)", cells(marker(105), put("L", 103, "M"), put("L", 100, "M")), 1},
		{"hidden holder released since", cells(marker(110), marker(105), put("L", 105, "M"), put("L", 100, "M")), 0},
		{"visible Java holder", cells(put("L", 300, "M")), 1},
		{"older markers do not balance a newer Put", cells(marker(50), put("L", 100, "M")), 1},
		{"dcsync hold (its D:E at the version) is not Java's",
			cells(put("E", 200, "12345678"), put("L", 200, "M"), put("O", 200, "me")), 0},
		{"dcsync release (empty cells at the holder's version)",
			cells(put("E", 200, ""), put("E", 200, "12345678"), put("L", 200, ""), put("L", 200, "M")), 0},
		{"dcsync hold above a hidden Java acquire",
			cells(marker(105), put("E", 200, "12345678"), put("L", 200, "M"), put("L", 105, "M"), put("L", 100, "M")), 1},
		{"two releases of one millisecond (over-counted, documented)",
			cells(marker(105), put("L", 105, "M"), put("L", 100, "M")), 1},
		{"hidden Put stamped before an earlier hold's release",
			cells(marker(90), marker(70), put("L", 80, "M"), put("L", 60, "M"), put("L", 50, "M")), 1},
		{"a release of a lock not held releases nothing",
			cells(marker(110), marker(60), put("L", 100, "M")), 0},
		{"hidden behind an extra release (missed, documented)",
			cells(marker(105), marker(102), put("L", 105, "M"), put("L", 100, "M")), 0},
		{"a Put older than a full window of markers is left out",
			append(cells(marker(180), marker(170), marker(160), marker(150), marker(140), marker(130), marker(120), marker(110)),
				put("L", 100, "M")), 0},
		{"a marker older than a full window of Puts is left out",
			cells(marker(105), marker(50), put("L", 180, "M"), put("L", 170, "M"), put("L", 160, "M"), put("L", 150, "M"),
				put("L", 140, "M"), put("L", 130, "M"), put("L", 120, "M"), put("L", 100, "M")), 7},
	} {
		if got := javaMaskedHolds(c.raw); got != c.want {
			t.Errorf("%s: %d hidden Java holds, want %d", c.name, got, c.want)
		}
	}
}

// TestMaskedCheckRoundTrips (real HBase): the detection adds no call to the common
// path. An acquire of a free lock is 1 call and a release 1, with the detection and
// without it; the raw read rides in the acquire's call. (The first acquire of a row by
// a store also reads its counters first: 1 more call, once; TestLockCalls counts it.)
func TestMaskedCheckRoundTrips(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	cnt := countCalls(s)
	ctx := ctxT(t, time.Minute)
	k := dcsync.Key{Level: dcsync.DC, Client: "rt", Farm: "dc1", Name: "rt_" + randHex(4)}
	// calls returns how many calls f made, and how many of them read raw.
	calls := func(f func() error) (n, raw int) {
		t.Helper()
		cnt.take()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		got := cnt.take()
		for _, c := range got {
			n += c
		}
		return n, got["CheckAndMutateGets"]
	}
	must(t, func() error { _, err := s.AcquireLock(ctx, k, "o0", time.Minute); return err }(), "first acquire")
	must(t, s.ReleaseLock(ctx, k, "o0"), "first release")
	for _, detect := range []bool{false, true, false, true} {
		if detect {
			maskedCheckOff.Delete(s)
		} else {
			maskedCheckOff.Store(s, struct{}{})
		}
		acq, raw := calls(func() error { _, err := s.AcquireLock(ctx, k, "o1", time.Minute); return err })
		rel, _ := calls(func() error { return s.ReleaseLock(ctx, k, "o1") })
		t.Logf("detection %v: acquire %d calls (%d with the raw read), release %d calls", detect, acq, raw, rel)
		if acq != 1 || rel != 1 || (raw == 1) != detect {
			t.Errorf("detection %v: acquire took %d calls (want 1; %d with the raw read), release %d (want 1)", detect, acq, raw, rel)
		}
	}
	maskedCheckOff.Delete(s)
}

// BenchmarkMaskedCheck (real HBase) measures what the raw read costs the common path:
// each iteration acquires and releases one hot lock (so its row carries
// maskedReadVersions versions of each cell) once without the detection and once with
// it, and reports the median and p99 of the acquires of each, and the cells and bytes
// the raw read returns.
func BenchmarkMaskedCheck(b *testing.B) {
	s := openStore(b)
	defer s.Close()
	ctx := context.Background()
	k := dcsync.Key{Level: dcsync.DC, Client: "bench", Farm: "dc1", Name: "masked_" + randHex(4)}
	var off, on []time.Duration
	cycle := func(detect bool) time.Duration {
		if detect {
			maskedCheckOff.Delete(s)
		} else {
			maskedCheckOff.Store(s, struct{}{})
		}
		t0 := time.Now()
		if _, err := s.AcquireLock(ctx, k, "bench-owner-0123456789", time.Minute); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		if err := s.ReleaseLock(ctx, k, "bench-owner-0123456789"); err != nil {
			b.Fatal(err)
		}
		return d
	}
	for range maskedReadVersions {
		cycle(false)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off = append(off, cycle(false))
		on = append(on, cycle(true))
	}
	b.StopTimer()
	maskedCheckOff.Delete(s)
	for _, x := range []struct {
		name string
		lat  []time.Duration
	}{{"off", off}, {"on", on}} {
		slices.Sort(x.lat)
		b.ReportMetric(float64(x.lat[len(x.lat)/2].Microseconds()), "p50-acquire-"+x.name+"-µs")
		b.ReportMetric(float64(x.lat[len(x.lat)*99/100].Microseconds()), "p99-acquire-"+x.name+"-µs")
	}
	g := rawLockGet()
	g.Row = layout.HBaseLockRow(k)
	res, err := s.db.MultiGet(ctx, s.lockTable, []hbaserpc.Get{g})
	if err != nil {
		b.Fatal(err)
	}
	size := 0
	for _, c := range res[0] {
		size += len(c.Row) + len(c.Family) + len(c.Qualifier) + len(c.Value) + 8 + 1
	}
	b.ReportMetric(float64(len(res[0])), "raw-cells")
	b.ReportMetric(float64(size), "raw-bytes")
}
