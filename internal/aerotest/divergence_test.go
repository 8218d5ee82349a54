package aerotest

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"
)

// The tests in this file each pin a behaviour of the real server that
// aerotest once got wrong; every one runs against aerotest and against
// the real server (DCSYNC_AEROSPIKE).

// replyMsg parses a captured AS_MSG reply frame.
func replyMsg(t *testing.T, frame []byte) *asMsg {
	t.Helper()
	m, err := parseMsgPrefix(frame[8:])
	if err != nil {
		t.Fatalf("undecodable reply %x: %v", frame, err)
	}
	return m.msg
}

// lastReply returns the last reply frame captured.
func lastReply(t *testing.T, cp *capture) *asMsg {
	t.Helper()
	rs := cp.replies()
	if len(rs) == 0 {
		t.Fatal("no reply captured")
	}
	return replyMsg(t, rs[len(rs)-1])
}

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	wantRC(t, what, err, types.OK)
}

// TestReadAllWithValueOps: in a write, a read-all op (GetOp) cannot be
// mixed with an op that returns a value (any CDT op, a named read): the
// server answers PARAMETER_ERROR (4), even when the record is missing, and
// nothing is written. Read-all with plain writes and touch is fine.
func TestReadAllWithValueOps(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		k := tg.key(t, "readall", "k")
		missing := tg.key(t, "readall", "missing")
		mustOK(t, "put", c.Put(writePolicy(nil), k, as.BinMap{"x": 1, "m": map[any]any{"k": 1}}))
		mixes := map[string][]*as.Operation{
			"map put":             {as.GetOp(), as.MapPutOp(as.DefaultMapPolicy(), "m", "z", 3)},
			"map remove NONE":     {as.GetOp(), as.MapRemoveByKeyOp("m", "zz", as.MapReturnType.NONE)},
			"map clear":           {as.GetOp(), as.MapClearOp("m")},
			"add, get, get bin":   {as.AddOp(as.NewBin("x", 1)), as.GetOp(), as.GetBinOp("x")},
			"add, get, map size":  {as.AddOp(as.NewBin("x", 1)), as.GetOp(), as.MapSizeOp("m")},
			"list append and get": {as.GetOp(), as.ListAppendOp("l", 1)},
		}
		for name, ops := range mixes {
			for _, kk := range []*as.Key{k, missing} {
				_, err := c.Operate(writePolicy(nil), kk, ops...)
				wantRC(t, name, err, types.PARAMETER_ERROR)
			}
		}
		r, err := c.Get(nil, k)
		mustOK(t, "get", err)
		if r.Generation != 1 || r.Bins["x"] != 1 {
			t.Fatalf("a refused operate changed the record: %+v", r)
		}
		if _, err := c.Get(nil, missing); rc(err) != types.KEY_NOT_FOUND_ERROR {
			t.Fatalf("a refused operate created the record: %v", err)
		}
		r, err = c.Operate(writePolicy(nil), k, as.AddOp(as.NewBin("x", 1)), as.GetOp())
		mustOK(t, "add and get", err)
		if !reflect.DeepEqual(r.Bins, as.BinMap{"x": 2, "m": map[any]any{"k": 1}}) || r.Generation != 2 {
			t.Fatalf("add and get: %+v", r)
		}
		r, err = c.Operate(writePolicy(nil), k, as.TouchOp(), as.GetOp())
		mustOK(t, "touch and get", err)
		if r.Bins["x"] != 2 || r.Generation != 3 {
			t.Fatalf("touch and get: %+v", r)
		}
		recs := []as.BatchRecordIfc{as.NewBatchWrite(nil, k, as.AddOp(as.NewBin("x", 1)), as.GetOp())}
		mustOK(t, "batch", c.BatchOperate(nil, recs))
		if r := recs[0].BatchRec(); r.ResultCode != types.OK || r.Record.Bins["x"] != 3 {
			t.Fatalf("batch write with read-all: %+v", r)
		}
		// With a map op in the same row it is refused there too.
		recs = []as.BatchRecordIfc{as.NewBatchWrite(nil, k, as.MapPutOp(as.DefaultMapPolicy(), "m", "j", 1), as.GetOp())}
		// With one row the client reports the row's error.
		wantRC(t, "batch", c.BatchOperate(nil, recs), types.PARAMETER_ERROR)
		if got := recs[0].BatchRec().ResultCode; got != types.PARAMETER_ERROR {
			t.Fatalf("batch write with read-all and a map op: %v", got)
		}
	})
}

