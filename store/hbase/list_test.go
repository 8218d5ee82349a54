package hbase

import (
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// TestListLocksAndLatches lists a fresh client's locks and latches on the real cluster
// (the run's shared tables; a unique client id keeps other tests' rows out).
func TestListLocksAndLatches(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	client := "list" + randHex(6)
	k := func(l dcsync.Level, c, farm, name string) dcsync.Key {
		return dcsync.Key{Level: l, Client: c, Farm: farm, Name: name}
	}
	must(t, func() error {
		_, err := s.AcquireLock(ctx, k(dcsync.DC, client, "dc1", "a"), "o1", time.Minute)
		return err
	}(), "acquire DC")
	must(t, func() error {
		_, err := s.AcquireLock(ctx, k(dcsync.XDC, client, "dc1", "b"), "o2", time.Minute)
		return err
	}(), "acquire XDC")
	must(t, func() error {
		_, err := s.AcquireLock(ctx, k(dcsync.DC, client, "dc1", "c"), "o3", time.Minute)
		return err
	}(), "acquire c")
	must(t, s.ReleaseLock(ctx, k(dcsync.DC, client, "dc1", "c"), "o3"), "release c")
	locks, err := s.ListLocks(ctx, client)
	must(t, err, "ListLocks")
	if len(locks) != 2 || locks[0].Key != k(dcsync.DC, client, "dc1", "a") || locks[0].Owner != "o1" || locks[0].Token == 0 ||
		locks[1].Key != k(dcsync.XDC, client, "", "b") || locks[1].Owner != "o2" {
		t.Fatalf("ListLocks = %+v", locks)
	}
	if left := time.Until(locks[0].Expires); left <= 0 || left > time.Minute+5*time.Second {
		t.Fatalf("lock expires in %v", left)
	}

	must(t, s.CreateLatch(ctx, k(dcsync.DC, client, "dc1", "l1"), 3, time.Hour), "create dc1")
	must(t, s.CreateLatch(ctx, k(dcsync.DC, client, "dc2", "l1"), 2, time.Hour), "create dc2")
	must(t, s.CreateLatch(ctx, k(dcsync.DC, client, "dc1", "l2"), 1, time.Minute), "create l2")
	cells, err := s.ListLatches(ctx, client)
	must(t, err, "ListLatches")
	if len(cells) != 3 || cells[0].Key != k(dcsync.DC, client, "dc1", "l1") || cells[0].Count != 3 ||
		cells[1].Key != k(dcsync.DC, client, "dc2", "l1") || cells[1].Count != 2 || cells[2].Count != 1 {
		t.Fatalf("ListLatches = %+v", cells)
	}
	if left := time.Until(cells[2].Expires); left <= 0 || left > time.Minute+5*time.Second {
		t.Fatalf("l2 (1m) expires in %v", left)
	}
	if _, err := s.ListLocks(ctx, ""); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("ListLocks(\"\") = %v", err)
	}
}

// TestListAmbiguousIDs: a dcsync latch row carries its identity, so a latch of client
// "X_y" is never listed as client "X"'s; a lock row does not, and a lock of client
// "X#y" is listed under the first parse of the Java row, as client "X"'s (documented).
func TestListAmbiguousIDs(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	client := "amb" + randHex(6)
	must(t, s.CreateLatch(ctx, dcsync.Key{Level: dcsync.DC, Client: client + "_y", Farm: "dc1", Name: "n"}, 1, time.Minute), "create")
	if cells, err := s.ListLatches(ctx, client); err != nil || len(cells) != 0 {
		t.Fatalf("ListLatches(%s) = %+v, %v; want none", client, cells, err)
	}
	if cells, err := s.ListLatches(ctx, client+"_y"); err != nil || len(cells) != 1 || cells[0].Key.Name != "n" {
		t.Fatalf("ListLatches(%s_y) = %+v, %v", client, cells, err)
	}
	if _, err := s.AcquireLock(ctx, dcsync.Key{Level: dcsync.DC, Client: client + "#y", Farm: "dc1", Name: "n"}, "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	locks, err := s.ListLocks(ctx, client)
	if err != nil || len(locks) != 1 || locks[0].Key.Name != "y#n" || locks[0].Owner != "o" {
		t.Fatalf("ListLocks(%s) = %+v, %v; want the first parse, name y#n", client, locks, err)
	}
}
