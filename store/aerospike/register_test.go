package aerospike_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/layout"
	"github.com/dcsync/dcsync/store/aerospike"
)

// dc1Registers is the register set of dc1's DC registers.
const dc1Registers = aerospike.RegisterSetPrefix + dc1Locks

// wantRegisterIs reads k through s and fails t unless it holds gen and value.
func wantRegisterIs(t *testing.T, s *aerospike.Store, k dcsync.Key, gen uint64, value, what string) {
	t.Helper()
	res, err := s.ReadRegisters(ctxT(t), []dcsync.Key{k})
	must(t, err, what+": ReadRegisters")
	must(t, res[0].Err, what+": ReadRegisters result")
	if r := res[0].Register; r.Gen != gen || string(r.Value) != value {
		t.Fatalf("%s: the register is at generation %d holding %q, want %d holding %q", what, r.Gen, r.Value, gen, value)
	}
}

func registerKey(name string) dcsync.Key {
	return dcsync.Key{Level: dcsync.DC, Client: client, Farm: "dc1", Name: unique(name)}
}

// TestRegisterRoundTrips counts, through the proxy, the commands of the register
// operations: a create and a swap are one write; a Conflict is the write and one read;
// ReadRegisters of 100 keys is one batch command (one node).
func TestRegisterRoundTrips(t *testing.T) {
	p := startProxy(t)
	s := newStore(t, dial(t, p.Addr()), aerospike.Config{})
	ctx := ctxT(t)
	k := registerKey("trips")
	wantTrips(t, "create", trips(t, p, func() {
		_, err := s.SwapRegister(ctx, k, 0, []byte("a"))
		must(t, err, "create")
	}), 0, 1, 0, 0)
	wantTrips(t, "swap", trips(t, p, func() {
		_, err := s.SwapRegister(ctx, k, 1, []byte("b"))
		must(t, err, "swap")
	}), 0, 1, 0, 0)
	wantTrips(t, "conflict", trips(t, p, func() {
		r, err := s.SwapRegister(ctx, k, 1, []byte("c"))
		if dcsync.CodeOf(err) != dcsync.Conflict || r.Gen != 2 || string(r.Value) != "b" {
			t.Fatalf("swap at a stale generation = %+v, %v", r, err)
		}
	}), 1, 1, 0, 0)
	keys := make([]dcsync.Key, 100)
	for i := range keys {
		keys[i] = registerKey("absent")
	}
	keys[42] = k
	wantTrips(t, "ReadRegisters of 100 keys", trips(t, p, func() {
		res, err := s.ReadRegisters(ctx, keys)
		must(t, err, "ReadRegisters")
		for i, r := range res {
			if want := uint64(map[bool]int{true: 2}[i == 42]); r.Err != nil || r.Register.Gen != want {
				t.Fatalf("result %d = %+v, want generation %d", i, r, want)
			}
		}
	}), 0, 0, 0, 1)
}

// TestRegisterRecord: a register is the record the package doc describes, never
// expiring, in a set no Java client uses.
func TestRegisterRecord(t *testing.T) {
	c := realClient(t)
	s := newStore(t, c, aerospike.Config{})
	k := registerKey("layout")
	_, err := s.SwapRegister(ctxT(t), k, 0, []byte{})
	must(t, err, "create with an empty value")
	rec, err := c.Get(nil, key(t, dc1Registers, layout.IdentityKey(k)))
	must(t, err, "raw get of the register record")
	v, _ := rec.Bins[aerospike.RegisterValueBin].([]byte)
	if rec.Bins[aerospike.RegisterGenBin] != 1 || string(v) != "\x01" || rec.Bins[aerospike.RegisterWriteBin] == nil || len(rec.Bins) != 3 {
		t.Fatalf("register record bins %v", rec.Bins)
	}
	if rec.Expiration != uint32(0xFFFFFFFF) {
		t.Fatalf("register record expiration %d, want never", rec.Expiration)
	}
	wantRegisterIs(t, s, k, 1, "", "the empty register")
}

// TestRegisterLateSwapChangesNothing: the first try of a swap (generation 1 to 2) is
// held back by the proxy; its retry lands, and a newer write takes the register to
// generation 3; then the held try is delivered. Filtered on the generation it replaces,
// it changes nothing: the register still holds the newer write. (Without the filter it
// wrote generation 2 over generation 3.)
func TestRegisterLateSwapChangesNothing(t *testing.T) {
	proxy := startProxy(t)
	s := newStore(t, dial(t, proxy.Addr()), aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond})
	ctx := ctxT(t)
	k := registerKey("late")
	_, err := s.SwapRegister(ctx, k, 0, []byte("v1"))
	must(t, err, "create")
	proxy.HoldRequests(1, writesTo(dc1Registers))
	r, err := s.SwapRegister(ctx, k, 1, []byte("late"))
	must(t, err, "swap whose first try was held back")
	if proxy.Held() != 1 || r.Gen != 2 {
		t.Fatalf("held %d requests; the swap returned %+v", proxy.Held(), r)
	}
	_, err = s.SwapRegister(ctx, k, 2, []byte("newer"))
	must(t, err, "the newer write")
	codes, err := proxy.Deliver()
	must(t, err, "deliver")
	t.Logf("the late first try was answered with result code %v (27: filtered out)", codes)
	wantRegisterIs(t, s, k, 3, "newer", "after the late try")
}

// TestRegisterInDoubtLanded: a swap is applied but its reply is lost (in doubt); the
// retry is filtered out, reads the record, finds this call's own write at gen+1 and
// reports success, not Conflict; the write is applied once.
func TestRegisterInDoubtLanded(t *testing.T) {
	p, _, s := inDoubtStore(t)
	ctx := ctxT(t)
	for _, drops := range []int{1, 2} {
		k := registerKey(fmt.Sprint("indoubt-", drops))
		p.DropResponses(drops, writesTo(dc1Registers))
		r, err := s.SwapRegister(ctx, k, 0, []byte("v1"))
		must(t, err, fmt.Sprintf("create with %d replies lost", drops))
		if r.Gen != 1 {
			t.Fatalf("create with %d replies lost = %+v", drops, r)
		}
		p.DropResponses(drops, writesTo(dc1Registers))
		r, err = s.SwapRegister(ctx, k, 1, []byte("v2"))
		must(t, err, fmt.Sprintf("swap with %d replies lost", drops))
		if r.Gen != 2 || string(r.Value) != "v2" {
			t.Fatalf("swap with %d replies lost = %+v", drops, r)
		}
		wantRegisterIs(t, s, k, 2, "v2", "after the in-doubt swaps")
	}
	if d := p.Stats().Dropped; d != 6 {
		t.Fatalf("the proxy dropped %d replies, want 6", d)
	}
}