// TestReadOnlyReadAllReturnsOnlyBins: a read-only operate with read-all and
// map reads or named reads answers exactly the record's bins, as Get does;
// the other ops are ignored.
func TestReadOnlyReadAllReturnsOnlyBins(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		k := tg.key(t, "readall", "ro")
		mustOK(t, "put", c.Put(writePolicy(nil), k, as.BinMap{"x": 1, "m": map[any]any{"k": 1, "j": 2}}))
		want := as.BinMap{"x": 1, "m": map[any]any{"k": 1, "j": 2}}
		for name, ops := range map[string][]*as.Operation{
			"get and map get":                {as.GetOp(), as.MapGetByKeyOp("m", "k", as.MapReturnType.VALUE)},
			"get and get bin":                {as.GetOp(), as.GetBinOp("x")},
			"get, map size, get missing bin": {as.GetOp(), as.MapSizeOp("m"), as.GetBinOp("nope")},
		} {
			r, err := c.Operate(writePolicy(nil), k, ops...)
			mustOK(t, name, err)
			if !reflect.DeepEqual(r.Bins, want) {
				t.Fatalf("%s: bins %#v, want %#v", name, r.Bins, want)
			}
		}
		_, err := c.Operate(writePolicy(nil), tg.key(t, "readall", "missing"), as.GetOp(), as.MapSizeOp("m"))
		wantRC(t, "missing", err, types.KEY_NOT_FOUND_ERROR)
	})
}

// TestKeyValueResultShape: a KEY_VALUE result is sent as a map with the
// PRESERVE_ORDER flag (ext 8), even from an unordered map, so the client
// returns []MapPair in the server's order; UNORDERED_MAP and ORDERED_MAP
// results carry no flag and flag 1.
func TestKeyValueResultShape(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		cp := startCapture(t, tg)
		c := cp.client(t)
		k := tg.key(t, "kv", "k")
		for _, kv := range []string{"c", "a", "b"} {
			_, err := c.Operate(writePolicy(nil), k, as.MapPutOp(as.DefaultMapPolicy(), "u", kv, int(kv[0])))
			mustOK(t, "map put", err)
		}
		cases := []struct {
			rt       any
			wantData string // hex of the op's particle data
			want     any
		}{
			{as.MapReturnType.KEY_VALUE, "84c70008c0a20361" + "61" + "a20362" + "62" + "a20363" + "63",
				[]as.MapPair{{Key: "a", Value: 97}, {Key: "b", Value: 98}, {Key: "c", Value: 99}}},
			{as.MapReturnType.UNORDERED_MAP, "83a20361" + "61" + "a20362" + "62" + "a20363" + "63",
				map[any]any{"a": 97, "b": 98, "c": 99}},
			{as.MapReturnType.ORDERED_MAP, "84c70001c0a20361" + "61" + "a20362" + "62" + "a20363" + "63",
				[]as.MapPair{{Key: "a", Value: 97}, {Key: "b", Value: 98}, {Key: "c", Value: 99}}},
		}
		for i, tc := range cases {
			var op *as.Operation
			switch i {
			case 0:
				op = as.MapGetByIndexRangeOp("u", 0, as.MapReturnType.KEY_VALUE)
			case 1:
				op = as.MapGetByIndexRangeOp("u", 0, as.MapReturnType.UNORDERED_MAP)
			case 2:
				op = as.MapGetByIndexRangeOp("u", 0, as.MapReturnType.ORDERED_MAP)
			}
			cp.replies()
			r, err := c.Operate(writePolicy(nil), k, op)
			mustOK(t, "get by index range", err)
			if !reflect.DeepEqual(r.Bins["u"], tc.want) {
				t.Fatalf("return type %v: %#v, want %#v", tc.rt, r.Bins["u"], tc.want)
			}
			m := lastReply(t, cp)
			if len(m.ops) != 1 || m.ops[0].ptype != ptMap || hex.EncodeToString(m.ops[0].data) != tc.wantData {
				t.Fatalf("return type %v: reply op %+v, want map data %s", tc.rt, m.ops, tc.wantData)
			}
		}
		// A single KEY_VALUE result is a one-pair ordered list too.
		r, err := c.Operate(writePolicy(nil), k, as.MapGetByKeyOp("u", "b", as.MapReturnType.KEY_VALUE))
		mustOK(t, "get by key", err)
		if !reflect.DeepEqual(r.Bins["u"], []as.MapPair{{Key: "b", Value: 98}}) {
			t.Fatalf("by key: %#v", r.Bins["u"])
		}
	})
}

// TestMapsAreStoredInKeyOrder: the server sorts every map it stores by key
// (whatever order the client sent, at any depth), so a read of the bin
// returns the keys in order; puts insert at the sorted position.
func TestMapsAreStoredInKeyOrder(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		cp := startCapture(t, tg)
		c := cp.client(t)
		k := tg.key(t, "order", "k")
		m := map[any]any{}
		for _, s := range []string{"f", "d", "b", "e", "c", "a"} {
			m[s] = int(s[0])
		}
		mustOK(t, "put", c.Put(writePolicy(nil), k, as.BinMap{"w": m, "l": []any{map[any]any{"z": 1, "y": 2}}}))
		_, err := c.Operate(writePolicy(nil), k, as.MapPutOp(as.DefaultMapPolicy(), "w", "bb", 1))
		mustOK(t, "map put", err)
		cp.replies()
		_, err = c.Get(nil, k, "w", "l")
		mustOK(t, "get", err)
		r := lastReply(t, cp)
		want := map[string]string{
			"w": "87" + "a2036161" + "a2036262" + "a303626201" + "a2036363" + "a2036464" + "a2036565" + "a2036666",
			"l": "9182a2037902a2037a01",
		}
		for _, o := range r.ops {
			if got := hex.EncodeToString(o.data); got != want[o.name] {
				t.Fatalf("bin %s stored as %s, want %s", o.name, got, want[o.name])
			}
		}
	})
}

