package hbase

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/faultproxy"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// wantRegisterIs reads k through s and fails t unless it holds gen and value.
func wantRegisterIs(t *testing.T, s *Store, k dcsync.Key, gen uint64, value, what string) {
	t.Helper()
	res, err := s.ReadRegisters(ctxT(t, time.Minute), []dcsync.Key{k})
	must(t, err, what+": ReadRegisters")
	must(t, res[0].Err, what+": ReadRegisters result")
	if r := res[0].Register; r.Gen != gen || string(r.Value) != value {
		t.Fatalf("%s: the register is at generation %d holding %q, want %d holding %q", what, r.Gen, r.Value, gen, value)
	}
}

// TestRegisterCalls (real HBase, one region server) counts the calls of the register
// operations exactly: a create, a swap and a Conflict are one call each (the
// CheckAndMutateRead that also reads the row), and ReadRegisters of 100 keys is one
// MultiGet (one Multi RPC per region server: one here).
func TestRegisterCalls(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	cnt := countCalls(s)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc1")
	must(t, s.ready(ctx, "test", &s.locks), "the lock table")
	step := func(what string, want map[string]int, f func() error) {
		t.Helper()
		cnt.take()
		must(t, f(), what)
		if got := cnt.take(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: calls %v, want %v", what, got, want)
		}
	}
	one := map[string]int{"CheckAndMutateRead": 1}
	step("create", one, func() error { _, err := s.SwapRegister(ctx, k, 0, []byte("a")); return err })
	step("swap", one, func() error { _, err := s.SwapRegister(ctx, k, 1, []byte("b")); return err })
	step("conflict", one, func() error {
		r, err := s.SwapRegister(ctx, k, 1, []byte("c"))
		if dcsync.CodeOf(err) != dcsync.Conflict || r.Gen != 2 || string(r.Value) != "b" {
			return fmt.Errorf("swap at a stale generation = %+v, %v; want generation 2 and Conflict", r, err)
		}
		return nil
	})
	keys := make([]dcsync.Key, 100)
	for i := range keys {
		keys[i] = key(dcsync.XDC, "dc1")
	}
	keys[37] = k
	step("ReadRegisters of 100 keys", map[string]int{"MultiGet": 1}, func() error {
		res, err := s.ReadRegisters(ctx, keys)
		if err != nil {
			return err
		}
		for i, r := range res {
			if want := uint64(map[bool]int{true: 2}[i == 37]); r.Err != nil || r.Register.Gen != want {
				return fmt.Errorf("result %d = %+v, want generation %d", i, r, want)
			}
		}
		return nil
	})
}

// TestRegisterRow: a register is stored where the package doc says, in a row no Java
// lock row can be and ListLocks does not list.
func TestRegisterRow(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.XDC, "dc1")
	_, err := s.SwapRegister(ctx, k, 0, []byte("v"))
	must(t, err, "create")
	row := layout.Salt("R#XDC:" + fmt.Sprintf("%d:%s%d:%s", len(k.Client), k.Client, len(k.Name), k.Name))
	cells, err := shared(t).Get(ctx, fixture.lockTable, row)
	must(t, err, "raw Get")
	got := map[string]string{}
	for _, c := range cells {
		got[string(c.Family)+":"+string(c.Qualifier)] = string(c.Value)
	}
	if len(got) != 3 || got["D:G"] != string(be64(1)) || got["D:V"] != "v" || len(got["D:W"]) != 8 {
		t.Fatalf("register row %q holds %q", row, got)
	}
	if _, ok := layout.ParseHBaseLockRow(row); ok {
		t.Fatalf("the register row %q parses as a Java lock row", row)
	}
	locks, err := s.ListLocks(ctx, k.Client)
	must(t, err, "ListLocks")
	if len(locks) != 0 {
		t.Fatalf("ListLocks lists %v", locks)
	}
}

// proxiedRegisterStore is a store on the run's tables whose region-server traffic goes
// through a fault proxy, with 1 s RPC timeouts and one attempt per call (a resend would
// go on a new connection, which releases a held request: see faultproxy Hold).
func proxiedRegisterStore(t *testing.T, attempts int) (*Store, *faultproxy.Proxy) {
	t.Helper()
	c, p := proxiedClient(t, hbaserpc.Config{RPCTimeout: time.Second, MaxAttempts: attempts})
	p.SetMaxHold(time.Minute)
	s, err := New(ctxT(t, time.Minute), c, Config{LockTable: fixture.lockTable, LatchTableSuffix: fixture.latchSuffix, Logger: testLogger()})
	must(t, err, "New")
	t.Cleanup(func() { s.Close() })
	// The lock table is ready and the region of the register located, before any fault.
	_, err = s.ReadRegisters(ctxT(t, time.Minute), []dcsync.Key{key(dcsync.DC, "dc1")})
	must(t, err, "ReadRegisters")
	return s, p
}

