package hbase

import (
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// TestReviewLockMoverRespectsJavaLocks (review, issue 17; real HBase): a lock the Java
// lock manager holds (D:L put if absent, no owner cell) is to a batched acquire and
// release what it is to the single operations: AcquireLocks reports LockUnavailable
// (no owner, token 0) beside a free lock it takes, ReleaseLocks LockLost, and the
// Java hold stays.
func TestReviewLockMoverRespectsJavaLocks(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	k := key(dcsync.XDC, "dc1")
	free := key(dcsync.XDC, "dc1")
	row := layout.HBaseLockRow(k)
	if !javaAcquire(t, ctx, row, time.Now().UnixMilli(), time.Minute) {
		t.Fatal("Java-style acquire refused")
	}
	res, err := s.AcquireLocks(ctx, []driver.LockAcquire{{Key: free, Owner: "go", TTL: time.Minute}, {Key: k, Owner: "go", TTL: time.Minute}})
	must(t, err, "AcquireLocks")
	must(t, res[0].Err, "AcquireLocks of the free lock")
	wantCode(t, res[1].Err, dcsync.LockUnavailable, "AcquireLocks over a Java lock")
	if res[1].State.Owner != "" || res[1].State.Token != 0 {
		t.Fatalf("batched acquire of a Java lock reports holder %+v, want no owner and token 0", res[1].State)
	}
	rel, err := s.ReleaseLocks(ctx, []driver.LockRelease{{Key: free, Owner: "go"}, {Key: k, Owner: "go"}})
	must(t, err, "ReleaseLocks")
	must(t, rel[0].Err, "ReleaseLocks of the lock taken")
	wantCode(t, rel[1].Err, dcsync.LockLost, "ReleaseLocks of a Java lock")
	cells, err := shared(t).Get(ctx, fixture.lockTable, row, hbaserpc.Column{Family: famLock, Qualifier: qualLock})
	must(t, err, "raw get")
	if len(cells) != 1 {
		t.Fatalf("the Java hold is gone after the batch: %v", cells)
	}
	_, _, _ = shared(t).CheckAndMutate(ctx, fixture.lockTable, row, hbaserpc.IfEquals(famLock, qualLock, lockMarker), &hbaserpc.Delete{Row: row})
}