// TestDeleteReplies: a delete with an expected generation on a missing
// record is KEY_NOT_FOUND (the client reports existed=false, no error),
// and delete replies never carry the record's generation or void-time.
func TestDeleteReplies(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		cp := startCapture(t, tg)
		c := cp.client(t)
		gen5 := writePolicy(func(p *as.WritePolicy) { p.GenerationPolicy = as.EXPECT_GEN_EQUAL; p.Generation = 5 })
		existed, err := c.Delete(gen5, tg.key(t, "del", "missing"))
		if err != nil || existed {
			t.Fatalf("delete of a missing record with generation 5: existed=%v err=%v", existed, err)
		}
		if m := lastReply(t, cp); m.hdr.resultCode != rcKeyNotFound {
			t.Fatalf("reply rc %d", m.hdr.resultCode)
		}
		k := tg.key(t, "del", "k")
		mustOK(t, "put", c.Put(writePolicy(func(p *as.WritePolicy) { p.Expiration = 100 }), k, as.BinMap{"x": 1}))
		_, err = c.Delete(gen5, k)
		wantRC(t, "delete with the wrong generation", err, types.GENERATION_ERROR)
		if m := lastReply(t, cp); m.hdr.generation != 0 || m.hdr.ttl != 0 {
			t.Fatalf("generation error reply carries gen %d void %d", m.hdr.generation, m.hdr.ttl)
		}
		flt := writePolicy(func(p *as.WritePolicy) { p.FilterExpression = as.ExpEq(as.ExpIntBin("x"), as.ExpIntVal(2)) })
		_, err = c.Delete(flt, k)
		wantRC(t, "filtered delete", err, types.FILTERED_OUT)
		if m := lastReply(t, cp); m.hdr.generation != 0 || m.hdr.ttl != 0 {
			t.Fatalf("filtered-out delete reply carries gen %d void %d", m.hdr.generation, m.hdr.ttl)
		}
		existed, err = c.Delete(writePolicy(func(p *as.WritePolicy) { p.GenerationPolicy = as.EXPECT_GEN_EQUAL; p.Generation = 1 }), k)
		if err != nil || !existed {
			t.Fatalf("delete: %v %v", existed, err)
		}
	})
}

// TestReplaceRules: a record-level replace (REPLACE, REPLACE_ONLY) refuses
// bin deletes (nil bins), modify ops, CDT modifies and touch with
// PARAMETER_ERROR before looking at the record; reads are allowed.
func TestReplaceRules(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		k := tg.key(t, "replace", "k")
		missing := tg.key(t, "replace", "missing")
		mustOK(t, "put", c.Put(writePolicy(nil), k, as.BinMap{"x": 1, "y": 1}))
		for _, action := range []as.RecordExistsAction{as.REPLACE, as.REPLACE_ONLY} {
			p := writePolicy(func(p *as.WritePolicy) { p.RecordExistsAction = action })
			for _, kk := range []*as.Key{k, missing} {
				wantRC(t, "replace with a nil bin", c.Put(p, kk, as.BinMap{"x": nil}), types.PARAMETER_ERROR)
				_, err := c.Operate(p, kk, as.PutOp(as.NewBin("x", nil)), as.PutOp(as.NewBin("y", 2)))
				wantRC(t, "replace with a nil bin and a value", err, types.PARAMETER_ERROR)
				_, err = c.Operate(p, kk, as.AddOp(as.NewBin("x", 1)))
				wantRC(t, "replace with add", err, types.PARAMETER_ERROR)
				_, err = c.Operate(p, kk, as.TouchOp())
				wantRC(t, "replace with touch", err, types.PARAMETER_ERROR)
				_, err = c.Operate(p, kk, as.MapPutOp(as.DefaultMapPolicy(), "m", "k", 1))
				wantRC(t, "replace with a map op", err, types.PARAMETER_ERROR)
			}
		}
		r, err := c.Get(nil, k)
		mustOK(t, "get", err)
		if !reflect.DeepEqual(r.Bins, as.BinMap{"x": 1, "y": 1}) || r.Generation != 1 {
			t.Fatalf("refused replaces changed the record: %+v", r)
		}
		rp := writePolicy(func(p *as.WritePolicy) { p.RecordExistsAction = as.REPLACE })
		r, err = c.Operate(rp, k, as.PutOp(as.NewBin("z", 5)), as.GetBinOp("z"))
		mustOK(t, "replace with a read", err)
		if !reflect.DeepEqual(r.Bins, as.BinMap{"z": 5}) {
			t.Fatalf("replace with a read: %+v", r.Bins)
		}
		r, err = c.Operate(rp, k, as.PutOp(as.NewBin("w", 6)), as.GetOp())
		mustOK(t, "replace with read-all", err)
		if !reflect.DeepEqual(r.Bins, as.BinMap{"w": 6}) {
			t.Fatalf("replace with read-all: %+v", r.Bins)
		}
	})
}

