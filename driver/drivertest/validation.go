package drivertest

import (
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

func runValidation(t *testing.T, h Harness) {
	s := h.open(t)
	spy := newSpy(s)
	ctx := ctxT(t, time.Minute)
	long := strings.Repeat("x", dcsync.MaxNameLen+1)

	t.Run("Managers", func(t *testing.T) {
		for _, tc := range []struct {
			client, farm string
		}{
			{"", "dc1"}, {"a\x00b", "dc1"}, {"\xff", "dc1"}, {"a\nb", "dc1"}, {strings.Repeat("c", dcsync.MaxIDLen+1), "dc1"},
			{"c", ""}, {"c", "d\t1"}, {"c", "\xfe"},
		} {
			if _, err := latch.New(spy, tc.client, tc.farm); dcsync.CodeOf(err) != dcsync.InvalidArgument {
				t.Errorf("latch.New(%q, %q) = %v, want InvalidArgument", tc.client, tc.farm, err)
			}
			if _, err := lock.New(spy, tc.client, tc.farm); dcsync.CodeOf(err) != dcsync.InvalidArgument {
				t.Errorf("lock.New(%q, %q) = %v, want InvalidArgument", tc.client, tc.farm, err)
			}
		}
		if _, err := latch.New(nil, "c", "dc1"); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("latch.New(nil store) = %v", err)
		}
		if _, err := latch.New(spy, "c", "dc1", latch.WithTTL(time.Millisecond)); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("latch.New with 1ms TTL = %v", err)
		}
		if _, err := lock.New(spy, "c", "dc1", lock.WithTTL(0)); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("lock.New with 0 TTL = %v", err)
		}
		if _, err := lock.New(spy, "c", "dc1", lock.WithLevel(dcsync.Level(7))); dcsync.CodeOf(err) != dcsync.InvalidArgument {
			t.Errorf("lock.New with level 7 = %v", err)
		}
	})

	badNames := []string{"", "\xff\xfe", "a\nb", "tab\there", long}
	t.Run("Latches", func(t *testing.T) {
		m, err := latch.New(spy, client, h.Farm)
		must(t, err, "latch.New")
		for _, name := range badNames {
			if _, err := m.CreateCountDown(ctx, name, 1); dcsync.CodeOf(err) != dcsync.InvalidArgument {
				t.Errorf("CreateCountDown(%q) = %v", name, err)
			}
			if _, err := m.GetOrCreateCountUpDown(ctx, name); dcsync.CodeOf(err) != dcsync.InvalidArgument {
				t.Errorf("GetOrCreateCountUpDown(%q) = %v", name, err)
			}
			if _, err := m.GetCountDown(name); dcsync.CodeOf(err) != dcsync.InvalidArgument {
				t.Errorf("CountDownLatch(%q) = %v", name, err)
			}
		}
		name := unique(t)
		for _, tc := range []struct {
			count int64
			opts  []latch.CallOption
		}{
			{-1, nil},
			{1, []latch.CallOption{latch.TTL(999 * time.Millisecond)}},
			{1, []latch.CallOption{latch.TTL(dcsync.MaxTTL + time.Second)}},
			{1, []latch.CallOption{latch.Level(0)}},
		} {
			if _, err := m.CreateCountDown(ctx, name, tc.count, tc.opts...); dcsync.CodeOf(err) != dcsync.InvalidArgument {
				t.Errorf("CreateCountDown(count %d, %d opts) = %v, want InvalidArgument", tc.count, len(tc.opts), err)
			}
		}
		if n := spy.total(); n != 0 {
			t.Fatalf("%d store calls were made for invalid input", n)
		}
	})

	t.Run("Locks", func(t *testing.T) {
		m, err := lock.New(spy, client, h.Farm)
		must(t, err, "lock.New")
		for _, name := range badNames {
			if _, err := m.TryAcquire(ctx, name); dcsync.CodeOf(err) != dcsync.InvalidArgument {
				t.Errorf("TryAcquire(%q) = %v", name, err)
			}
			if _, err := m.Acquire(ctx, name); dcsync.CodeOf(err) != dcsync.InvalidArgument {
				t.Errorf("Acquire(%q) = %v", name, err)
			}
		}
		name := unique(t)
		for _, opts := range [][]lock.CallOption{
			{lock.TTL(500 * time.Millisecond)}, {lock.TTL(-time.Second)}, {lock.Wait(-time.Second)}, {lock.Level(3)},
		} {
			if _, err := m.Acquire(ctx, name, opts...); dcsync.CodeOf(err) != dcsync.InvalidArgument {
				t.Errorf("Acquire with bad options = %v", err)
			}
		}
		for _, owner := range []string{"", "has space", strings.Repeat("o", dcsync.MaxOwnerLen+1), "ünï"} {
			if err := m.Release(ctx, name, owner); dcsync.CodeOf(err) != dcsync.InvalidArgument {
				t.Errorf("Release(owner %q) = %v", owner, err)
			}
		}
		if n := spy.total(); n != 0 {
			t.Fatalf("%d store calls were made for invalid input", n)
		}
	})

	t.Run("StoreRejectsBeforeWriting", func(t *testing.T) {
		good := dcsync.Key{Level: dcsync.DC, Client: client, Farm: h.Farm, Name: unique(t)}
		bad := []dcsync.Key{
			{Level: 0, Client: client, Farm: h.Farm, Name: "n"},
			{Level: dcsync.DC, Client: "a\x00b", Farm: h.Farm, Name: "n"},
			{Level: dcsync.XDC, Client: client, Farm: "f\n1", Name: "n"},
			{Level: dcsync.DC, Client: client, Farm: h.Farm, Name: ""},
		}
		for _, k := range bad {
			wantCode(t, s.CreateLatch(ctx, k, 1, time.Minute), dcsync.InvalidArgument, "CreateLatch "+k.String())
			_, err := s.AddLatch(ctx, k, -1)
			wantCode(t, err, dcsync.InvalidArgument, "AddLatch "+k.String())
			_, err = s.ReadLatches(ctx, []dcsync.Key{good, k})
			wantCode(t, err, dcsync.InvalidArgument, "ReadLatches "+k.String())
			_, err = s.AcquireLock(ctx, k, "owner", time.Minute)
			wantCode(t, err, dcsync.InvalidArgument, "AcquireLock "+k.String())
		}
		wantCode(t, s.CreateLatch(ctx, good, -5, time.Minute), dcsync.InvalidArgument, "CreateLatch count -5")
		wantCode(t, s.CreateLatch(ctx, good, 5, time.Millisecond), dcsync.InvalidArgument, "CreateLatch ttl 1ms")
		_, err := s.AcquireLock(ctx, good, "", time.Minute)
		wantCode(t, err, dcsync.InvalidArgument, "AcquireLock without owner")
		_, err = s.AcquireLock(ctx, good, "owner", 10*time.Millisecond)
		wantCode(t, err, dcsync.InvalidArgument, "AcquireLock ttl 10ms")
		_, err = s.AcquireLock(ctx, good, "owner", 0)
		wantCode(t, err, dcsync.InvalidArgument, "AcquireLock ttl 0")
		_, err = s.RefreshLock(ctx, good, "owner", 0)
		wantCode(t, err, dcsync.InvalidArgument, "RefreshLock ttl 0")
		got, err := s.ReadLatches(ctx, []dcsync.Key{good})
		must(t, err, "ReadLatches")
		if got[0].Found {
			t.Fatalf("a rejected create wrote the latch: %+v", got[0])
		}
		_, err = s.InspectLock(ctx, good)
		wantCode(t, err, dcsync.NotFound, "a rejected acquire took the lock")
	})
}
