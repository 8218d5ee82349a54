package aerotest

import (
	"reflect"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"
)

// TestExpressionOps covers expression read and write ops (ExpReadOp,
// ExpWriteOp) with the constructs the Aerospike store uses: CDT calls on
// lists and maps, cond, unknown, let, arithmetic, and the record metadata
// an expression sees inside a write.
func TestExpressionOps(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		ttl := func(s uint32) *as.WritePolicy { return writePolicy(func(p *as.WritePolicy) { p.Expiration = s }) }
		k := tg.key(t, "exp", "k")
		mustOK(t, "put", c.Put(ttl(50), k, as.BinMap{"x": 1, "m": map[any]any{"k": 7, "j": 9}}))

		// Inside a write, expressions see the write's own TTL and a
		// last-update time of the write (milliseconds), before and after
		// the other ops.
		r, err := c.Operate(ttl(100), k,
			as.ExpReadOp("t0", as.ExpTTL(), as.ExpReadFlagDefault),
			as.ExpReadOp("su0", as.ExpSinceUpdate(), as.ExpReadFlagDefault),
			as.ExpReadOp("lu0", as.ExpLastUpdate(), as.ExpReadFlagDefault),
			as.AddOp(as.NewBin("x", 1)),
			as.ExpReadOp("t1", as.ExpTTL(), as.ExpReadFlagDefault),
			as.ExpReadOp("lu1", as.ExpLastUpdate(), as.ExpReadFlagDefault),
			as.ExpReadOp("x1", as.ExpIntBin("x"), as.ExpReadFlagDefault))
		mustOK(t, "metadata in a write", err)
		lu, _ := r.Bins["lu0"].(int)
		if r.Bins["t0"] != 100 || r.Bins["t1"] != 100 || r.Bins["su0"] != 0 || r.Bins["lu1"] != lu ||
			lu%int(time.Millisecond) != 0 || r.Bins["x1"] != 2 || time.Since(time.Unix(0, int64(lu))) > time.Minute {
			t.Fatalf("metadata in a write: %#v", r.Bins)
		}
		r, err = c.Operate(writePolicy(nil), k, as.ExpReadOp("t", as.ExpTTL(), as.ExpReadFlagDefault),
			as.ExpReadOp("lu", as.ExpLastUpdate(), as.ExpReadFlagDefault))
		mustOK(t, "metadata in a read", err)
		if tt, _ := r.Bins["t"].(int); tt < 95 || tt > 100 || r.Bins["lu"] != lu {
			t.Fatalf("metadata in a read: %#v (last update %d)", r.Bins, lu)
		}

		m := as.ExpMapBin("m")
		read := func(name string, e *as.Expression, flags as.ExpReadFlags, want any, wantRC types.ResultCode) {
			t.Helper()
			r, err := c.Operate(writePolicy(nil), k, as.ExpReadOp("v", e, flags))
			if rc(err) != wantRC {
				t.Fatalf("%s: %v, want %v", name, err, wantRC)
			}
			if err == nil && !reflect.DeepEqual(r.Bins["v"], want) {
				t.Fatalf("%s: %#v, want %#v", name, r.Bins["v"], want)
			}
		}
		read("map get by key", as.ExpMapGetByKey(as.MapReturnType.VALUE, as.ExpTypeINT, as.ExpStringVal("k"), m), 0, 7, types.OK)
		read("map get by missing key", as.ExpMapGetByKey(as.MapReturnType.VALUE, as.ExpTypeINT, as.ExpStringVal("zz"), m), 0, nil, types.OP_NOT_APPLICABLE)
		read("map get by missing key, no-fail", as.ExpMapGetByKey(as.MapReturnType.VALUE, as.ExpTypeINT, as.ExpStringVal("zz"), m), as.ExpReadFlagEvalNoFail, nil, types.OK)
		read("map key exists", as.ExpMapGetByKey(as.MapReturnType.EXISTS, as.ExpTypeBOOL, as.ExpStringVal("zz"), m), 0, false, types.OK)
		read("map highest value", as.ExpMapGetByRank(as.MapReturnType.VALUE, as.ExpTypeINT, as.ExpIntVal(-1), m), 0, 9, types.OK)
		read("highest value of an empty map", as.ExpMapGetByRank(as.MapReturnType.VALUE, as.ExpTypeINT, as.ExpIntVal(-1), as.ExpMapVal(map[any]any{})), 0, nil, types.OP_NOT_APPLICABLE)
		read("missing map bin", as.ExpMapBin("nope"), 0, nil, types.OP_NOT_APPLICABLE)
		read("missing map bin, no-fail", as.ExpMapBin("nope"), as.ExpReadFlagEvalNoFail, nil, types.OK)
		read("unknown", as.ExpUnknown(), 0, nil, types.OP_NOT_APPLICABLE)
		read("let and div", as.ExpLet(as.ExpDef("v", as.ExpIntVal(7)), as.ExpNumDiv(as.ExpVar("v"), as.ExpIntVal(2))), 0, 3, types.OK)
		read("literals", as.ExpListVal(as.NewValue(1), as.NewValue("a")), 0, []any{1, "a"}, types.OK)
		read("blob", as.ExpBlobVal([]byte{1, 2}), 0, []byte{1, 2}, types.OK)
		read("cond with branches of two types", as.ExpCond(as.ExpBinExists("x"), as.ExpIntVal(1), as.ExpStringVal("a")), 0, nil, types.PARAMETER_ERROR)
		read("int plus float", as.ExpNumAdd(as.ExpIntVal(1), as.ExpFloatVal(1.5)), 0, nil, types.PARAMETER_ERROR)
		read("division by zero", as.ExpNumDiv(as.ExpIntVal(1), as.ExpIntVal(0)), 0, nil, types.OP_NOT_APPLICABLE)
		read("to int", as.ExpToInt(as.ExpFloatVal(2.7)), 0, 2, types.OK)
		read("int bin over a float bin", as.ExpIntBin("m"), 0, nil, types.OP_NOT_APPLICABLE)
		read("integer overflow wraps", as.ExpNumAdd(as.ExpIntVal(9223372036854775807), as.ExpIntVal(1)), 0, -9223372036854775808, types.OK)

		write := func(name, bin string, e *as.Expression, flags as.ExpWriteFlags, wantRC types.ResultCode) {
			t.Helper()
			_, err := c.Operate(writePolicy(nil), k, as.ExpWriteOp(bin, e, flags))
			if rc(err) != wantRC {
				t.Fatalf("%s: %v, want %v", name, err, wantRC)
			}
		}
		gen := func() uint32 {
			h, err := c.GetHeader(nil, k)
			mustOK(t, "header", err)
			return h.Generation
		}
		g := gen()
		write("write unknown", "w", as.ExpUnknown(), 0, types.OP_NOT_APPLICABLE)
		write("write unknown, no-fail", "w", as.ExpUnknown(), as.ExpWriteFlagEvalNoFail, types.OK)
		if got := gen(); got != g+1 {
			t.Fatalf("a no-fail write of unknown: generation %d -> %d", g, got)
		}
		write("write nil over a bin", "x", as.ExpNilValue(), 0, types.OP_NOT_APPLICABLE)
		write("write nil over a bin, allow delete", "x", as.ExpNilValue(), as.ExpWriteFlagAllowDelete, types.OK)
		write("create-only over a bin", "m", as.ExpIntVal(3), as.ExpWriteFlagCreateOnly, types.BIN_EXISTS_ERROR)
		write("update-only of a missing bin", "nb", as.ExpIntVal(3), as.ExpWriteFlagUpdateOnly, types.BIN_NOT_FOUND)
		write("update-only of a missing bin, no-fail", "nb", as.ExpIntVal(3), as.ExpWriteFlagUpdateOnly|as.ExpWriteFlagPolicyNoFail, types.OK)

		// The store's op-id list: append an id and keep the last two.
		list := as.ExpCond(as.ExpBinExists("ops"), as.ExpListBin("ops"), as.ExpListVal())
		for i, id := range []string{"id1", "id2", "id3"} {
			kept := as.ExpListRemoveByIndexRange(as.ListReturnTypeNone|as.ListReturnTypeInverted, as.ExpIntVal(-2),
				as.ExpListAppend(as.DefaultListPolicy(), as.ExpBlobVal([]byte(id)), list))
			r, err := c.Operate(writePolicy(nil), k, as.ExpWriteOp("ops", kept, as.ExpWriteFlagDefault),
				as.ExpReadOp("has", as.ExpListGetByValue(as.ListReturnTypeExists, as.ExpBlobVal([]byte("id1")), as.ExpListBin("ops")), as.ExpReadFlagDefault))
			mustOK(t, "append an op id", err)
			if want := i < 2; r.Bins["has"] != want || r.Bins["ops"] != nil {
				t.Fatalf("append %s: %#v", id, r.Bins)
			}
		}
		rec, err := c.Get(nil, k, "ops")
		mustOK(t, "get ops", err)
		if !reflect.DeepEqual(rec.Bins["ops"], []any{[]byte("id2"), []byte("id3")}) {
			t.Fatalf("ops %#v", rec.Bins["ops"])
		}

		// A map of ends: put into a new map, then into the bin when it exists.
		put := as.ExpMapPut(as.DefaultMapPolicy(), as.ExpStringVal("dc1"), as.ExpIntVal(5), as.ExpMapVal(map[any]any{}))
		write("map put into a new map", "ends", put, 0, types.OK)
		put2 := as.ExpCond(as.ExpBinExists("ends"),
			as.ExpMapPut(as.DefaultMapPolicy(), as.ExpStringVal("dc2"), as.ExpIntVal(6), as.ExpMapBin("ends")), as.ExpUnknown())
		write("map put into the bin", "ends", put2, as.ExpWriteFlagEvalNoFail, types.OK)
		put3 := as.ExpCond(as.ExpBinExists("nope"),
			as.ExpMapPut(as.DefaultMapPolicy(), as.ExpStringVal("dc3"), as.ExpIntVal(7), as.ExpMapBin("nope")), as.ExpUnknown())
		write("map put into a missing bin, no-fail", "nope", put3, as.ExpWriteFlagEvalNoFail, types.OK)
		rec, err = c.Get(nil, k)
		mustOK(t, "get", err)
		if !reflect.DeepEqual(rec.Bins["ends"], map[any]any{"dc1": 5, "dc2": 6}) || rec.Bins["x"] != nil || rec.Bins["nope"] != nil || rec.Bins["nb"] != nil {
			t.Fatalf("record %#v", rec.Bins)
		}

		// A counter bin written from its own value.
		cnt := as.ExpCond(as.ExpBinExists("cnt"), as.ExpNumAdd(as.ExpIntBin("cnt"), as.ExpIntVal(-1)), as.ExpIntVal(-1))
		for i := 1; i <= 2; i++ {
			r, err := c.Operate(writePolicy(nil), k, as.ExpWriteOp("cnt", cnt, as.ExpWriteFlagDefault), as.ExpReadOp("c", as.ExpIntBin("cnt"), as.ExpReadFlagDefault))
			mustOK(t, "count down", err)
			if r.Bins["c"] != -i {
				t.Fatalf("count down %d: %#v", i, r.Bins)
			}
		}

		// Expression reads produce response bins: no read-all with them in a write.
		_, err = c.Operate(writePolicy(nil), k, as.AddOp(as.NewBin("cnt", 1)), as.ExpReadOp("r", as.ExpIntVal(2), as.ExpReadFlagDefault), as.GetOp())
		wantRC(t, "read-all with an expression read", err, types.PARAMETER_ERROR)

		// On a record being created, expressions see it new: no TTL (the
		// namespace default is 0), no stored key.
		r, err = c.Operate(writePolicy(nil), tg.key(t, "exp", "new"), as.ExpWriteOp("w", as.ExpIntVal(1), as.ExpWriteFlagDefault),
			as.ExpReadOp("t", as.ExpTTL(), as.ExpReadFlagDefault), as.ExpReadOp("key", as.ExpKeyExists(), as.ExpReadFlagDefault))
		mustOK(t, "create", err)
		if !reflect.DeepEqual(r.Bins, as.BinMap{"w": nil, "t": -1, "key": false}) || r.Generation != 1 {
			t.Fatalf("create: %+v", r)
		}

		// Batch rows with expression reads.
		rows := []as.BatchRecordIfc{
			as.NewBatchReadOps(nil, k, as.ExpReadOp("now", as.ExpNumAdd(as.ExpNumDiv(as.ExpLastUpdate(), as.ExpIntVal(int64(time.Millisecond))), as.ExpSinceUpdate()), as.ExpReadFlagDefault)),
			as.NewBatchReadOps(nil, tg.key(t, "exp", "missing"), as.ExpReadOp("now", as.ExpIntVal(1), as.ExpReadFlagDefault)),
		}
		mustOK(t, "batch", c.BatchOperate(nil, rows))
		now, _ := rows[0].BatchRec().Record.Bins["now"].(int)
		if d := time.Since(time.UnixMilli(int64(now))); d < -time.Minute || d > time.Minute || rows[1].BatchRec().ResultCode != types.KEY_NOT_FOUND_ERROR {
			t.Fatalf("batch: %+v %+v", rows[0].BatchRec(), rows[1].BatchRec())
		}
	})
}