// TestWriteLeavingNoBins: a write that leaves a missing record without bins
// (a nil bin, a map remove or clear on a missing record) is KEY_NOT_FOUND;
// on an existing record it deletes the record and the reply carries no
// metadata.
func TestWriteLeavingNoBins(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		missing := tg.key(t, "nobins", "missing")
		wantRC(t, "put nil", c.Put(writePolicy(nil), missing, as.BinMap{"x": nil}), types.KEY_NOT_FOUND_ERROR)
		_, err := c.Operate(writePolicy(nil), missing, as.MapRemoveByKeyOp("m", "k", as.MapReturnType.NONE))
		wantRC(t, "map remove", err, types.KEY_NOT_FOUND_ERROR)
		_, err = c.Operate(writePolicy(nil), missing, as.MapClearOp("m"))
		wantRC(t, "map clear", err, types.KEY_NOT_FOUND_ERROR)
		_, err = c.Operate(writePolicy(nil), missing, as.ListPopOp("l", 0))
		wantRC(t, "list pop", err, types.KEY_NOT_FOUND_ERROR)
		if ok, _ := c.Exists(nil, missing); ok {
			t.Fatal("record created")
		}
		k := tg.key(t, "nobins", "k")
		mustOK(t, "put", c.Put(writePolicy(func(p *as.WritePolicy) { p.Expiration = 100 }), k, as.BinMap{"x": 1}))
		r, err := c.Operate(writePolicy(nil), k, as.MapRemoveByKeyOp("m", "k", as.MapReturnType.NONE))
		mustOK(t, "map remove on a missing bin", err)
		if r.Generation != 2 || !reflect.DeepEqual(r.Bins, as.BinMap{"m": nil}) {
			t.Fatalf("map remove on a missing bin: %+v", r)
		}
		r, err = c.Operate(writePolicy(nil), k, as.PutOp(as.NewBin("x", nil)))
		mustOK(t, "delete the last bin", err)
		if r.Generation != 0 || r.Expiration != as.TTLDontExpire {
			t.Fatalf("the reply of a write that deletes carries metadata: %+v", r)
		}
		if ok, _ := c.Exists(nil, k); ok {
			t.Fatal("record still exists")
		}
	})
}

// TestTouchAndRespondAllOps: touch never produces a reply entry, even with
// RESPOND_ALL_OPS; the other ops each produce one.
func TestTouchAndRespondAllOps(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		k := tg.key(t, "touch", "k")
		mustOK(t, "put", c.Put(writePolicy(nil), k, as.BinMap{"x": 1}))
		r, err := c.Operate(writePolicy(nil), k, as.TouchOp(), as.MapSizeOp("m"), as.PutOp(as.NewBin("y", 1)))
		mustOK(t, "touch, map size, put", err)
		if !reflect.DeepEqual(r.Bins, as.BinMap{"m": nil, "y": nil}) {
			t.Fatalf("touch, map size, put: %#v", r.Bins)
		}
		each := writePolicy(func(p *as.WritePolicy) { p.RespondPerEachOp = true })
		r, err = c.Operate(each, k, as.TouchOp(), as.AddOp(as.NewBin("x", 1)), as.GetBinOp("x"), as.GetBinOp("nope"),
			as.DeleteOp(), as.PutOp(as.NewBin("z", 1)))
		mustOK(t, "respond per op", err)
		want := as.BinMap{"x": as.OpResults{nil, 2}, "nope": nil, "": nil, "z": nil}
		if !reflect.DeepEqual(r.Bins, want) {
			t.Fatalf("respond per op: %#v, want %#v", r.Bins, want)
		}
		r, err = c.Operate(each, k, as.GetBinOp("z"), as.GetBinOp("nope"))
		mustOK(t, "read-only respond per op", err)
		if !reflect.DeepEqual(r.Bins, as.BinMap{"z": 1, "nope": nil}) {
			t.Fatalf("read-only respond per op: %#v", r.Bins)
		}
		r, err = c.Operate(writePolicy(nil), k, as.MapSizeOp("nope"), as.GetBinOp("z"))
		mustOK(t, "map size of a missing bin", err)
		if !reflect.DeepEqual(r.Bins, as.BinMap{"nope": nil, "z": 1}) {
			t.Fatalf("map size of a missing bin: %#v", r.Bins)
		}
	})
}