// TestRegisterLateSwapChangesNothing: a swap's conditional write is held back by the
// fault proxy, and so is the store's read-back (the outcome stays unknown: the swap
// returns Connection); a newer write of the register lands meanwhile (directly, not
// through the proxy); then the held requests are delivered. The held swap is
// conditioned on the generation it replaces, finds the newer one, and changes nothing:
// the register still holds the newer write. (Without the condition it overwrote it.)
func TestRegisterLateSwapChangesNothing(t *testing.T) {
	direct := openStore(t)
	defer direct.Close()
	s, p := proxiedRegisterStore(t, 1)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc1")
	_, err := direct.SwapRegister(ctx, k, 0, []byte("v1"))
	must(t, err, "create")
	p.Hold(2) // the swap's CheckAndMutateRead, then the read-back (or its region lookup)
	r, err := s.SwapRegister(ctx, k, 1, []byte("late"))
	if err == nil {
		t.Fatalf("a swap whose write and read-back were held back returned %+v, nil", r)
	}
	t.Logf("the held swap returned %v", err)
	wantRegisterIs(t, direct, k, 1, "v1", "while the swap is held")
	_, err = direct.SwapRegister(ctx, k, 1, []byte("newer"))
	must(t, err, "the newer write")
	p.ReleaseHeld()
	must(t, p.WaitSettled(ctx), "delivering the held requests")
	if c := p.Counts(); c.Held != 2 || c.HeldLate != 2 {
		t.Fatalf("proxy counts %v, want the swap's write and its read-back held, and delivered late", c)
	}
	wantRegisterIs(t, direct, k, 2, "newer", "after the held swap was delivered")
}

// TestRegisterInDoubtLanded: a swap is applied but its reply is dropped (in doubt); the
// store reads the register back, finds its own write at gen+1, and reports success
// (not Conflict), applied once.
func TestRegisterInDoubtLanded(t *testing.T) {
	s, p := proxiedRegisterStore(t, 8)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.XDC, "dc1")
	_, err := s.SwapRegister(ctx, k, 0, []byte("v1"))
	must(t, err, "create")
	p.DropReplies(1)
	r, err := s.SwapRegister(ctx, k, 1, []byte("v2"))
	must(t, err, "a swap whose reply was dropped")
	if r.Gen != 2 || string(r.Value) != "v2" {
		t.Fatalf("the swap whose reply was dropped returned %+v", r)
	}
	if c := p.Counts(); c.DroppedReplies != 1 {
		t.Fatalf("proxy counts %v, want one dropped reply", c)
	}
	wantRegisterIs(t, s, k, 2, "v2", "after the in-doubt swap")
}

// TestRegisterInDoubtResent: a swap's first write is held back (in doubt), the store's
// read-back finds the register unchanged and sends it again; the held one is delivered
// around then. Whichever lands first, the swap succeeds and is applied once (the
// register is at gen+1, not gen+2).
func TestRegisterInDoubtResent(t *testing.T) {
	s, p := proxiedRegisterStore(t, 8)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc2")
	_, err := s.SwapRegister(ctx, k, 0, []byte("v1"))
	must(t, err, "create")
	p.Hold(1)
	r, err := s.SwapRegister(ctx, k, 1, []byte("v2"))
	must(t, err, "a swap whose first write was held back")
	if r.Gen != 2 || !bytes.Equal(r.Value, []byte("v2")) {
		t.Fatalf("the swap returned %+v", r)
	}
	p.ReleaseHeld()
	must(t, p.WaitSettled(ctx), "delivering the held request")
	if c := p.Counts(); c.Held != 1 {
		t.Fatalf("proxy counts %v, want one held request", c)
	}
	wantRegisterIs(t, s, k, 2, "v2", "after the held write was delivered")
	// And the register goes on from there.
	r, err = s.SwapRegister(ctx, k, 2, []byte("v3"))
	if err != nil || r.Gen != 3 || string(r.Value) != "v3" {
		t.Fatalf("next swap = %+v, %v", r, err)
	}
}
