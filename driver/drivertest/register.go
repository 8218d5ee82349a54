package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// The Registers part: driver.RegisterStore, on the stores that implement it (every
// store of this module). A register is created at generation 0 and changed only by a
// compare-and-set on its generation: any other generation (stale, future, 0 on an
// existing register) is a Conflict that returns the stored register and writes
// nothing; values round-trip byte for byte; a DC register is the farm's own and an XDC
// register one for every farm; a register is independent of the lock and latch of the
// same key; swaps racing on one register have exactly one winner per generation;
// ReadRegisters returns results in key order, Gen 0 for absent keys; bad input fails
// with InvalidArgument before any I/O.

func runRegisters(t *testing.T, h Harness) {
	s := h.open(t)
	var r driver.RegisterStore = s
	key := func(lv dcsync.Level, farm, name string) dcsync.Key {
		return dcsync.Key{Level: lv, Client: client, Farm: farm, Name: name}
	}

	t.Run("CreateAndSwap", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		k := key(dcsync.DC, h.Farm, unique(t))
		wantRegister(t, r, ctx, k, driver.Register{}, "before the first write")
		got, err := r.SwapRegister(ctx, k, 0, []byte("one"))
		must(t, err, "SwapRegister at generation 0 (create)")
		wantReg(t, got, driver.Register{Gen: 1, Value: []byte("one")}, "the created register")
		wantRegister(t, r, ctx, k, driver.Register{Gen: 1, Value: []byte("one")}, "after the create")
		got, err = r.SwapRegister(ctx, k, 1, []byte("two"))
		must(t, err, "SwapRegister at generation 1")
		wantReg(t, got, driver.Register{Gen: 2, Value: []byte("two")}, "the swapped register")
		wantRegister(t, r, ctx, k, driver.Register{Gen: 2, Value: []byte("two")}, "after the swap")
	})

	t.Run("ConflictReturnsTheStoredRegister", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		k := key(dcsync.DC, h.Farm, unique(t))
		for gen, v := range []string{"g1", "g2", "g3"} {
			_, err := r.SwapRegister(ctx, k, uint64(gen), []byte(v))
			must(t, err, fmt.Sprintf("SwapRegister at generation %d", gen))
		}
		stored := driver.Register{Gen: 3, Value: []byte("g3")}
		for _, gen := range []uint64{0, 1, 2, 4, 5, 1 << 40, 1<<63 - 1, 1 << 63, ^uint64(0)} {
			what := fmt.Sprintf("SwapRegister at generation %d of a register at 3", gen)
			got, err := r.SwapRegister(ctx, k, gen, []byte("must not land"))
			wantCode(t, err, dcsync.Conflict, what)
			if !errors.Is(err, dcsync.ErrConflict) {
				t.Fatalf("%s: %v does not match dcsync.ErrConflict", what, err)
			}
			wantReg(t, got, stored, what+": the returned register")
		}
		wantRegister(t, r, ctx, k, stored, "after the conflicts (they write nothing)")
		// An absent register: a swap at a generation above 0 is a Conflict returning Gen 0.
		absent := key(dcsync.DC, h.Farm, unique(t)+"-absent")
		got, err := r.SwapRegister(ctx, absent, 1, []byte("x"))
		wantCode(t, err, dcsync.Conflict, "SwapRegister at generation 1 of an absent register")
		wantReg(t, got, driver.Register{}, "the register a Conflict on an absent one returns")
		wantRegister(t, r, ctx, absent, driver.Register{}, "the absent register after the conflict")
	})

	t.Run("ValuesRoundTrip", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		binary := make([]byte, 0, 512)
		for i := range 512 {
			binary = append(binary, byte(i), byte(255-i))
		}
		full := bytes.Repeat([]byte{0, 0xff, 'r', 0x80, '\n', 0xc3}, driver.MaxRegisterValue/6+1)[:driver.MaxRegisterValue]
		values := []struct {
			what string
			v    []byte
		}{
			{"nil", nil}, {"empty", []byte{}}, {"one zero byte", []byte{0}}, {"every byte value", binary},
			{"MaxRegisterValue bytes", full}, {"invalid UTF-8", []byte("\xff\xfe\xfd")}, {"empty again", []byte{}},
		}
		// Each value as a create, and each as a swap of one register through them all.
		k := key(dcsync.XDC, h.Farm, name+"-swapped")
		for i, c := range values {
			ck := key(dcsync.DC, h.Farm, fmt.Sprintf("%s-%d", name, i))
			got, err := r.SwapRegister(ctx, ck, 0, c.v)
			must(t, err, "create with a value "+c.what)
			wantReg(t, got, driver.Register{Gen: 1, Value: c.v}, "create with a value "+c.what)
			wantRegister(t, r, ctx, ck, driver.Register{Gen: 1, Value: c.v}, "a register created with a value "+c.what)
			got, err = r.SwapRegister(ctx, k, uint64(i), c.v)
			must(t, err, "swap to a value "+c.what)
			wantReg(t, got, driver.Register{Gen: uint64(i) + 1, Value: c.v}, "swap to a value "+c.what)
			wantRegister(t, r, ctx, k, driver.Register{Gen: uint64(i) + 1, Value: c.v}, "a register swapped to a value "+c.what)
		}
		// The store keeps its own copy: changing the caller's slice changes nothing.
		v := []byte("mine")
		ck := key(dcsync.DC, h.Farm, name+"-copy")
		got, err := r.SwapRegister(ctx, ck, 0, v)
		must(t, err, "create")
		v[0] = 'X'
		if len(got.Value) > 0 {
			got.Value[0] = 'Y'
		}
		wantRegister(t, r, ctx, ck, driver.Register{Gen: 1, Value: []byte("mine")}, "after the caller changed its slices")
	})

	t.Run("DCAndXDC", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		dc1, dc2 := key(dcsync.DC, h.Farm, name), key(dcsync.DC, h.OtherFarm, name)
		x1, x2 := key(dcsync.XDC, h.Farm, name), key(dcsync.XDC, h.OtherFarm, name)
		_, err := r.SwapRegister(ctx, dc1, 0, []byte("dc1"))
		must(t, err, "create the DC register of "+h.Farm)
		_, err = r.SwapRegister(ctx, dc2, 0, []byte("dc2"))
		must(t, err, "create the DC register of "+h.OtherFarm+" (a register of its own)")
		_, err = r.SwapRegister(ctx, x1, 0, []byte("xdc"))
		must(t, err, "create the XDC register (distinct from the DC ones)")
		got, err := r.SwapRegister(ctx, x2, 0, []byte("xdc from "+h.OtherFarm))
		wantCode(t, err, dcsync.Conflict, "create of the XDC register from "+h.OtherFarm+" (it exists)")
		wantReg(t, got, driver.Register{Gen: 1, Value: []byte("xdc")}, "the XDC register seen from "+h.OtherFarm)
		got, err = r.SwapRegister(ctx, x2, 1, []byte("xdc2"))
		must(t, err, "swap of the XDC register from "+h.OtherFarm)
		wantReg(t, got, driver.Register{Gen: 2, Value: []byte("xdc2")}, "the XDC register swapped from "+h.OtherFarm)
		res, err := r.ReadRegisters(ctx, []dcsync.Key{dc1, dc2, x1, x2})
		must(t, err, "ReadRegisters")
		for i, want := range []driver.Register{
			{Gen: 1, Value: []byte("dc1")}, {Gen: 1, Value: []byte("dc2")},
			{Gen: 2, Value: []byte("xdc2")}, {Gen: 2, Value: []byte("xdc2")},
		} {
			must(t, res[i].Err, fmt.Sprintf("result %d", i))
			wantReg(t, res[i].Register, want, fmt.Sprintf("register %d of DC %s, DC %s, XDC, XDC", i, h.Farm, h.OtherFarm))
		}
	})

	t.Run("IndependentOfLocksAndLatches", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		for _, lv := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
			k := key(lv, h.Farm, unique(t)+"-"+lv.String())
			st, err := s.AcquireLock(ctx, k, "holder", time.Minute)
			must(t, err, "AcquireLock")
			got, err := r.SwapRegister(ctx, k, 0, []byte("beside a lock"))
			must(t, err, "create a register with the key of a held lock")
			wantReg(t, got, driver.Register{Gen: 1, Value: []byte("beside a lock")}, "the register beside a lock")
			in, err := s.InspectLock(ctx, k)
			must(t, err, "InspectLock after the register write")
			if in.Owner != "holder" || in.Token != st.Token {
				t.Fatalf("after a register write the lock is %+v, want holder with token %d", in, st.Token)
			}
			_, err = r.SwapRegister(ctx, k, 1, []byte("still"))
			must(t, err, "swap the register while the lock is held")
			must(t, s.ReleaseLock(ctx, k, "holder"), "ReleaseLock")
			wantRegister(t, r, ctx, k, driver.Register{Gen: 2, Value: []byte("still")}, "the register after the lock's release")
			st2, err := s.AcquireLock(ctx, k, "next", time.Minute)
			must(t, err, "AcquireLock again")
			if st2.Token <= st.Token {
				t.Fatalf("token %d after %d: the register write disturbed the fencing counter", st2.Token, st.Token)
			}
			must(t, s.ReleaseLock(ctx, k, "next"), "ReleaseLock")
			must(t, s.CreateLatch(ctx, k, 7, time.Minute), "CreateLatch with the key of a register")
			n, err := s.AddLatch(ctx, k, -2)
			if err != nil || n != 5 {
				t.Fatalf("AddLatch beside a register = %d, %v; want 5", n, err)
			}
			wantRegister(t, r, ctx, k, driver.Register{Gen: 2, Value: []byte("still")}, "the register beside a latch")
		}
	})

	t.Run("ConcurrentSwaps", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		k := key(dcsync.DC, h.Farm, unique(t))
		const workers, tries = 8, 15
		var mu sync.Mutex
		winners := map[uint64]int{} // generation -> the worker that wrote it
		values := map[uint64]string{}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var gen uint64 // a guess: a Conflict tells the stored one
				for i := range tries {
					v := fmt.Sprintf("worker %d try %d", w, i)
					got, err := r.SwapRegister(ctx, k, gen, []byte(v))
					switch {
					case err == nil:
						if got.Gen != gen+1 || string(got.Value) != v {
							errs <- fmt.Errorf("worker %d won generation %d but got %+v back", w, gen, got)
							return
						}
						mu.Lock()
						prev, dup := winners[got.Gen]
						winners[got.Gen], values[got.Gen] = w, v
						mu.Unlock()
						if dup {
							errs <- fmt.Errorf("generation %d was won twice: by worker %d and by worker %d", got.Gen, prev, w)
							return
						}
						gen = got.Gen
					case dcsync.CodeOf(err) == dcsync.Conflict:
						if got.Gen == gen {
							errs <- fmt.Errorf("worker %d: Conflict at generation %d returned that same generation", w, gen)
							return
						}
						gen = got.Gen
					default:
						errs <- fmt.Errorf("worker %d: SwapRegister: %w", w, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			return
		}
		res, err := r.ReadRegisters(ctx, []dcsync.Key{k})
		must(t, err, "ReadRegisters")
		final := res[0].Register
		if final.Gen != uint64(len(winners)) {
			t.Fatalf("final generation %d after %d winning swaps", final.Gen, len(winners))
		}
		for g := uint64(1); g <= final.Gen; g++ {
			if _, ok := winners[g]; !ok {
				t.Fatalf("generation %d of %d has no winner", g, final.Gen)
			}
		}
		if string(final.Value) != values[final.Gen] {
			t.Fatalf("final value %q, but generation %d was won with %q", final.Value, final.Gen, values[final.Gen])
		}
		t.Logf("%d workers, %d tries each: %d generations", workers, tries, final.Gen)
	})

	t.Run("ReadRegistersOrder", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		name := unique(t)
		var keys []dcsync.Key
		var want []driver.Register
		for i := range 6 {
			k := key(dcsync.DC, h.Farm, fmt.Sprintf("%s-%d", name, i))
			if i%2 == 0 {
				k.Level = dcsync.XDC
			}
			var reg driver.Register
			for g := range i % 3 {
				v := []byte(fmt.Sprintf("%d@%d", i, g+1))
				_, err := r.SwapRegister(ctx, k, uint64(g), v)
				must(t, err, "SwapRegister")
				reg = driver.Register{Gen: uint64(g) + 1, Value: v}
			}
			keys, want = append(keys, k), append(want, reg)
		}
		// Reversed, with a key twice and an absent one in the middle.
		var rk []dcsync.Key
		var rw []driver.Register
		for i := len(keys) - 1; i >= 0; i-- {
			rk, rw = append(rk, keys[i]), append(rw, want[i])
			if i == 3 {
				rk, rw = append(rk, key(dcsync.DC, h.Farm, name+"-absent")), append(rw, driver.Register{})
			}
		}
		rk, rw = append(rk, keys[4]), append(rw, want[4])
		res, err := r.ReadRegisters(ctx, rk)
		must(t, err, "ReadRegisters")
		if len(res) != len(rk) {
			t.Fatalf("ReadRegisters of %d keys returned %d results", len(rk), len(res))
		}
		for i := range rk {
			must(t, res[i].Err, fmt.Sprintf("result %d", i))
			wantReg(t, res[i].Register, rw[i], fmt.Sprintf("result %d (%s)", i, rk[i].Name))
		}
		res, err = r.ReadRegisters(ctx, nil)
		if err != nil || len(res) != 0 {
			t.Fatalf("ReadRegisters of no keys = %v, %v", res, err)
		}
	})

	t.Run("ValidationBeforeIO", func(t *testing.T) {
		ctx := ctxT(t, time.Minute)
		good := key(dcsync.DC, h.Farm, unique(t))
		bad := []dcsync.Key{
			key(dcsync.DC, h.Farm, ""), key(dcsync.Level(0), h.Farm, "n"), key(dcsync.Level(9), h.Farm, "n"),
			key(dcsync.DC, h.Farm, strings.Repeat("n", dcsync.MaxNameLen+1)), key(dcsync.DC, h.Farm, "a\nb"),
			key(dcsync.DC, h.Farm, "\xff"), {Level: dcsync.DC, Client: "", Farm: h.Farm, Name: "n"},
			key(dcsync.DC, "", "n"),
		}
		oversized := make([]byte, driver.MaxRegisterValue+1)
		// A cancelled context and a closed store: a store that did I/O before it
		// validated would fail with Connection instead.
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		closedStore := h.OpenOwn
		if closedStore == nil {
			closedStore = h.Open
		}
		closed := closedStore(t)
		must(t, closed.Close(), "Close")
		cr, err := driver.Registers(closed, "drivertest.Registers")
		must(t, err, "driver.Registers of the closed store")
		for _, c := range []struct {
			what string
			ctx  context.Context
			r    driver.RegisterStore
		}{{"live store", ctx, r}, {"cancelled context", cancelled, r}, {"closed store", ctx, cr}} {
			for _, k := range bad {
				_, err := c.r.SwapRegister(c.ctx, k, 0, []byte("v"))
				wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("%s: SwapRegister of key %+v", c.what, k))
				_, err = c.r.ReadRegisters(c.ctx, []dcsync.Key{good, k})
				wantCode(t, err, dcsync.InvalidArgument, fmt.Sprintf("%s: ReadRegisters with key %+v", c.what, k))
			}
			_, err := c.r.SwapRegister(c.ctx, good, 0, oversized)
			wantCode(t, err, dcsync.InvalidArgument, c.what+": SwapRegister of a value of MaxRegisterValue+1 bytes")
		}
		wantRegister(t, r, ctx, good, driver.Register{}, "the register after the refused writes")
	})
}