// TestDurableDeleteIsEnterpriseOnly: on Community Edition a durable delete
// is ENTERPRISE_ONLY (25), before the record is looked up; a durable write
// that does not delete is fine.
func TestDurableDeleteIsEnterpriseOnly(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		dur := writePolicy(func(p *as.WritePolicy) { p.DurableDelete = true })
		_, err := c.Delete(dur, tg.key(t, "durable", "missing"))
		wantRC(t, "durable delete of a missing record", err, types.ENTERPRISE_ONLY)
		k := tg.key(t, "durable", "k")
		mustOK(t, "durable write", c.Put(dur, k, as.BinMap{"x": 1}))
		_, err = c.Delete(dur, k)
		wantRC(t, "durable delete", err, types.ENTERPRISE_ONLY)
		_, err = c.Operate(dur, k, as.DeleteOp())
		wantRC(t, "durable delete op", err, types.ENTERPRISE_ONLY)
		if ok, _ := c.Exists(nil, k); !ok {
			t.Fatal("record deleted")
		}
	})
}

// TestNsupDisabledNamespace: in a namespace with nsup-period 0 (and no
// allow-ttl-without-nsup) every write that would give the record a TTL
// fails with FAIL_FORBIDDEN (22); TTL 0 (the default, never), -1 and -2
// are accepted.
func TestNsupDisabledNamespace(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		k := tg.nsKey(t, "nonsup", "n", "k")
		ttl := func(s uint32) *as.WritePolicy { return writePolicy(func(p *as.WritePolicy) { p.Expiration = s }) }
		wantRC(t, "ttl 10 on create", c.Put(ttl(10), k, as.BinMap{"x": 1}), types.FAIL_FORBIDDEN)
		mustOK(t, "ttl 0", c.Put(ttl(0), k, as.BinMap{"x": 1}))
		mustOK(t, "ttl -1", c.Put(ttl(as.TTLDontExpire), k, as.BinMap{"x": 2}))
		mustOK(t, "ttl -2", c.Put(ttl(as.TTLDontUpdate), k, as.BinMap{"x": 3}))
		wantRC(t, "touch 10", c.Touch(ttl(10), k), types.FAIL_FORBIDDEN)
		_, err := c.Operate(ttl(60), k, as.AddOp(as.NewBin("x", 1)))
		wantRC(t, "operate ttl 60", err, types.FAIL_FORBIDDEN)
		r, err := c.Get(nil, k)
		mustOK(t, "get", err)
		if r.Bins["x"] != 3 || r.Generation != 3 {
			t.Fatalf("refused writes changed the record: %+v", r)
		}
	})
}

// TestBinOrder: bins come back in the order they were created; deleting a
// bin moves the last bin into its slot (the server's as_bin_remove).
func TestBinOrder(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		cp := startCapture(t, tg)
		c := cp.client(t)
		k := tg.key(t, "binorder", "k")
		_, err := c.Operate(writePolicy(nil), k, as.PutOp(as.NewBin("a", 1)), as.PutOp(as.NewBin("b", 2)),
			as.PutOp(as.NewBin("c", 3)), as.PutOp(as.NewBin("d", 4)))
		mustOK(t, "put", err)
		_, err = c.Operate(writePolicy(nil), k, as.PutOp(as.NewBin("a", nil)), as.PutOp(as.NewBin("e", 5)))
		mustOK(t, "delete a, add e", err)
		cp.replies()
		_, err = c.Get(nil, k)
		mustOK(t, "get", err)
		var names []string
		for _, o := range lastReply(t, cp).ops {
			names = append(names, o.name)
		}
		if !reflect.DeepEqual(names, []string{"d", "b", "c", "e"}) {
			t.Fatalf("bin order %v", names)
		}
	})
}

