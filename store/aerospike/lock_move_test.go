package aerospike_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestLockMover (one node, through the counting proxy): AcquireLocks of N free locks is
// two batch commands whatever N (the takes of the lock records, then the numbering of
// the acquisitions on their fence records: never in one command, see AcquireLock),
// ReleaseLocks of N one, ClaimQueuePartitions of N partitions one; every token is above
// the key's earlier ones and is what InspectLock reports, every claim what
// ClaimQueuePartition would have left.
func TestLockMover(t *testing.T) {
	p := startProxy(t)
	s := newStore(t, dial(t, p.Addr()), aerospike.Config{})
	ctx := ctxT(t)
	const n = 50
	base := unique("move")
	acq := make([]driver.LockAcquire, n)
	rel := make([]driver.LockRelease, n)
	for i := range acq {
		k := dcsync.Key{Level: dcsync.XDC, Client: client, Farm: "-", Name: fmt.Sprintf("%s-%d", base, i)}
		acq[i] = driver.LockAcquire{Key: k, Owner: fmt.Sprint("owner-", i), TTL: time.Minute}
		rel[i] = driver.LockRelease{Key: k, Owner: acq[i].Owner}
	}
	last := make([]uint64, n)
	for round := range 2 {
		var res []driver.LockResult
		wantTrips(t, fmt.Sprint("AcquireLocks ", round), trips(t, p, func() {
			var err error
			res, err = s.AcquireLocks(ctx, acq)
			must(t, err, "AcquireLocks")
		}), 0, 0, 0, 2)
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
		wantTrips(t, fmt.Sprint("ReleaseLocks ", round), trips(t, p, func() {
			res, err := s.ReleaseLocks(ctx, rel)
			must(t, err, "ReleaseLocks")
			for i, r := range res {
				must(t, r.Err, fmt.Sprintf("release %d of lock %d", round, i))
			}
		}), 0, 0, 0, 1)
		for i := range acq {
			_, err := s.InspectLock(ctx, acq[i].Key)
			if !isCode(err, dcsync.NotFound) {
				t.Fatalf("InspectLock of lock %d after the release: %v, want NotFound", i, err)
			}
		}
	}

	name := unique("moveq")
	must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: n, Groups: []string{"g"}}), "CreateQueue")
	claims := make([]driver.QueueClaim, n)
	for i := range claims {
		claims[i] = driver.QueueClaim{P: i, Token: uint64(10 + i)}
	}
	_, err := s.ClaimQueuePartitions(ctx, name, "g", nil) // the spec known
	must(t, err, "ClaimQueuePartitions of no partition")
	var res []driver.QueueClaimResult
	wantTrips(t, "ClaimQueuePartitions", trips(t, p, func() {
		res, err = s.ClaimQueuePartitions(ctx, name, "g", claims)
		must(t, err, "ClaimQueuePartitions")
	}), 0, 0, 0, 1)
	for i, r := range res {
		must(t, r.Err, fmt.Sprint("claim ", i))
		off, err := s.ClaimQueuePartition(ctx, name, "g", i, claims[i].Token)
		must(t, err, "ClaimQueuePartition with the same token")
		if off != r.Offset || off.Token != claims[i].Token {
			t.Fatalf("partition %d: the batch reported %+v, the store holds %+v", i, r.Offset, off)
		}
	}
}
