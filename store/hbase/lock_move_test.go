package hbase

import (
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// TestLockMoveCalls (real HBase, one region server): AcquireLocks of N new keys is
// two store calls whatever N (the rows' counters and the earlier layout's, one
// MultiGet; the take of every lock, its counter created above fenceBase, with its read
// back, one MultiMutate), each one Multi RPC; taking them again once released is
// one call; ReleaseLocks of N locks the store holds is one call; and
// ClaimQueuePartitions of N partitions is two (one MultiGet, one MultiMutate). Every
// lock's token is above the one before it and is what InspectLock reports; every
// claim is what ClaimQueuePartition would have left.
func TestLockMoveCalls(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	cnt := countCalls(s)
	ctx := ctxT(t, 2*time.Minute)
	const n = 40
	acq := make([]driver.LockAcquire, n)
	rel := make([]driver.LockRelease, n)
	for i := range acq {
		k := key(dcsync.XDC, "dc1")
		acq[i] = driver.LockAcquire{Key: k, Owner: fmt.Sprint("o", i), TTL: time.Minute}
		rel[i] = driver.LockRelease{Key: k, Owner: acq[i].Owner}
	}
	// Warm up: the table's regions located, the queue's spec known.
	_, err := s.InspectLocks(ctx, []dcsync.Key{acq[0].Key, acq[n-1].Key})
	must(t, err, "InspectLocks")
	last := make([]uint64, n)
	for round, want := range []int{2, 1} {
		cnt.take()
		before := shared(t).Calls()
		res, err := s.AcquireLocks(ctx, acq)
		must(t, err, "AcquireLocks")
		if got, calls := rpcs(t, before), cnt.take(); sumCalls(calls) != want || got["Multi"] != int64(want) || len(got) != 1 {
			t.Errorf("AcquireLocks %d of %d locks: store calls %v, RPCs %v; want %d calls, one Multi RPC each", round, n, calls, got, want)
		}
		for i, r := range res {
			must(t, r.Err, fmt.Sprintf("acquire %d of lock %d", round, i))
			if r.State.Owner != acq[i].Owner || r.State.Token <= last[i] {
				t.Fatalf("acquire %d of lock %d: %+v, want owner %s and a token above %d", round, i, r.State, acq[i].Owner, last[i])
			}
			last[i] = r.State.Token
			in, err := s.InspectLock(ctx, acq[i].Key)
			must(t, err, "InspectLock")
			if in.Owner != acq[i].Owner || in.Token != r.State.Token {
				t.Fatalf("lock %d after the batch: %+v, the batch reported %+v", i, in, r.State)
			}
		}
		cnt.take()
		res, err = s.ReleaseLocks(ctx, rel)
		must(t, err, "ReleaseLocks")
		if calls := cnt.take(); sumCalls(calls) != 1 || calls["MultiMutate"] != 1 {
			t.Errorf("ReleaseLocks of %d locks: store calls %v; want one MultiMutate", n, calls)
		}
		for i, r := range res {
			must(t, r.Err, fmt.Sprintf("release %d of lock %d", round, i))
			_, err := s.InspectLock(ctx, acq[i].Key)
			wantCode(t, err, dcsync.NotFound, "InspectLock after the release")
		}
	}

	name := qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: n, Groups: []string{"g"}})
	claims := make([]driver.QueueClaim, n)
	for i := range claims {
		claims[i] = driver.QueueClaim{P: i, Token: uint64(10 + i)}
	}
	_, err = s.ClaimQueuePartitions(ctx, name, "g", nil)
	must(t, err, "ClaimQueuePartitions of no partition")
	cnt.take()
	res, err := s.ClaimQueuePartitions(ctx, name, "g", claims)
	must(t, err, "ClaimQueuePartitions")
	if calls := cnt.take(); sumCalls(calls) != 2 || calls["MultiGet"] != 1 || calls["MultiMutate"] != 1 {
		t.Errorf("ClaimQueuePartitions of %d partitions: store calls %v; want one MultiGet and one MultiMutate", n, calls)
	}
	for i, r := range res {
		must(t, r.Err, fmt.Sprint("claim ", i))
		off, err := s.ClaimQueuePartition(ctx, name, "g", i, claims[i].Token)
		must(t, err, "ClaimQueuePartition with the same token")
		if off != r.Offset || off.Token != claims[i].Token {
			t.Fatalf("partition %d: the batch reported %+v, the store holds %+v", i, r.Offset, off)
		}
	}
}