// TestFilterExpressions covers what the store relies on: filters over
// missing bins (unknown makes the filter fail, and not() keeps it
// unknown), void-time and TTL filters, an "extend-only touch", filters on
// a record being created (not evaluated), and the metadata a FILTERED_OUT
// reply carries.
func TestFilterExpressions(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		cp := startCapture(t, tg)
		c := cp.client(t)
		k := tg.key(t, "filter", "k")
		never := tg.key(t, "filter", "never")
		mustOK(t, "put", c.Put(writePolicy(func(p *as.WritePolicy) { p.Expiration = 100 }), k, as.BinMap{"x": 1, "s": "str"}))
		mustOK(t, "put never", c.Put(writePolicy(nil), never, as.BinMap{"x": 1}))
		try := func(name string, kk *as.Key, e *as.Expression, want types.ResultCode) {
			t.Helper()
			p := writePolicy(func(p *as.WritePolicy) { p.FilterExpression = e; p.Expiration = as.TTLDontUpdate })
			_, err := c.Operate(p, kk, as.AddOp(as.NewBin("n", 1)))
			wantRC(t, name, err, want)
		}
		unknown := as.ExpEq(as.ExpIntBin("nope"), as.ExpIntVal(1))
		try("bin exists (missing bin)", k, as.ExpBinExists("nope"), types.FILTERED_OUT)
		try("not bin exists", k, as.ExpNot(as.ExpBinExists("nope")), types.OK)
		try("missing int bin == 1", k, unknown, types.FILTERED_OUT)
		try("not(missing int bin == 1)", k, as.ExpNot(unknown), types.FILTERED_OUT)
		try("or(unknown, true)", k, as.ExpOr(unknown, as.ExpBinExists("x")), types.OK)
		try("or(unknown, false)", k, as.ExpOr(unknown, as.ExpBinExists("nope2")), types.FILTERED_OUT)
		try("and(false, unknown)", k, as.ExpAnd(as.ExpBinExists("nope2"), unknown), types.FILTERED_OUT)
		try("or(not exists, missing < 5)", k, as.ExpOr(as.ExpNot(as.ExpBinExists("nope")), as.ExpLess(as.ExpIntBin("nope"), as.ExpIntVal(5))), types.OK)
		try("int bin over a string bin", k, as.ExpEq(as.ExpIntBin("s"), as.ExpIntVal(1)), types.FILTERED_OUT)
		try("cond on unknown", k, as.ExpCond(unknown, as.ExpBoolVal(false), as.ExpBoolVal(true)), types.FILTERED_OUT)
		try("int compared with string", k, as.ExpEq(as.ExpIntBin("x"), as.ExpStringVal("1")), types.PARAMETER_ERROR)
		try("void time > 0", k, as.ExpGreater(as.ExpVoidTime(), as.ExpIntVal(0)), types.OK)
		try("void time == -1 (ttl)", k, as.ExpEq(as.ExpVoidTime(), as.ExpIntVal(-1)), types.FILTERED_OUT)
		try("void time == -1 (never)", never, as.ExpEq(as.ExpVoidTime(), as.ExpIntVal(-1)), types.OK)
		try("void time == 0 (never)", never, as.ExpEq(as.ExpVoidTime(), as.ExpIntVal(0)), types.FILTERED_OUT)
		try("ttl in [95, 100]", k, as.ExpAnd(as.ExpGreaterEq(as.ExpTTL(), as.ExpIntVal(95)), as.ExpLessEq(as.ExpTTL(), as.ExpIntVal(100))), types.OK)
		try("ttl == -1 (never)", never, as.ExpEq(as.ExpTTL(), as.ExpIntVal(-1)), types.OK)
		try("ttl == 0 (never)", never, as.ExpEq(as.ExpTTL(), as.ExpIntVal(0)), types.FILTERED_OUT)

		// Extend-only touch: touch to a new TTL only when that moves the
		// void-time later, and never on a record that does not expire.
		extendTo := func(secs uint32) *as.WritePolicy {
			target := time.Now().Add(time.Duration(secs) * time.Second).UnixNano()
			return writePolicy(func(p *as.WritePolicy) {
				p.Expiration = secs
				p.FilterExpression = as.ExpAnd(as.ExpNotEq(as.ExpVoidTime(), as.ExpIntVal(-1)), as.ExpLess(as.ExpVoidTime(), as.ExpIntVal(target-2e9)))
			})
		}
		wantRC(t, "extend-only touch to 50 s", c.Touch(extendTo(50), k), types.FILTERED_OUT)
		m := lastReply(t, cp)
		hdr, err := c.GetHeader(nil, k)
		mustOK(t, "header", err)
		if m.hdr.generation != hdr.Generation || m.hdr.ttl == 0 {
			t.Fatalf("FILTERED_OUT reply carries gen %d void %d; the record has gen %d", m.hdr.generation, m.hdr.ttl, hdr.Generation)
		}
		if hdr.Expiration > 100 || hdr.Expiration < 90 {
			t.Fatalf("filtered touch changed the TTL: %d", hdr.Expiration)
		}
		mustOK(t, "extend-only touch to 200 s", c.Touch(extendTo(200), k))
		if hdr, _ = c.GetHeader(nil, k); hdr.Expiration < 195 || hdr.Expiration > 200 {
			t.Fatalf("touch did not extend: %d", hdr.Expiration)
		}
		wantRC(t, "extend-only touch of a record that never expires", c.Touch(extendTo(200), never), types.FILTERED_OUT)

		// Filters are not evaluated on a record being created.
		created := tg.key(t, "filter", "created")
		try("filter on create", created, as.ExpBinExists("zzz"), types.OK)
		p := writePolicy(func(p *as.WritePolicy) {
			p.FilterExpression = as.ExpBinExists("zzz")
			p.RecordExistsAction = as.UPDATE_ONLY
		})
		_, err = c.Operate(p, tg.key(t, "filter", "missing"), as.AddOp(as.NewBin("n", 1)))
		wantRC(t, "update-only on a missing record", err, types.KEY_NOT_FOUND_ERROR)
		rp := as.NewPolicy()
		rp.FilterExpression = as.ExpBinExists("zzz")
		_, err = c.Get(rp, tg.key(t, "filter", "missing"))
		wantRC(t, "filtered get of a missing record", err, types.KEY_NOT_FOUND_ERROR)
		_, err = c.Get(rp, k)
		wantRC(t, "filtered get", err, types.FILTERED_OUT)
	})
}

