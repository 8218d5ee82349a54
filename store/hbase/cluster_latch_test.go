package hbase

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// TestClusterLatchResendAfterMove (DCSYNC_CLUSTER=1, on testenv/hbase/up-cluster's two
// region servers) makes the defect of docs/stores/hbase.md's "Exactly-once latch
// updates" happen for real: a latch update is applied by the region server holding the
// latch row, its reply is held back while the row's region moves cleanly to the other
// region server, and then the reply is dropped (the call's outcome is unknown). The new
// server rebuilt no nonces (a clean move replays no WAL), so the update's Increment,
// sent again with its nonce, would be applied a second time; the update's op lane
// makes a resend refused, and the store's read of the row finds the update's value in
// it. The count must move by exactly the update's delta, on the one-call DC path,
// the DC path that reads first, and at level XDC. With the op lane taken
// out of the update (the code before: the client resends the Increment with its
// nonce), it is applied again (count moved by 2).
func TestClusterLatchResendAfterMove(t *testing.T) {
	if os.Getenv(envCluster) != "1" {
		t.Skip("DCSYNC_CLUSTER=1 runs the cluster tests (on testenv/hbase/up-cluster)")
	}
	c := &hbCluster{zk: os.Getenv(envClusterZK), ctl: os.Getenv(envClusterCtl)}
	if c.zk == "" || c.ctl == "" {
		t.Fatalf("%s and %s must be set: start a cluster with testenv/hbase/up-cluster and export what it prints", envClusterZK, envClusterCtl)
	}
	if _, err := c.command(t, "wait"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The reply hook: when armed, it lets skip replies of writes (Mutate, Multi) through,
	// then holds the next one while the latch row's region moves to the other region
	// server, and drops it.
	var (
		armed, skip atomic.Int32
		moveCmd     atomic.Pointer[string]
		moved       atomic.Int32
	)
	drop := func(method string) bool {
		if method != "Mutate" && method != "Multi" || armed.Load() == 0 {
			return false
		}
		if skip.Add(-1) >= 0 {
			return false
		}
		armed.Store(0)
		if _, err := c.command(t, *moveCmd.Load()); err != nil {
			t.Errorf("moving the latch row's region: %v", err)
		} else {
			moved.Add(1)
		}
		return true
	}
	plain, err := hbaserpc.Dial(ctx, hbaserpc.Config{ZKQuorum: c.zk, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() }) // after the table's cleanup below
	hooked, err := hbaserpc.Dial(ctx, hbaserpc.Config{ZKQuorum: c.zk, Logger: testLogger(), DropReply: drop})
	if err != nil {
		t.Fatal(err)
	}
	defer hooked.Close()
	cfg := Config{LatchTableSuffix: "dcsync_cluster_op_" + randHex(4)}
	s, err := New(ctx, hooked, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ready(ctx, "test", &s.latches); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := plain.DisableTable(ctx, s.latchTable); err != nil {
			t.Logf("cleanup: disable %s: %v", s.latchTable, err)
		}
		if err := plain.DeleteTable(ctx, s.latchTable); err != nil {
			t.Logf("cleanup: delete %s: %v", s.latchTable, err)
		}
	})
	if _, err := c.command(t, "wait"); err != nil {
		t.Fatal(err)
	}
	// where returns the index (in key order, as cluster-ctl's move counts) and the
	// server of the region holding row.
	where := func(row []byte) (int, string) {
		t.Helper()
		regions, err := plain.Regions(ctx, s.latchTable)
		must(t, err, "listing the latch table's regions")
		for i, r := range regions {
			if bytes.Compare(row, r.StartKey) >= 0 && (len(r.EndKey) == 0 || bytes.Compare(row, r.EndKey) < 0) {
				return i, r.Server
			}
		}
		t.Fatalf("no region holds row %q", row)
		return 0, ""
	}
	for _, tc := range []struct {
		name  string
		level dcsync.Level
		warm  bool // a first update, so that the store updates the cell in one call
		skip  int32
	}{
		{"DCOneCall", dcsync.DC, true, 0},
		{"DCRead", dcsync.DC, false, 1}, // the reply of GetWithClock's Multi passes
		{"XDC", dcsync.XDC, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := key(tc.level, "dc1")
			must(t, s.CreateLatch(ctx, k, 100, 10*time.Minute), "create")
			if tc.warm {
				_, err := s.AddLatch(ctx, k, -1)
				must(t, err, "first count-down")
			}
			before := readCount(t, s, k)
			row := latchRow(k)
			idx, from := where(row)
			cmd := fmt.Sprintf("move %s 1 %d", s.latchTable, idx)
			moveCmd.Store(&cmd)
			n0 := moved.Load()
			skip.Store(tc.skip)
			armed.Store(1)
			n, err := s.AddLatch(ctx, k, -1)
			armed.Store(0)
			must(t, err, "count-down whose reply was lost across the move")
			if moved.Load() != n0+1 {
				t.Fatal("no reply was held and dropped: the region did not move under the update")
			}
			_, to := where(row)
			if to == from {
				t.Fatalf("the latch row's region is still on %s", from)
			}
			after := readCount(t, s, k)
			t.Logf("region %d moved from %s to %s under the update; count %d -> %d, AddLatch returned %d", idx, from, to, before, after, n)
			if after != before-1 {
				t.Fatalf("count went from %d to %d after one count-down: applied twice (once per region server)", before, after)
			}
			if n != after {
				t.Fatalf("AddLatch returned %d, the count is %d", n, after)
			}
		})
	}
}
