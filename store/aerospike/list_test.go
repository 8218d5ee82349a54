package aerospike_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/aerospike"
)

// TestListLocksAndLatches lists a fresh client's locks and latches on the real server
// (scans of the namespace and of the latch set; a unique client id keeps other tests'
// records out).
func TestListLocksAndLatches(t *testing.T) {
	s := newStore(t, realClient(t), aerospike.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := make([]byte, 6)
	rand.Read(b)
	client := "list" + hex.EncodeToString(b)
	k := func(l dcsync.Level, farm, name string) dcsync.Key {
		return dcsync.Key{Level: l, Client: client, Farm: farm, Name: name}
	}
	for _, c := range []struct {
		k     dcsync.Key
		owner string
	}{{k(dcsync.DC, "dc1", "a"), "o1"}, {k(dcsync.XDC, "dc1", "b"), "o2"}, {k(dcsync.DC, "dc1", "c"), "o3"}} {
		if _, err := s.AcquireLock(ctx, c.k, c.owner, time.Minute); err != nil {
			t.Fatalf("acquire %s: %v", c.k, err)
		}
	}
	if err := s.ReleaseLock(ctx, k(dcsync.DC, "dc1", "c"), "o3"); err != nil {
		t.Fatal(err)
	}
	locks, err := s.ListLocks(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 2 || locks[0].Key != k(dcsync.DC, "dc1", "a") || locks[0].Owner != "o1" || locks[0].Token == 0 ||
		locks[1].Key != (dcsync.Key{Level: dcsync.XDC, Client: client, Name: "b"}) || locks[1].Owner != "o2" {
		t.Fatalf("ListLocks = %+v", locks)
	}
	if left := time.Until(locks[0].Expires); left <= 0 || left > time.Minute+5*time.Second {
		t.Fatalf("lock expires in %v", left)
	}

	for _, c := range []struct {
		k     dcsync.Key
		count int64
		ttl   time.Duration
	}{{k(dcsync.DC, "dc1", "l1"), 3, time.Hour}, {k(dcsync.DC, "dc2", "l1"), 2, time.Hour}, {k(dcsync.DC, "dc1", "l2"), 1, time.Minute}} {
		if err := s.CreateLatch(ctx, c.k, c.count, c.ttl); err != nil {
			t.Fatalf("create %s: %v", c.k, err)
		}
	}
	cells, err := s.ListLatches(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 3 || cells[0].Key != k(dcsync.DC, "dc1", "l1") || cells[0].Count != 3 ||
		cells[1].Key != k(dcsync.DC, "dc2", "l1") || cells[1].Count != 2 || cells[2].Count != 1 {
		t.Fatalf("ListLatches = %+v", cells)
	}
	if left := time.Until(cells[2].Expires); left <= 0 || left > time.Minute+5*time.Second {
		t.Fatalf("l2 (1m) expires in %v", left)
	}
	if _, err := s.ListLatches(ctx, ""); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("ListLatches(\"\") = %v", err)
	}
}