// wantReg fails the test unless got is want (values compared by their bytes: nil and
// empty are the same value).
func wantReg(t *testing.T, got, want driver.Register, what string) {
	t.Helper()
	if got.Gen != want.Gen || !bytes.Equal(got.Value, want.Value) {
		t.Fatalf("%s: register at generation %d holding %s, want generation %d holding %s",
			what, got.Gen, shortBytes(got.Value), want.Gen, shortBytes(want.Value))
	}
	if got.Gen == 0 && got.Value != nil {
		t.Fatalf("%s: an absent register (generation 0) with value %s, want nil", what, shortBytes(got.Value))
	}
}

// wantRegister reads k and fails the test unless it is want.
func wantRegister(t *testing.T, r driver.RegisterStore, ctx context.Context, k dcsync.Key, want driver.Register, what string) {
	t.Helper()
	res, err := r.ReadRegisters(ctx, []dcsync.Key{k})
	must(t, err, what+": ReadRegisters")
	if len(res) != 1 {
		t.Fatalf("%s: ReadRegisters of one key returned %d results", what, len(res))
	}
	must(t, res[0].Err, what+": ReadRegisters result")
	wantReg(t, res[0].Register, want, what)
}

// shortBytes shows a value in a failure message: its length, and its start.
func shortBytes(b []byte) string {
	if len(b) > 24 {
		return fmt.Sprintf("%d bytes %q...", len(b), b[:24])
	}
	return fmt.Sprintf("%d bytes %q", len(b), b)
}
