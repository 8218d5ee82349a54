package drivertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/latch"
)

func (h Harness) latches(t *testing.T, s driver.Store, farm string, opts ...latch.Option) *latch.Manager {
	t.Helper()
	m, err := latch.New(s, client, farm, append([]latch.Option{latch.WithPollInterval(h.PollInterval), latch.WithLogger(quiet)}, opts...)...)
	must(t, err, "latch.New")
	return m
}

func runLatch(t *testing.T, h Harness) {
	t.Run("CreateAndCount", func(t *testing.T) {
		s := h.open(t)
		m := h.latches(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		l, err := m.CreateCountDown(ctx, unique(t), 3)
		must(t, err, "create")
		if n, err := l.Count(ctx); err != nil || n != 3 {
			t.Fatalf("Count = %d, %v; want 3", n, err)
		}
		for want := int64(2); want >= -1; want-- {
			n, err := l.CountDown(ctx)
			if err != nil || n != want {
				t.Fatalf("CountDown = %d, %v; want %d", n, err, want)
			}
		}
		if n, err := l.Count(ctx); err != nil || n != -1 {
			t.Fatalf("Count after going below zero = %d, %v; want -1", n, err)
		}
	})

	t.Run("CreateExistingFailsAndKeepsCount", func(t *testing.T) {
		s := h.open(t)
		m := h.latches(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		l, err := m.CreateCountDown(ctx, name, 5)
		must(t, err, "create")
		_, err = m.CreateCountDown(ctx, name, 7)
		wantCode(t, err, dcsync.AlreadyExists, "second create")
		_, err = m.CreateCountUpDown(ctx, name, 0)
		wantCode(t, err, dcsync.AlreadyExists, "create as up-down")
		if n, err := l.Count(ctx); err != nil || n != 5 {
			t.Fatalf("Count = %d, %v; want 5 (create must never add)", n, err)
		}
		// XDC: any farm's cell makes the latch exist.
		other := h.latches(t, s, h.OtherFarm)
		_, err = other.CreateCountDown(ctx, name, 1, latch.Level(dcsync.XDC))
		wantCode(t, err, dcsync.AlreadyExists, "XDC create from another farm")
	})

	t.Run("MissingIsNotFound", func(t *testing.T) {
		s := h.open(t)
		m := h.latches(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
			l, err := m.GetCountUpDown(unique(t), latch.Level(level))
			must(t, err, "reference")
			_, err = l.Count(ctx)
			wantCode(t, err, dcsync.NotFound, "Count of missing latch")
			_, err = l.CountDown(ctx)
			wantCode(t, err, dcsync.NotFound, "CountDown of missing latch")
			_, err = l.CountUp(ctx)
			wantCode(t, err, dcsync.NotFound, "CountUp of missing latch")
			wantCode(t, l.Wait(ctx), dcsync.NotFound, "Wait on missing latch")
			// Nothing was created by those calls.
			_, err = l.Count(ctx)
			wantCode(t, err, dcsync.NotFound, "Count after failed updates")
		}
		// A latch that exists in another farm does not exist at level DC here.
		name := unique(t)
		_, err := h.latches(t, s, h.OtherFarm).CreateCountDown(ctx, name, 1)
		must(t, err, "create in other farm")
		l, err := m.GetCountDown(name)
		must(t, err, "reference")
		_, err = l.CountDown(ctx)
		wantCode(t, err, dcsync.NotFound, "DC CountDown where only another farm's cell exists")
	})

	t.Run("GetOrCreate", func(t *testing.T) {
		s := h.open(t)
		m := h.latches(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		l, err := m.GetOrCreateCountUpDown(ctx, name)
		must(t, err, "get-or-create absent")
		if n, err := l.Count(ctx); err != nil || n != 0 {
			t.Fatalf("new get-or-create count = %d, %v; want 0", n, err)
		}
		for i := 0; i < 4; i++ {
			_, err := l.CountUp(ctx)
			must(t, err, "CountUp")
		}
		l2, err := m.GetOrCreateCountUpDown(ctx, name)
		must(t, err, "get-or-create existing")
		if n, err := l2.Count(ctx); err != nil || n != 4 {
			t.Fatalf("get-or-create of existing changed the count: %d, %v; want 4", n, err)
		}
		if n, err := l2.CountDown(ctx); err != nil || n != 3 {
			t.Fatalf("CountDown = %d, %v; want 3", n, err)
		}
	})

	t.Run("DCFarmsAreIndependent", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		a, err := h.latches(t, s, h.Farm).CreateCountDown(ctx, name, 2)
		must(t, err, "create in farm 1")
		b, err := h.latches(t, s, h.OtherFarm).CreateCountDown(ctx, name, 10)
		must(t, err, "create in farm 2 (DC latches of one name are independent)")
		_, err = a.CountDown(ctx)
		must(t, err, "CountDown farm 1")
		if n, _ := a.Count(ctx); n != 1 {
			t.Fatalf("farm 1 count = %d, want 1", n)
		}
		if n, _ := b.Count(ctx); n != 10 {
			t.Fatalf("farm 2 count = %d, want 10", n)
		}
	})

	t.Run("XDCSumsFarmCells", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		m1, m2 := h.latches(t, s, h.Farm), h.latches(t, s, h.OtherFarm)
		x1, err := m1.CreateCountDown(ctx, name, 3, latch.Level(dcsync.XDC))
		must(t, err, "create XDC")
		x2, err := m2.GetCountDown(name, latch.Level(dcsync.XDC))
		must(t, err, "reference XDC from farm 2")
		if n, err := x2.CountDown(ctx); err != nil || n != 2 {
			t.Fatalf("XDC CountDown from farm 2 = %d, %v; want 2", n, err)
		}
		if n, err := x2.CountDown(ctx); err != nil || n != 1 {
			t.Fatalf("XDC CountDown from farm 2 = %d, %v; want 1", n, err)
		}
		// Each farm's own cell, read at level DC.
		d1, _ := m1.GetCountDown(name)
		d2, _ := m2.GetCountDown(name)
		if n, err := d1.Count(ctx); err != nil || n != 3 {
			t.Fatalf("farm 1 cell = %d, %v; want 3", n, err)
		}
		if n, err := d2.Count(ctx); err != nil || n != -2 {
			t.Fatalf("farm 2 cell = %d, %v; want -2", n, err)
		}
		done := make(chan error, 1)
		go func() { done <- x1.Wait(ctx) }()
		if n, err := x1.CountDown(ctx); err != nil || n != 0 {
			t.Fatalf("XDC CountDown from farm 1 = %d, %v; want 0", n, err)
		}
		must(t, <-done, "XDC Wait")
		if n, err := x2.Count(ctx); err != nil || n != 0 {
			t.Fatalf("XDC count = %d, %v; want 0", n, err)
		}
	})

	t.Run("TTLExpiry", func(t *testing.T) {
		s := h.open(t)
		m := h.latches(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		l, err := m.CreateCountDown(ctx, name, 2, latch.TTL(time.Second))
		must(t, err, "create")
		time.Sleep(2200 * time.Millisecond)
		_, err = l.Count(ctx)
		wantCode(t, err, dcsync.NotFound, "Count after TTL")
		_, err = l.CountDown(ctx)
		wantCode(t, err, dcsync.NotFound, "CountDown after TTL")
		wantCode(t, l.Wait(ctx), dcsync.NotFound, "Wait after TTL")
		l, err = m.CreateCountDown(ctx, name, 4, latch.TTL(time.Minute))
		must(t, err, "re-create after expiry")
		if n, err := l.Count(ctx); err != nil || n != 4 {
			t.Fatalf("re-created count = %d, %v; want 4", n, err)
		}
	})

	// The lifetime rule, the same on every store: a latch ends TTL after its creation
	// (the TTL given to create, or to the get-or-create that created it). Count updates
	// never move that end, whatever TTL the updating manager has: at level DC each farm's
	// latch ends on its own; at level XDC the whole latch, every farm's cell, ends with
	// the creator's.
	t.Run("LifetimeIsFromCreation", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		long := h.latches(t, s, h.Farm, latch.WithTTL(time.Hour))
		// 4 s: the update below must land within the latch's life on a loaded machine.
		l, err := long.CreateCountDown(ctx, name, 3, latch.TTL(4*time.Second))
		must(t, err, "create with a 4s TTL")
		// An update through a manager with a 1 h TTL does not extend the latch...
		if n, err := l.CountDown(ctx); err != nil || n != 2 {
			t.Fatalf("CountDown = %d, %v; want 2", n, err)
		}
		time.Sleep(5500 * time.Millisecond)
		_, err = l.Count(ctx)
		wantCode(t, err, dcsync.NotFound, "Count 5.5s after a 4s latch was created and updated")
		// ... and one through a manager with a 1 s TTL does not shorten it.
		short := h.latches(t, s, h.Farm, latch.WithTTL(time.Second))
		l, err = long.CreateCountDown(ctx, name+"-long", 3)
		must(t, err, "create with a 1h TTL")
		ls, _ := short.GetCountDown(name + "-long")
		if n, err := ls.CountDown(ctx); err != nil || n != 2 {
			t.Fatalf("CountDown (1s manager) = %d, %v; want 2", n, err)
		}
		time.Sleep(2500 * time.Millisecond)
		if n, err := l.Count(ctx); err != nil || n != 2 {
			t.Fatalf("count of the 1h latch after a 1s manager updated it, 2.5s later = %d, %v; want 2", n, err)
		}
	})

	t.Run("XDCLatchEndsWhole", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		m1, m2 := h.latches(t, s, h.Farm), h.latches(t, s, h.OtherFarm, latch.WithTTL(time.Hour))
		// 4 s: the two updates below must land within the latch's life on a loaded machine.
		_, err := m1.CreateCountDown(ctx, name, 3, latch.Level(dcsync.XDC), latch.TTL(4*time.Second))
		must(t, err, "create XDC with a 4s TTL")
		x2, _ := m2.GetCountDown(name, latch.Level(dcsync.XDC))
		for want := int64(2); want >= 1; want-- {
			if n, err := x2.CountDown(ctx); err != nil || n != want {
				t.Fatalf("XDC CountDown from farm 2 = %d, %v; want %d", n, err, want)
			}
		}
		// The creator's cell (3) and farm 2's (-2) end together: never a sum of -2.
		time.Sleep(5500 * time.Millisecond)
		n, err := x2.Count(ctx)
		wantCode(t, err, dcsync.NotFound, fmt.Sprintf("XDC Count after the latch ended (count %d)", n))
		wantCode(t, x2.Wait(ctx), dcsync.NotFound, "XDC Wait after the latch ended")
	})

	t.Run("DCFarmLifetimesAreIndependent", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		a, err := h.latches(t, s, h.Farm).CreateCountDown(ctx, name, 5, latch.TTL(time.Hour))
		must(t, err, "create a 1h DC latch in farm 1")
		b, err := h.latches(t, s, h.OtherFarm).CreateCountDown(ctx, name, 7, latch.TTL(time.Second))
		must(t, err, "create a 1s DC latch of the same name in farm 2")
		time.Sleep(2500 * time.Millisecond)
		_, err = b.Count(ctx)
		wantCode(t, err, dcsync.NotFound, "farm 2's 1s latch after 2.5s")
		if n, err := a.Count(ctx); err != nil || n != 5 {
			t.Fatalf("farm 1's 1h latch after farm 2's ended = %d, %v; want 5", n, err)
		}
		if n, err := a.CountDown(ctx); err != nil || n != 4 {
			t.Fatalf("farm 1 CountDown = %d, %v; want 4", n, err)
		}
		b, err = h.latches(t, s, h.OtherFarm).CreateCountDown(ctx, name, 9, latch.TTL(time.Minute))
		must(t, err, "re-create farm 2's latch")
		if n, err := b.Count(ctx); err != nil || n != 9 {
			t.Fatalf("farm 2 re-created = %d, %v; want 9", n, err)
		}
		if n, err := a.Count(ctx); err != nil || n != 4 {
			t.Fatalf("farm 1 after farm 2 re-created = %d, %v; want 4", n, err)
		}
	})

	t.Run("AddLatchRefusesOverflow", func(t *testing.T) {
		// An update whose result would leave the int64 range, in the farm cell or in the
		// XDC sum, fails with InvalidArgument and writes nothing (the latch package only
		// ever adds +1 or -1).
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		read := func(k dcsync.Key) int64 {
			t.Helper()
			res, err := s.ReadLatches(ctx, []dcsync.Key{k})
			must(t, err, "ReadLatches "+k.String())
			if len(res) != 1 || !res[0].Found {
				t.Fatalf("ReadLatches %s = %+v; want the latch", k, res)
			}
			return res[0].Count
		}
		add := func(k dcsync.Key, delta, want int64) {
			t.Helper()
			if n, err := s.AddLatch(ctx, k, delta); err != nil || n != want {
				t.Fatalf("AddLatch %s %+d = %d, %v; want %d", k, delta, n, err, want)
			}
		}
		const max = math.MaxInt64
		dc := dcsync.Key{Level: dcsync.DC, Client: client, Farm: h.Farm, Name: unique(t)}
		must(t, s.CreateLatch(ctx, dc, max, time.Minute), "create DC at MaxInt64")
		_, err := s.AddLatch(ctx, dc, 1)
		wantCode(t, err, dcsync.InvalidArgument, "DC +1 at MaxInt64")
		if n := read(dc); n != max {
			t.Fatalf("DC count after the refused update = %d; want MaxInt64", n)
		}
		add(dc, -1, max-1)
		add(dc, 1, max)
		x1 := dcsync.Key{Level: dcsync.XDC, Client: client, Farm: h.Farm, Name: unique(t) + "-xdc"}
		x2 := x1
		x2.Farm = h.OtherFarm
		must(t, s.CreateLatch(ctx, x1, max, time.Minute), "create XDC at MaxInt64")
		_, err = s.AddLatch(ctx, x2, 1)
		wantCode(t, err, dcsync.InvalidArgument, "XDC +1 from another farm at sum MaxInt64")
		if n := read(x2); n != max {
			t.Fatalf("XDC sum after the refused update = %d; want MaxInt64", n)
		}
		add(x2, -1, max-1) // cells: MaxInt64 and -1
		_, err = s.AddLatch(ctx, x1, 1)
		wantCode(t, err, dcsync.InvalidArgument, "XDC +1 on a farm cell at MaxInt64 (the sum would fit)")
		if n := read(x1); n != max-1 {
			t.Fatalf("XDC sum after the refused cell update = %d; want MaxInt64-1", n)
		}
		add(x2, 1, max) // cells: MaxInt64 and 0: the sum may reach MaxInt64 exactly
	})

	// Close ends every Wait on the store at once, with an error (not when each Wait's
	// ctx ends): the store says it closed through driver.CloseNotifier.
	t.Run("CloseEndsWaits", func(t *testing.T) {
		noLeaks(t)
		open := h.Open
		if h.OpenOwn != nil {
			open = h.OpenOwn
		}
		s := open(t)
		cn, ok := s.(driver.CloseNotifier)
		if !ok {
			s.Close()
			t.Fatalf("%T does not implement dcsync.CloseNotifier", s)
		}
		m := h.latches(t, s, h.Farm, latch.WithPollInterval(time.Hour))
		ctx := ctxT(t, time.Minute)
		l, err := m.CreateCountDown(ctx, unique(t), 1)
		must(t, err, "create")
		errs := make(chan error, 1)
		go func() { errs <- l.Wait(ctx) }()
		waitFor(t, func() bool { return m.WatcherStats().Waits == 1 }, "the Wait to begin")
		must(t, s.Close(), "Close")
		select {
		case <-cn.Done():
		default:
			t.Fatal("Done is open after Close")
		}
		select {
		case err := <-errs:
			if err == nil || dcsync.CodeOf(err) != dcsync.Connection {
				t.Fatalf("Wait after Close = %v; want a Connection error", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Wait did not end when its store closed")
		}
		must(t, s.Close(), "a second Close")
	})

	t.Run("WaitWakesOnLocalCountDown", func(t *testing.T) {
		noLeaks(t)
		s := h.open(t)
		// A long poll interval: only the local wake-up can end these waits quickly.
		m := h.latches(t, s, h.Farm, latch.WithPollInterval(time.Hour))
		ctx := ctxT(t, 30*time.Second)
		l, err := m.CreateCountDown(ctx, unique(t), 2)
		must(t, err, "create")
		const waiters = 20
		errs := make(chan error, waiters)
		for i := 0; i < waiters; i++ {
			go func() { errs <- l.Wait(ctx) }()
		}
		// Only an update begun after a Wait began may end it.
		waitFor(t, func() bool { return m.WatcherStats().Waits == waiters }, "every Wait to begin")
		_, err = l.CountDown(ctx)
		must(t, err, "CountDown")
		_, err = l.CountDown(ctx)
		must(t, err, "CountDown")
		for i := 0; i < waiters; i++ {
			must(t, <-errs, "Wait")
		}
		// A new Wait is answered by the next read, at most one interval after the last:
		// a manager with the suite's short interval brings it soon.
		quick, err := h.latches(t, s, h.Farm).GetCountDown(l.Key().Name)
		must(t, err, "reference")
		must(t, quick.Wait(ctx), "Wait on a latch already at zero")
	})

	t.Run("WaitSeesRemoteUpdates", func(t *testing.T) {
		noLeaks(t)
		s := h.open(t)
		spy := newSpy(s)
		m := h.latches(t, spy, h.Farm)
		ctx := ctxT(t, 30*time.Second)
		const n = 5
		var ls []*latch.CountDownLatch
		for i := 0; i < n; i++ {
			l, err := m.CreateCountDown(ctx, unique(t), 1)
			must(t, err, "create")
			ls = append(ls, l)
		}
		errs := make(chan error, 2*n)
		for _, l := range ls {
			for j := 0; j < 2; j++ {
				go func() { errs <- l.Wait(ctx) }()
			}
		}
		// Every poll must batch every awaited latch into one read.
		waitFor(t, func() bool { return spy.maxBatch() == n }, "a batched read of all awaited latches")
		// Count down behind the watcher's back: straight on the store, as another
		// process would.
		for _, l := range ls {
			_, err := s.AddLatch(ctx, l.Key(), -1)
			must(t, err, "store AddLatch")
		}
		for i := 0; i < 2*n; i++ {
			must(t, <-errs, "Wait")
		}
	})

	t.Run("WaitHonoursContext", func(t *testing.T) {
		noLeaks(t)
		s := h.open(t)
		m := h.latches(t, s, h.Farm)
		ctx := ctxT(t, time.Minute)
		l, err := m.CreateCountDown(ctx, unique(t), 1)
		must(t, err, "create")
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if err := l.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait past deadline = %v, want context.DeadlineExceeded", err)
		}
		cctx, cancel2 := context.WithCancel(ctx)
		cancel2()
		if err := l.Wait(cctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait with cancelled ctx = %v, want context.Canceled", err)
		}
		if n, _ := l.Count(ctx); n != 1 {
			t.Fatalf("count changed to %d", n)
		}
	})

	t.Run("WaitOnExpiringLatchIsNotFound", func(t *testing.T) {
		s := h.open(t)
		m := h.latches(t, s, h.Farm)
		ctx := ctxT(t, 30*time.Second)
		l, err := m.CreateCountDown(ctx, unique(t), 1, latch.TTL(time.Second))
		must(t, err, "create")
		wantCode(t, l.Wait(ctx), dcsync.NotFound, "Wait while the latch expires")
	})

	t.Run("ConcurrentCountDownIsExact", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, 2*time.Minute)
		name := unique(t)
		const workers, each = 16, 20
		m1, m2 := h.latches(t, s, h.Farm), h.latches(t, s, h.OtherFarm)
		l, err := m1.CreateCountUpDown(ctx, name, workers*each, latch.Level(dcsync.XDC))
		must(t, err, "create")
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			m := m1
			if w%2 == 1 {
				m = m2
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				x, err := m.GetCountUpDown(name, latch.Level(dcsync.XDC))
				if err != nil {
					errs <- err
					return
				}
				for i := 0; i < each; i++ {
					// Two downs and one up: exactness must survive mixed updates.
					if _, err := x.CountDown(ctx); err != nil {
						errs <- err
						return
					}
					if i%2 == 0 {
						if _, err := x.CountUp(ctx); err != nil {
							errs <- err
							return
						}
						if _, err := x.CountDown(ctx); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("worker: %v", err)
		}
		if n, err := l.Count(ctx); err != nil || n != 0 {
			t.Fatalf("final XDC count = %d, %v; want exactly 0", n, err)
		}
		must(t, l.Wait(ctx), "Wait at zero")
	})

	t.Run("ReadLatchesBatch", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, time.Minute)
		a := dcsync.Key{Level: dcsync.DC, Client: client, Farm: h.Farm, Name: unique(t)}
		b := dcsync.Key{Level: dcsync.XDC, Client: client, Farm: h.Farm, Name: unique(t)}
		missing := dcsync.Key{Level: dcsync.DC, Client: client, Farm: h.Farm, Name: unique(t)}
		must(t, s.CreateLatch(ctx, a, 7, time.Minute), "create a")
		must(t, s.CreateLatch(ctx, b, 9, time.Minute), "create b")
		bOther := b
		bOther.Farm = h.OtherFarm
		if n, err := s.AddLatch(ctx, bOther, -4); err != nil || n != 5 {
			t.Fatalf("AddLatch XDC = %d, %v; want 5", n, err)
		}
		got, err := s.ReadLatches(ctx, []dcsync.Key{a, missing, b, a})
		must(t, err, "ReadLatches")
		want := []driver.LatchCount{{Found: true, Count: 7}, {}, {Found: true, Count: 5}, {Found: true, Count: 7}}
		if len(got) != len(want) {
			t.Fatalf("ReadLatches returned %d results, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("result %d = %+v, want %+v", i, got[i], want[i])
			}
		}
		if created, err := s.EnsureLatch(ctx, a, time.Minute); err != nil || created {
			t.Fatalf("EnsureLatch of existing = %v, %v; want false, nil", created, err)
		}
		if created, err := s.EnsureLatch(ctx, missing, time.Minute); err != nil || !created {
			t.Fatalf("EnsureLatch of missing = %v, %v; want true, nil", created, err)
		}
	})
}

// waitFor polls cond for up to 20 seconds: a bound on a hang, not a timing assertion.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
