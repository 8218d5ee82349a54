package aerospike_test

import (
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestReviewLockMoverRespectsJavaLocks (review, issue 17; real server): a lock the
// Java lock manager holds (its record: farm##data and farm##uat only, no owner or
// lease bin) is to a batched acquire and release what it is to the single
// operations: AcquireLocks reports LockUnavailable with no owner and token 0,
// ReleaseLocks LockLost, and the Java record is left exactly as it was.
func TestReviewLockMoverRespectsJavaLocks(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	ctx := ctxT(t)
	jname := unique("java-move")
	jk := key(t, dc1Locks, client+"#"+jname)
	must(t, javaAcquire(c, jk, "dc1"), "java acquire")
	k := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: jname}
	free := dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: unique("free-move")}

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
	rec, err := c.Get(nil, jk)
	must(t, err, "raw get")
	if rec.Generation != 1 || len(rec.Bins) != 2 {
		t.Fatalf("the batch changed the Java lock: gen %d bins %v", rec.Generation, rec.Bins)
	}
}
