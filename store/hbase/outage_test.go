package hbase

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// envOutage opts in to TestOutage, which stops the HBase it is given: scripts/test runs
// it last, and only against the HBase it started itself.
const envOutage = "DCSYNC_HBASE_OUTAGE_TEST"

// TestOutage stops the real HBase in the middle of the test and checks that every store
// operation then fails with a Connection (or RetriesExhausted) error when its ctx
// deadline passes, instead of hanging.
func TestOutage(t *testing.T) {
	if os.Getenv(envOutage) != "1" {
		t.Skip(envOutage + " is not 1: this test stops HBase; scripts/test runs it last")
	}
	zk := zkQuorum(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	suffix := time.Now().Format("150405")
	s, err := OpenURL(ctx, &url.URL{Scheme: "hbase", Host: zk,
		RawQuery: "lock_table=outage_" + suffix + "&latch_table_suffix=outage_" + suffix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k := dcsync.Key{Level: dcsync.DC, Client: "outage", Farm: "dc1", Name: "n"}
	if _, err := s.AcquireLock(ctx, k, "owner-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateLatch(ctx, k, 3, time.Minute); err != nil {
		t.Fatal(err)
	}

	down := exec.Command("../../testenv/hbase/down")
	if out, err := down.CombinedOutput(); err != nil {
		t.Fatalf("testenv/hbase/down: %v\n%s", err, out)
	}

	ops := map[string]func(context.Context) error{
		"AcquireLock": func(ctx context.Context) error { _, err := s.AcquireLock(ctx, k, "owner-2", time.Minute); return err },
		"RefreshLock": func(ctx context.Context) error { _, err := s.RefreshLock(ctx, k, "owner-1", time.Minute); return err },
		"ReleaseLock": func(ctx context.Context) error { return s.ReleaseLock(ctx, k, "owner-1") },
		"InspectLock": func(ctx context.Context) error { _, err := s.InspectLock(ctx, k); return err },
		"AddLatch":    func(ctx context.Context) error { _, err := s.AddLatch(ctx, k, -1); return err },
		"ReadLatches": func(ctx context.Context) error { _, err := s.ReadLatches(ctx, []dcsync.Key{k}); return err },
	}
	for name, op := range ops {
		opCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		done := make(chan error, 1)
		go func() { done <- op(opCtx) }()
		select {
		case err := <-done:
			if c := dcsync.CodeOf(err); c != dcsync.Connection && c != dcsync.RetriesExhausted {
				t.Errorf("%s with HBase down: %v (code %v), want Connection or RetriesExhausted", name, err, c)
			}
		case <-time.After(time.Minute): // a bound on a hang, far past the 3s deadline
			t.Errorf("%s with HBase down did not return a minute after its 3s deadline", name)
		}
		cancel()
	}
}