// TestTTLAndGeneration: generation and void-time in replies, TTL -1 and -2,
// touch, and the order of the checks (generation and filter before TTL
// validity).
func TestTTLAndGeneration(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		cp := startCapture(t, tg)
		c := cp.client(t)
		ttl := func(s uint32) *as.WritePolicy { return writePolicy(func(p *as.WritePolicy) { p.Expiration = s }) }
		k := tg.key(t, "ttl", "k")
		r, err := c.Operate(ttl(as.TTLDontUpdate), k, as.PutOp(as.NewBin("x", 1)))
		mustOK(t, "create with ttl -2", err)
		if r.Generation != 1 || r.Expiration != as.TTLDontExpire {
			t.Fatalf("create with -2: gen %d exp %d", r.Generation, r.Expiration)
		}
		r, err = c.Operate(ttl(60), k, as.AddOp(as.NewBin("x", 1)))
		mustOK(t, "ttl 60", err)
		if r.Generation != 2 || r.Expiration < 58 || r.Expiration > 60 {
			t.Fatalf("ttl 60: gen %d exp %d", r.Generation, r.Expiration)
		}
		voidTime := lastReply(t, cp).hdr.ttl
		r, err = c.Operate(ttl(as.TTLDontUpdate), k, as.AddOp(as.NewBin("x", 1)))
		mustOK(t, "ttl -2", err)
		if m := lastReply(t, cp); m.hdr.ttl != voidTime || m.hdr.generation != 3 {
			t.Fatalf("ttl -2 moved the void-time %d -> %d (gen %d)", voidTime, m.hdr.ttl, m.hdr.generation)
		}
		mustOK(t, "touch -2", c.Touch(ttl(as.TTLDontUpdate), k))
		if m := lastReply(t, cp); m.hdr.ttl != voidTime || m.hdr.generation != 4 {
			t.Fatalf("touch -2: void %d gen %d", m.hdr.ttl, m.hdr.generation)
		}
		mustOK(t, "touch 50", c.Touch(ttl(50), k))
		if hdr, _ := c.GetHeader(nil, k); hdr.Generation != 5 || hdr.Expiration < 48 || hdr.Expiration > 50 {
			t.Fatalf("touch 50: %+v", hdr)
		}
		r, err = c.Operate(ttl(as.TTLDontExpire), k, as.TouchOp(), as.GetOp())
		mustOK(t, "touch -1 and get", err)
		if r.Expiration != as.TTLDontExpire || r.Bins["x"] != 3 || r.Generation != 6 {
			t.Fatalf("touch -1 and get: %+v", r)
		}
		r, err = c.Operate(ttl(0), k, as.AddOp(as.NewBin("x", 1)), as.GetHeaderOp())
		mustOK(t, "add and header", err)
		if len(r.Bins) != 0 || r.Generation != 7 {
			t.Fatalf("add and header: %+v", r)
		}
		wantRC(t, "touch a missing record", c.Touch(ttl(10), tg.key(t, "ttl", "missing")), types.KEY_NOT_FOUND_ERROR)

		tooBig := uint32(20 * 365 * 86400)
		p := writePolicy(func(p *as.WritePolicy) {
			p.Expiration = tooBig
			p.FilterExpression = as.ExpEq(as.ExpIntBin("x"), as.ExpIntVal(99))
		})
		wantRC(t, "bad ttl, failing filter", c.Put(p, k, as.BinMap{"a": 1}), types.FILTERED_OUT)
		p = writePolicy(func(p *as.WritePolicy) {
			p.Expiration = tooBig
			p.GenerationPolicy = as.EXPECT_GEN_EQUAL
			p.Generation = 99
		})
		wantRC(t, "bad ttl, wrong generation", c.Put(p, k, as.BinMap{"a": 1}), types.GENERATION_ERROR)
		if m := lastReply(t, cp); m.hdr.generation != 7 {
			t.Fatalf("generation error reply gen %d", m.hdr.generation)
		}
		wantRC(t, "bad ttl", c.Put(ttl(tooBig), k, as.BinMap{"a": 1}), types.PARAMETER_ERROR)
		co := writePolicy(func(p *as.WritePolicy) { p.RecordExistsAction = as.CREATE_ONLY })
		wantRC(t, "create-only on an existing record", c.Put(co, k, as.BinMap{"a": 1}), types.KEY_EXISTS_ERROR)
		if m := lastReply(t, cp); m.hdr.generation != 7 {
			t.Fatalf("key exists reply gen %d", m.hdr.generation)
		}
	})
}

