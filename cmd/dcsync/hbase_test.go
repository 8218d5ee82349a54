package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// hbaseCLI returns a cli on the real HBase named by DCSYNC_HBASE_ZK, with lock and latch
// tables of its own (named with prefix and the time), dropped when t ends. Unset: a
// failure with CI=true, a skip otherwise.
func hbaseCLI(t *testing.T, prefix string) *cli {
	t.Helper()
	zk := os.Getenv("DCSYNC_HBASE_ZK")
	if zk == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("DCSYNC_HBASE_ZK is not set (CI=true: HBase must run; see scripts/test)")
		}
		t.Skip("DCSYNC_HBASE_ZK is not set: start HBase with testenv/hbase/up")
	}
	suffix := time.Now().Format("150405")
	lockTable, latchSuffix := prefix+"_locks_"+suffix, prefix+"_"+suffix
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		client, err := hbaserpc.Dial(ctx, hbaserpc.Config{ZKQuorum: zk})
		if err != nil {
			t.Log(err)
			return
		}
		defer client.Close()
		for _, tbl := range []string{lockTable, "D_LTCH_" + latchSuffix} {
			_ = client.DisableTable(ctx, tbl)
			_ = client.DeleteTable(ctx, tbl)
		}
	})
	return &cli{t: t, store: "hbase://" + zk + "?lock_table=" + lockTable + "&latch_table_suffix=" + latchSuffix}
}

// TestHBaseStoreURL runs the CLI flow against the real HBase named by DCSYNC_HBASE_ZK.
func TestHBaseStoreURL(t *testing.T) {
	c := hbaseCLI(t, "cli")
	out := c.want(0, "lock", "acquire", "job", "--ttl", "1m")
	m := ownerRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("acquire printed %q", out)
	}
	c.want(3, "lock", "acquire", "job")
	if st := c.want(0, "lock", "status", "job"); !strings.HasPrefix(st, "held owner="+m[1]) {
		t.Fatalf("status printed %q", st)
	}
	c.want(0, "lock", "release", "job", "--owner", m[1])
	lockErrorsInUsersWords(t, c, "words")
	c.want(0, "latch", "create", "batch", "--count", "2", "--level", "xdc")
	c.want(1, "latch", "create", "batch", "--count", "2", "--level", "xdc")
	c.want(0, "latch", "countdown", "batch", "--level", "xdc")
	if n := c.want(0, "latch", "countdown", "batch", "--level", "xdc"); n != "0\n" {
		t.Fatalf("countdown printed %q", n)
	}
	c.want(0, "latch", "await", "batch", "--level", "xdc", "--timeout", "30s")
	c.want(2, "--store", strings.Split(c.store, "?")[0]+"?nonsense=1", "latch", "count", "batch")
}
