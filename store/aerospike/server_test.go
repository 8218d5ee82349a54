package aerospike_test

import (
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"
)

// TestServerSemantics pins, on the real server, the behaviours of Aerospike that the
// store's design rests on, so that a server that behaves otherwise fails here first.
func TestServerSemantics(t *testing.T) {
	c := realClient(t)
	k := key(t, "dcsync_semantics", unique("k"))
	wp := as.NewWritePolicy(0, 100)
	if err := c.Put(wp, k, as.BinMap{"a": 1, "m": map[any]any{"x": 1}}); err != nil {
		t.Fatal(err)
	}
	filtered := func(what string, f *as.Expression, wantPass bool) {
		t.Helper()
		p := as.NewPolicy()
		p.FilterExpression = f
		_, err := c.Get(p, k)
		if pass := err == nil; pass != wantPass || (!pass && rc(err) != types.FILTERED_OUT) {
			t.Errorf("%s: get = %v, want pass=%t (else FILTERED_OUT)", what, err, wantPass)
		}
	}
	missing := as.ExpEq(as.ExpStringBin("missing"), as.ExpStringVal("x"))
	// The lock's filters (lock.go) over bins a Java lock lacks: a comparison over a
	// missing bin is "unknown", which filters the record out, also under not; and/or
	// evaluate left to right and stop at the first operand that decides.
	filtered("compare a missing bin", missing, false)
	filtered("not(compare a missing bin)", as.ExpNot(missing), false)
	filtered("or(true, compare a missing bin)", as.ExpOr(as.ExpNot(as.ExpBinExists("missing")), missing), true)
	filtered("not(and(false, compare a missing bin))", as.ExpNot(as.ExpAnd(as.ExpBinExists("missing"), missing)), true)

	// serverNow: last-update time plus since-update is the server's clock, in reads
	// and in writes (where last-update is the write's own).
	now := as.ExpNumAdd(as.ExpNumDiv(as.ExpLastUpdate(), as.ExpIntVal(int64(time.Millisecond))), as.ExpSinceUpdate())
	time.Sleep(1100 * time.Millisecond)
	before := time.Now().UnixMilli()
	rec, err := c.Operate(nil, k, as.ExpReadOp("now", now, as.ExpReadFlagDefault))
	after := time.Now().UnixMilli()
	must(t, err, "read now")
	if n, _ := rec.Bins["now"].(int); int64(n) < before-1000 || int64(n) > after+1000 {
		t.Errorf("server now in a read = %d, client clock %d..%d", n, before, after)
	}
	rec, err = c.Operate(as.NewWritePolicy(0, as.TTLDontUpdate), k, as.ExpWriteOp("w", now, as.ExpWriteFlagDefault), as.GetOp())
	must(t, err, "write now")
	if n, _ := rec.Bins["w"].(int); int64(n) < before-1000 || int64(n) > time.Now().UnixMilli()+1000 {
		t.Errorf("server now in a write = %d, client clock about %d", n, before)
	}
	// TTL_DONT_UPDATE left the record's TTL (100 s, set 1.1 s ago) alone.
	if rec.Expiration > 99 || rec.Expiration < 90 {
		t.Errorf("TTL after a TTL_DONT_UPDATE write = %d, want just under 100", rec.Expiration)
	}

	// A read-all op may share an operate with plain and expression writes (they return
	// nothing), but not with an op that returns a value: a CDT op, even with return
	// type NONE.
	_, err = c.Operate(as.NewWritePolicy(0, as.TTLDontUpdate), k,
		as.MapRemoveByKeyOp("m", "y", as.MapReturnType.NONE), as.GetOp())
	if rc(err) != types.PARAMETER_ERROR {
		t.Errorf("read-all beside a map op = %v, want PARAMETER_ERROR", err)
	}
	_, err = c.Operate(as.NewWritePolicy(0, as.TTLDontUpdate), k,
		as.AddOp(as.NewBin("a", 1)), as.ExpWriteOp("e", as.ExpIntVal(1), as.ExpWriteFlagDefault), as.GetOp())
	must(t, err, "read-all beside add and expression writes")

	// A cond's branches must have one type; ExpUnknown with EvalNoFail skips the write.
	_, err = c.Operate(as.NewWritePolicy(0, as.TTLDontUpdate), k,
		as.ExpWriteOp("ends", as.ExpCond(as.ExpBinExists("ends"), as.ExpMapBin("ends"), as.ExpUnknown()), as.ExpWriteFlagEvalNoFail))
	must(t, err, "an expression write that evaluates to unknown, with EvalNoFail")

	// A record that never expires has ExpTTL -1.
	nk := key(t, "dcsync_semantics", unique("never"))
	must(t, c.Put(as.NewWritePolicy(0, as.TTLDontExpire), nk, as.BinMap{"a": 1}), "put never-expiring")
	rec, err = c.Operate(nil, nk, as.ExpReadOp("ttl", as.ExpTTL(), as.ExpReadFlagDefault))
	must(t, err, "read ttl")
	if rec.Bins["ttl"] != -1 {
		t.Errorf("ExpTTL of a never-expiring record = %v, want -1", rec.Bins["ttl"])
	}
	must(t, func() error { _, err := c.Delete(nil, nk); return err }(), "delete")
}