// TestBatchReadsOfMissingRecords: batch reads answer each missing record
// with KEY_NOT_FOUND (nil records), and a batch-level filter marks rows it
// filters out with FILTERED_OUT (the v8 client overstates the batch field
// size after a filter field; the server reads the batch anyway).
func TestBatchReadsOfMissingRecords(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		a, b := tg.key(t, "batch", "a"), tg.key(t, "batch", "b")
		miss := tg.key(t, "batch", "missing")
		mustOK(t, "put a", c.Put(writePolicy(nil), a, as.BinMap{"x": 1, "m": map[any]any{"k": 1}}))
		mustOK(t, "put b", c.Put(writePolicy(nil), b, as.BinMap{"x": 2}))
		keys := []*as.Key{a, miss, b}
		recs, err := c.BatchGet(nil, keys)
		mustOK(t, "batch get", err)
		if recs[0] == nil || recs[1] != nil || recs[2] == nil {
			t.Fatalf("batch get %v", recs)
		}
		recs, err = c.BatchGetOperate(nil, keys, as.MapGetByKeyOp("m", "k", as.MapReturnType.VALUE))
		mustOK(t, "batch get operate", err)
		if recs[0] == nil || recs[0].Bins["m"] != 1 || recs[1] != nil || recs[2] == nil || len(recs[2].Bins) != 0 {
			t.Fatalf("batch get operate %v", recs)
		}
		bp := as.NewBatchPolicy()
		bp.FilterExpression = as.ExpEq(as.ExpIntBin("x"), as.ExpIntVal(1))
		rows := []as.BatchRecordIfc{as.NewBatchRead(nil, a, nil), as.NewBatchRead(nil, miss, nil), as.NewBatchRead(nil, b, nil)}
		mustOK(t, "filtered batch", c.BatchOperate(bp, rows))
		want := []types.ResultCode{types.OK, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT}
		for i, r := range rows {
			if got := r.BatchRec().ResultCode; got != want[i] {
				t.Fatalf("filtered batch row %d: %v, want %v", i, got, want[i])
			}
		}
		rows = []as.BatchRecordIfc{
			as.NewBatchWrite(nil, miss, as.MapRemoveByKeyOp("m", "k", as.MapReturnType.NONE)),
			as.NewBatchDelete(nil, miss),
			as.NewBatchReadOps(nil, a, as.GetBinOp("x"), as.GetOp()),
		}
		mustOK(t, "batch operate", c.BatchOperate(nil, rows))
		if rc0, rc1 := rows[0].BatchRec().ResultCode, rows[1].BatchRec().ResultCode; rc0 != types.KEY_NOT_FOUND_ERROR || rc1 != types.KEY_NOT_FOUND_ERROR {
			t.Fatalf("batch rows on a missing record: %v %v", rc0, rc1)
		}
		if r := rows[2].BatchRec(); r.ResultCode != types.OK || !reflect.DeepEqual(r.Record.Bins, as.BinMap{"x": 1, "m": map[any]any{"k": 1}}) {
			t.Fatalf("batch read with read-all %+v", r.Record)
		}
		ex, err := c.BatchExists(nil, keys)
		if err != nil || !reflect.DeepEqual(ex, []bool{true, false, true}) {
			t.Fatalf("batch exists %v %v", ex, err)
		}
	})
}

// TestSetNameAndKeyChecks: a command naming another set than the record's
// is PARAMETER_ERROR; a sent key that differs from the stored one is
// KEY_MISMATCH (19).
func TestSetNameAndKeyChecks(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		k := tg.key(t, "setA", "k")
		sendKey := writePolicy(func(p *as.WritePolicy) { p.SendKey = true })
		mustOK(t, "put", c.Put(sendKey, k, as.BinMap{"x": 1}))
		other, err := as.NewKeyWithDigest("test", "setB", k.Value().GetObject(), k.Digest())
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Get(nil, other)
		wantRC(t, "get from another set", err, types.PARAMETER_ERROR)
		wantRC(t, "put into another set", c.Put(writePolicy(nil), other, as.BinMap{"x": 2}), types.PARAMETER_ERROR)
		_, err = c.Delete(writePolicy(nil), other)
		wantRC(t, "delete from another set", err, types.PARAMETER_ERROR)
		forged, err := as.NewKeyWithDigest("test", "setA", tg.run+"/other", k.Digest())
		if err != nil {
			t.Fatal(err)
		}
		wantRC(t, "put with another key", c.Put(sendKey, forged, as.BinMap{"x": 2}), types.KEY_MISMATCH)
		_, err = c.Delete(sendKey, forged)
		wantRC(t, "delete with another key", err, types.KEY_MISMATCH)
		r, err := c.Get(nil, k)
		mustOK(t, "get", err)
		if r.Bins["x"] != 1 || r.Generation != 1 {
			t.Fatalf("refused commands changed the record: %+v", r)
		}
		if !bytes.Equal(k.Digest(), forged.Digest()) {
			t.Fatal("forged key has another digest")
		}
	})
}
