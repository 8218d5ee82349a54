package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// listingStore is a store with the optional operator interfaces: listing locks and
// latch cells, and deleting latches.
type listingStore interface {
	driver.Store
	driver.LockLister
	driver.LatchLister
	driver.LatchDeleter
}

// runListing checks ListLocks, ListLatches and DeleteLatch on s, under a client id
// nothing else writes: locks and latch cells of that client only, live ones only, a DC
// delete of one farm's cell, an XDC delete of every farm's, NotFound and InvalidArgument.
func runListing(t *testing.T, s listingStore) {
	t.Helper()
	ctx := ctxT(t, 5*time.Minute) // scans of a shared server's whole table or set
	client := unique(t)           // "Listing-" and a random suffix
	other := client + "x"
	key := func(l dcsync.Level, c, farm, name string) dcsync.Key {
		return dcsync.Key{Level: l, Client: c, Farm: farm, Name: name}
	}
	owners := map[string]string{}
	for _, k := range []dcsync.Key{
		key(dcsync.DC, client, "dc1", "a"), key(dcsync.DC, client, "dc2", "a"),
		key(dcsync.XDC, client, "dc1", "b"), key(dcsync.DC, other, "dc1", "a"),
	} {
		owner := "owner-" + k.String()
		if _, err := s.AcquireLock(ctx, k, owner, time.Minute); err != nil {
			t.Fatalf("acquire %s: %v", k, err)
		}
		owners[k.String()] = owner
	}
	locks, err := s.ListLocks(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]driver.LockInfo{}
	for _, l := range locks {
		got[l.Key.Level.String()+"/"+l.Key.Farm+"/"+l.Key.Name] = l
		if l.Key.Client != client {
			t.Errorf("listed another client's lock %s", l.Key)
		}
	}
	if len(locks) != 3 || got["DC/dc1/a"].Owner != owners[key(dcsync.DC, client, "dc1", "a").String()] ||
		got["DC/dc2/a"].Owner != owners[key(dcsync.DC, client, "dc2", "a").String()] || got["XDC/dc1/b"].Token == 0 && got["XDC//b"].Token == 0 {
		t.Fatalf("ListLocks = %+v", locks)
	}
	for _, l := range locks {
		if l.Token == 0 || time.Until(l.Expires) <= 0 || time.Until(l.Expires) > time.Minute+time.Second {
			t.Errorf("lock %s: token %d, expires in %v", l.Key, l.Token, time.Until(l.Expires))
		}
	}
	if err := s.ReleaseLock(ctx, key(dcsync.DC, client, "dc1", "a"), owners[key(dcsync.DC, client, "dc1", "a").String()]); err != nil {
		t.Fatal(err)
	}
	if locks, err := s.ListLocks(ctx, client); err != nil || len(locks) != 2 {
		t.Fatalf("ListLocks after a release = %+v, %v; want 2 locks", locks, err)
	}
	if _, err := s.ListLocks(ctx, ""); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("ListLocks(\"\") = %v, want InvalidArgument", err)
	}

	for _, c := range []struct {
		k     dcsync.Key
		count int64
	}{
		{key(dcsync.DC, client, "dc1", "l1"), 3}, {key(dcsync.DC, client, "dc2", "l1"), 2},
		{key(dcsync.DC, client, "dc1", "l2"), 1}, {key(dcsync.DC, other, "dc1", "l1"), 9},
	} {
		if err := s.CreateLatch(ctx, c.k, c.count, time.Hour); err != nil {
			t.Fatalf("create %s: %v", c.k, err)
		}
	}
	cells, err := s.ListLatches(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, c := range cells {
		counts[c.Key.Farm+"/"+c.Key.Name] = c.Count
		if c.Key.Client != client || c.Key.Level != dcsync.DC {
			t.Errorf("listed cell %s", c.Key)
		}
		if left := time.Until(c.Expires); !c.Expires.IsZero() && (left <= 0 || left > time.Hour+time.Second) {
			t.Errorf("cell %s expires in %v", c.Key, left)
		}
	}
	if len(cells) != 3 || counts["dc1/l1"] != 3 || counts["dc2/l1"] != 2 || counts["dc1/l2"] != 1 {
		t.Fatalf("ListLatches = %+v", cells)
	}

	// DC delete: this farm's cell only; a second delete finds nothing.
	if err := s.DeleteLatch(ctx, key(dcsync.DC, client, "dc1", "l1")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLatch(ctx, key(dcsync.DC, client, "dc1", "l1")); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("second DeleteLatch = %v, want NotFound", err)
	}
	rs, err := s.ReadLatches(ctx, []dcsync.Key{key(dcsync.DC, client, "dc1", "l1"), key(dcsync.XDC, client, "dc1", "l1")})
	if err != nil || rs[0].Found || !rs[1].Found || rs[1].Count != 2 {
		t.Fatalf("after a DC delete: %+v, %v; want dc1 gone and XDC count 2", rs, err)
	}
	// XDC delete: every farm's cell.
	if err := s.DeleteLatch(ctx, key(dcsync.XDC, client, "dc1", "l1")); err != nil {
		t.Fatal(err)
	}
	if rs, err := s.ReadLatches(ctx, []dcsync.Key{key(dcsync.XDC, client, "dc1", "l1")}); err != nil || rs[0].Found {
		t.Fatalf("after an XDC delete: %+v, %v; want gone", rs, err)
	}
	if err := s.DeleteLatch(ctx, key(dcsync.XDC, client, "dc1", "nope")); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("DeleteLatch of a missing latch = %v, want NotFound", err)
	}
	if err := s.DeleteLatch(ctx, key(dcsync.DC, client, "dc1", "")); dcsync.CodeOf(err) != dcsync.InvalidArgument {
		t.Fatalf("DeleteLatch with no name = %v, want InvalidArgument", err)
	}
	cells, err = s.ListLatches(ctx, client)
	if err != nil || len(cells) != 1 || cells[0].Key.Name != "l2" {
		t.Fatalf("ListLatches after the deletes = %+v, %v; want l2 only", cells, err)
	}
	// The other client's latch is untouched.
	if rs, err := s.ReadLatches(ctx, []dcsync.Key{key(dcsync.DC, other, "dc1", "l1")}); err != nil || !rs[0].Found || rs[0].Count != 9 {
		t.Fatalf("other client's latch: %+v, %v", rs, err)
	}
}
