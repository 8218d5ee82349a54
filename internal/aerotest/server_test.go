package aerotest

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"
)

// TestClientCalls runs a table of real client calls, in order, against
// aerotest and against the real server, checking result codes and returned
// data.
func TestClientCalls(t *testing.T) {
	forEachTarget(t, testClientCalls)
}

func testClientCalls(t *testing.T, tg *target) {
	c := tg.client(t)

	const set = "D_LTCH#t"
	k1 := tg.key(t, set, "D_LTCH#c#l1")
	k2 := tg.key(t, set, "D_LTCH#c#l2")
	missing := tg.key(t, set, "D_LTCH#c#missing")
	lock := tg.key(t, "DC#dc1#locks", "c#lock1")
	createOnly := writePolicy(func(p *as.WritePolicy) { p.RecordExistsAction = as.CREATE_ONLY; p.Expiration = 60 })
	updateOnly := writePolicy(func(p *as.WritePolicy) { p.RecordExistsAction = as.UPDATE_ONLY; p.Expiration = 60 })
	plain := writePolicy(nil)
	var lockGen uint32

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"put create-only", func(t *testing.T) {
			wantRC(t, "put", c.Put(createOnly, k1, as.BinMap{"count#dc1": 3}), types.OK)
		}},
		{"put create-only again -> KEY_EXISTS", func(t *testing.T) {
			wantRC(t, "put", c.Put(createOnly, k1, as.BinMap{"count#dc1": 3}), types.KEY_EXISTS_ERROR)
		}},
		{"get after put", func(t *testing.T) {
			r, err := c.Get(nil, k1)
			wantRC(t, "get", err, types.OK)
			if r.Bins["count#dc1"] != 3 || r.Generation != 1 {
				t.Fatalf("got %v gen %d", r.Bins, r.Generation)
			}
			if r.Expiration < 55 || r.Expiration > 60 {
				t.Fatalf("expiration %d, want ~60", r.Expiration)
			}
		}},
		{"operate update-only add + get", func(t *testing.T) {
			r, err := c.Operate(updateOnly, k1, as.AddOp(as.NewBin("count#dc1", -1)), as.GetOp())
			wantRC(t, "operate", err, types.OK)
			if r.Bins["count#dc1"] != 2 || r.Generation != 2 {
				t.Fatalf("got %v gen %d", r.Bins, r.Generation)
			}
		}},
		{"add with ttl 0 clears ttl", func(t *testing.T) {
			r, err := c.Operate(plain, k1, as.AddOp(as.NewBin("count#dc2", -1)))
			wantRC(t, "operate", err, types.OK)
			if r.Generation != 3 || r.Expiration != as.TTLDontExpire {
				t.Fatalf("gen %d exp %d", r.Generation, r.Expiration)
			}
		}},
		{"get one bin", func(t *testing.T) {
			r, err := c.Get(nil, k1, "count#dc1")
			wantRC(t, "get", err, types.OK)
			if !reflect.DeepEqual(r.Bins, as.BinMap{"count#dc1": 2}) {
				t.Fatalf("bins %v", r.Bins)
			}
		}},
		{"header and exists", func(t *testing.T) {
			r, err := c.GetHeader(nil, k1)
			wantRC(t, "header", err, types.OK)
			if r.Generation != 3 || len(r.Bins) != 0 {
				t.Fatalf("header %+v", r)
			}
			ok, err := c.Exists(nil, k1)
			if err != nil || !ok {
				t.Fatalf("exists %v %v", ok, err)
			}
			ok, err = c.Exists(nil, missing)
			if err != nil || ok {
				t.Fatalf("exists(missing) %v %v", ok, err)
			}
			_, err = c.Get(nil, missing)
			wantRC(t, "get missing", err, types.KEY_NOT_FOUND_ERROR)
		}},
		{"update-only on missing -> KEY_NOT_FOUND", func(t *testing.T) {
			_, err := c.Operate(updateOnly, missing, as.AddOp(as.NewBin("count#dc1", -1)))
			wantRC(t, "operate", err, types.KEY_NOT_FOUND_ERROR)
			wantRC(t, "put", c.Put(updateOnly, missing, as.BinMap{"a": 1}), types.KEY_NOT_FOUND_ERROR)
			p := writePolicy(func(p *as.WritePolicy) { p.RecordExistsAction = as.REPLACE_ONLY })
			wantRC(t, "put replace-only", c.Put(p, missing, as.BinMap{"a": 1}), types.KEY_NOT_FOUND_ERROR)
		}},
		{"add on string bin -> BIN_TYPE_ERROR", func(t *testing.T) {
			wantRC(t, "put", c.Put(plain, k2, as.BinMap{"count#dc1": 7, "s": "x"}), types.OK)
			_, err := c.Operate(plain, k2, as.AddOp(as.NewBin("s", 1)))
			wantRC(t, "add", err, types.BIN_TYPE_ERROR)
			wantRC(t, "add", c.AddBins(plain, k2, as.NewBin("s", 1)), types.BIN_TYPE_ERROR)
			r, _ := c.Get(nil, k2)
			if r.Generation != 1 || r.Bins["s"] != "x" {
				t.Fatalf("failed add changed the record: %+v", r)
			}
		}},
		{"generation check", func(t *testing.T) {
			p := writePolicy(func(p *as.WritePolicy) {
				p.GenerationPolicy = as.EXPECT_GEN_EQUAL
				p.Generation = 0
				p.Expiration = 30
			})
			bins := as.BinMap{"dc1##data": 1, "dc1##uat": 1795257589843}
			wantRC(t, "gen 0 on missing", c.Put(p, lock, bins), types.OK)
			wantRC(t, "gen 0 again", c.Put(p, lock, bins), types.GENERATION_ERROR)
			p.Generation = 1
			wantRC(t, "gen 1", c.Put(p, lock, bins), types.OK)
			p.GenerationPolicy = as.EXPECT_GEN_GT
			p.Generation = 2
			wantRC(t, "gen gt 2 (record 2)", c.Put(p, lock, bins), types.GENERATION_ERROR)
			p.Generation = 5
			wantRC(t, "gen gt 5 (record 2)", c.Put(p, lock, bins), types.OK)
			r, err := c.GetHeader(nil, lock)
			wantRC(t, "header", err, types.OK)
			lockGen = r.Generation
			if lockGen != 3 {
				t.Fatalf("gen %d", lockGen)
			}
		}},
		{"delete with generation", func(t *testing.T) {
			p := writePolicy(func(p *as.WritePolicy) { p.GenerationPolicy = as.EXPECT_GEN_EQUAL; p.Generation = lockGen + 1 })
			_, err := c.Delete(p, lock)
			wantRC(t, "delete wrong gen", err, types.GENERATION_ERROR)
			p.Generation = lockGen
			existed, err := c.Delete(p, lock)
			if err != nil || !existed {
				t.Fatalf("delete: %v %v", existed, err)
			}
			existed, err = c.Delete(plain, lock)
			if err != nil || existed {
				t.Fatalf("delete again: %v %v", existed, err)
			}
		}},
		{"batch get with missing keys", func(t *testing.T) {
			keys := []*as.Key{k1, missing, k2}
			recs, err := c.BatchGet(nil, keys)
			wantRC(t, "batch", err, types.OK)
			if recs[0] == nil || recs[0].Bins["count#dc1"] != 2 || recs[0].Generation != 3 {
				t.Fatalf("rec0 %+v", recs[0])
			}
			if recs[1] != nil {
				t.Fatalf("rec1 %+v", recs[1])
			}
			if recs[2] == nil || recs[2].Bins["s"] != "x" {
				t.Fatalf("rec2 %+v", recs[2])
			}
			recs, err = c.BatchGet(nil, keys, "count#dc1")
			wantRC(t, "batch bins", err, types.OK)
			if !reflect.DeepEqual(recs[2].Bins, as.BinMap{"count#dc1": 7}) {
				t.Fatalf("rec2 %+v", recs[2].Bins)
			}
			ex, err := c.BatchExists(nil, keys)
			if err != nil || !reflect.DeepEqual(ex, []bool{true, false, true}) {
				t.Fatalf("exists %v %v", ex, err)
			}
			hdr, err := c.BatchGetHeader(nil, keys)
			if err != nil || hdr[0].Generation != 3 || hdr[1] != nil || len(hdr[0].Bins) != 0 {
				t.Fatalf("headers %v %v", hdr, err)
			}
			recs, err = c.BatchGetOperate(nil, keys, as.GetBinOp("s"))
			wantRC(t, "batch operate", err, types.OK)
			if recs[2].Bins["s"] != "x" || recs[1] != nil {
				t.Fatalf("batch operate %v", recs)
			}
		}},
		{"batch read with per-record results", func(t *testing.T) {
			brs := []as.BatchRecordIfc{
				as.NewBatchRead(nil, k1, []string{"count#dc2"}),
				as.NewBatchRead(nil, missing, nil),
				as.NewBatchReadHeader(nil, k2),
			}
			wantRC(t, "batch operate", c.BatchOperate(nil, brs), types.OK)
			if r := brs[0].BatchRec(); r.ResultCode != types.OK || r.Record.Bins["count#dc2"] != -1 {
				t.Fatalf("row0 %+v", r)
			}
			if r := brs[1].BatchRec(); r.ResultCode != types.KEY_NOT_FOUND_ERROR || r.Record != nil {
				t.Fatalf("row1 %+v", r)
			}
			if r := brs[2].BatchRec(); r.ResultCode != types.OK || r.Record.Generation != 1 {
				t.Fatalf("row2 %+v", r)
			}
		}},
		{"map put create-only, no-fail, size and trim", func(t *testing.T) {
			co := as.NewMapPolicyWithFlags(as.MapOrder.UNORDERED, as.MapWriteFlagsCreateOnly)
			r, err := c.Operate(plain, k1, as.MapPutOp(co, "ops", "op1", 1), as.AddOp(as.NewBin("count#dc1", -1)))
			wantRC(t, "map put", err, types.OK)
			if r.Bins["ops"] != 1 {
				t.Fatalf("map put result %v", r.Bins)
			}
			_, err = c.Operate(plain, k1, as.MapPutOp(co, "ops", "op1", 1), as.AddOp(as.NewBin("count#dc1", -1)))
			wantRC(t, "map put dup", err, types.FAIL_ELEMENT_EXISTS)
			r, _ = c.Get(nil, k1, "count#dc1")
			if r.Bins["count#dc1"] != 1 {
				t.Fatalf("failed operate was not atomic: %v", r.Bins)
			}
			nf := as.NewMapPolicyWithFlags(as.MapOrder.UNORDERED, as.MapWriteFlagsCreateOnly|as.MapWriteFlagsNoFail)
			r, err = c.Operate(plain, k1, as.MapPutOp(nf, "ops", "op1", 1), as.AddOp(as.NewBin("count#dc1", -1)))
			wantRC(t, "map put no-fail", err, types.OK)
			if r.Bins["ops"] != 1 {
				t.Fatalf("no-fail result %v", r.Bins)
			}
			r, err = c.Operate(plain, k1, as.MapPutOp(co, "ops", "op2", 2), as.MapPutOp(co, "ops", "op3", 3))
			wantRC(t, "two puts", err, types.OK)
			if !reflect.DeepEqual(r.Bins["ops"], as.OpResults{2, 3}) {
				t.Fatalf("two puts %#v", r.Bins["ops"])
			}
			// put_items with create-only|no-fail: one duplicate blocks all unless PARTIAL.
			items := map[any]any{"op3": 9, "op4": 4}
			r, err = c.Operate(plain, k1, as.MapPutItemsOp(nf, "ops", items))
			wantRC(t, "put items no-fail", err, types.OK)
			if r.Bins["ops"] != 3 {
				t.Fatalf("put items no-fail size %v", r.Bins["ops"])
			}
			partial := as.NewMapPolicyWithFlags(as.MapOrder.UNORDERED, as.MapWriteFlagsCreateOnly|as.MapWriteFlagsNoFail|as.MapWriteFlagsPartial)
			r, err = c.Operate(plain, k1, as.MapPutItemsOp(partial, "ops", items))
			wantRC(t, "put items partial", err, types.OK)
			if r.Bins["ops"] != 4 {
				t.Fatalf("put items partial size %v", r.Bins["ops"])
			}
			r, err = c.Operate(plain, k1,
				as.MapSizeOp("ops"),
				as.MapRemoveByIndexRangeCountOp("ops", 0, 2, as.MapReturnType.KEY),
				as.MapSizeOp("ops"),
				as.MapGetByKeyOp("ops", "op3", as.MapReturnType.VALUE))
			wantRC(t, "trim", err, types.OK)
			if !reflect.DeepEqual(r.Bins["ops"], as.OpResults{4, []any{"op1", "op2"}, 2, 3}) {
				t.Fatalf("trim %#v", r.Bins["ops"])
			}
			r, _ = c.Get(nil, k1, "ops")
			if !reflect.DeepEqual(r.Bins["ops"], map[any]any{"op3": 3, "op4": 4}) {
				t.Fatalf("map after trim %#v", r.Bins["ops"])
			}
			// Keep only the highest-ranked element.
			r, err = c.Operate(plain, k1, as.MapRemoveByRankRangeCountOp("ops", 0, 1, as.MapReturnType.COUNT),
				as.MapGetByIndexRangeOp("ops", 0, as.MapReturnType.KEY_VALUE))
			wantRC(t, "rank trim", err, types.OK)
			// KEY_VALUE results come back as an ordered list of pairs, even
			// from an unordered map.
			if !reflect.DeepEqual(r.Bins["ops"], as.OpResults{1, []as.MapPair{{Key: "op4", Value: 4}}}) {
				t.Fatalf("rank trim %#v", r.Bins["ops"])
			}
			_, err = c.Operate(plain, k1, as.MapRemoveByKeyOp("ops", "op4", as.MapReturnType.NONE))
			wantRC(t, "remove by key", err, types.OK)
			_, err = c.Operate(plain, k1, as.MapPutOp(as.DefaultMapPolicy(), "count#dc1", "x", 1))
			wantRC(t, "map op on int bin", err, types.BIN_TYPE_ERROR)
		}},
		{"key-ordered map", func(t *testing.T) {
			ko := as.NewMapPolicy(as.MapOrder.KEY_ORDERED, as.MapWriteMode.UPDATE)
			k := tg.key(t, set, "ordered")
			_, err := c.Operate(plain, k, as.MapPutItemsOp(ko, "m", map[any]any{"c": 3, "a": 1, "b": 2}))
			wantRC(t, "put items", err, types.OK)
			r, err := c.Get(nil, k)
			wantRC(t, "get", err, types.OK)
			want := []as.MapPair{{Key: "a", Value: 1}, {Key: "b", Value: 2}, {Key: "c", Value: 3}}
			if !reflect.DeepEqual(r.Bins["m"], want) {
				t.Fatalf("ordered map %#v", r.Bins["m"])
			}
			r, err = c.Operate(plain, k, as.MapGetByIndexRangeCountOp("m", -2, 2, as.MapReturnType.KEY))
			wantRC(t, "get by index", err, types.OK)
			if !reflect.DeepEqual(r.Bins["m"], []any{"b", "c"}) {
				t.Fatalf("by index %#v", r.Bins["m"])
			}
		}},
		{"filter expressions", func(t *testing.T) {
			no := writePolicy(func(p *as.WritePolicy) {
				p.FilterExpression = as.ExpEq(as.ExpIntBin("count#dc1"), as.ExpIntVal(999))
			})
			wantRC(t, "put filtered", c.Put(no, k1, as.BinMap{"flt": 1}), types.FILTERED_OUT)
			_, err := c.Operate(no, k1, as.AddOp(as.NewBin("count#dc1", -1)), as.GetOp())
			wantRC(t, "operate filtered", err, types.FILTERED_OUT)
			rp := as.NewPolicy()
			rp.FilterExpression = no.FilterExpression
			_, err = c.Get(rp, k1)
			wantRC(t, "get filtered", err, types.FILTERED_OUT)
			_, err = c.Get(rp, missing)
			wantRC(t, "get filtered missing", err, types.KEY_NOT_FOUND_ERROR)
			yes := writePolicy(func(p *as.WritePolicy) {
				p.FilterExpression = as.ExpAnd(
					as.ExpEq(as.ExpIntBin("count#dc1"), as.ExpIntVal(0)),
					as.ExpBinExists("ops"),
					as.ExpNot(as.ExpBinExists("nope")),
					as.ExpOr(as.ExpLessEq(as.ExpIntBin("count#dc2"), as.ExpIntVal(-1)), as.ExpGreater(as.ExpIntBin("count#dc1"), as.ExpIntVal(100))),
				)
			})
			wantRC(t, "put matching", c.Put(yes, k1, as.BinMap{"flt": 2}), types.OK)
			sp := writePolicy(func(p *as.WritePolicy) {
				p.FilterExpression = as.ExpEq(as.ExpStringBin("s"), as.ExpStringVal("x"))
			})
			wantRC(t, "string filter", c.Put(sp, k2, as.BinMap{"flt": 1}), types.OK)
			sp.FilterExpression = as.ExpNotEq(as.ExpStringBin("s"), as.ExpStringVal("x"))
			wantRC(t, "string filter ne", c.Put(sp, k2, as.BinMap{"flt": 1}), types.FILTERED_OUT)
			sp.FilterExpression = as.ExpKeyExists()
			wantRC(t, "key_exists (no key stored)", c.Put(sp, k2, as.BinMap{"flt": 1}), types.FILTERED_OUT)
			// A bin of another type makes the comparison unknown: filtered out.
			sp.FilterExpression = as.ExpEq(as.ExpIntBin("s"), as.ExpIntVal(1))
			wantRC(t, "type mismatch", c.Put(sp, k2, as.BinMap{"flt": 1}), types.FILTERED_OUT)
			sp.FilterExpression = as.ExpGreater(as.ExpLastUpdate(), as.ExpIntVal(0))
			wantRC(t, "last update", c.Put(sp, k2, as.BinMap{"flt": 1}), types.OK)
			sp.FilterExpression = as.ExpEq(as.ExpTTL(), as.ExpIntVal(-1))
			wantRC(t, "ttl never", c.Put(sp, k2, as.BinMap{"flt": 1}), types.OK)
			if !tg.real() {
				// Expressions aerotest does not model are rejected, not ignored.
				sp.FilterExpression = as.ExpRegexCompare("x.*", as.ExpRegexFlagNONE, as.ExpStringBin("s"))
				wantRC(t, "regex", c.Put(sp, k2, as.BinMap{"flt": 1}), types.UNSUPPORTED_FEATURE)
			}
		}},
		{"send key and types", func(t *testing.T) {
			p := writePolicy(func(p *as.WritePolicy) { p.SendKey = true })
			k42 := tg.key(t, set, 42)
			bins := as.BinMap{"i": 1.5, "b": true, "blob": []byte{1, 2, 3}, "l": []any{1, "a"}, "m": map[any]any{"x": 1}}
			wantRC(t, "put", c.Put(p, k42, bins), types.OK)
			r, err := c.Get(nil, k42)
			wantRC(t, "get", err, types.OK)
			if !reflect.DeepEqual(r.Bins, bins) {
				t.Fatalf("bins %#v", r.Bins)
			}
			kp := writePolicy(func(p *as.WritePolicy) {
				p.FilterExpression = as.ExpAnd(as.ExpKeyExists(), as.ExpEq(as.ExpKey(as.ExpTypeINT), as.ExpIntVal(k42.Value().GetObject().(int64))))
			})
			wantRC(t, "key filter", c.Put(kp, k42, as.BinMap{"z": 1}), types.OK)
		}},
		{"touch and ttl handling", func(t *testing.T) {
			wantRC(t, "touch", c.Touch(writePolicy(func(p *as.WritePolicy) { p.Expiration = 120 }), k1), types.OK)
			r, _ := c.GetHeader(nil, k1)
			if r.Expiration < 115 || r.Expiration > 120 {
				t.Fatalf("expiration after touch %d", r.Expiration)
			}
			wantRC(t, "put -2", c.Put(writePolicy(func(p *as.WritePolicy) { p.Expiration = as.TTLDontUpdate }), k1, as.BinMap{"ttlv": 0}), types.OK)
			r, _ = c.GetHeader(nil, k1)
			if r.Expiration < 115 || r.Expiration > 120 {
				t.Fatalf("expiration after don't-update %d", r.Expiration)
			}
			wantRC(t, "put -1", c.Put(writePolicy(func(p *as.WritePolicy) { p.Expiration = as.TTLDontExpire }), k1, as.BinMap{"ttlv": 1}), types.OK)
			r, _ = c.GetHeader(nil, k1)
			if r.Expiration != as.TTLDontExpire {
				t.Fatalf("expiration after never %d", r.Expiration)
			}
			wantRC(t, "touch missing", c.Touch(plain, missing), types.KEY_NOT_FOUND_ERROR)
			wantRC(t, "ttl too big", c.Put(writePolicy(func(p *as.WritePolicy) { p.Expiration = 20 * 365 * 86400 }), k1, as.BinMap{"a": 1}), types.PARAMETER_ERROR)
		}},
		{"names too long", func(t *testing.T) {
			wantRC(t, "bin name", c.Put(plain, k1, as.BinMap{"sixteen-chars-xx": 1}), types.BIN_NAME_TOO_LONG)
			long := tg.key(t, strings.Repeat("s", 64), "k")
			wantRC(t, "set name", c.Put(plain, long, as.BinMap{"a": 1}), types.PARAMETER_ERROR)
			ok := tg.key(t, strings.Repeat("s", 63), "k")
			wantRC(t, "set name 63", c.Put(plain, ok, as.BinMap{"fifteen-chars-x": 1}), types.OK)
		}},
		{"replace drops other bins", func(t *testing.T) {
			p := writePolicy(func(p *as.WritePolicy) { p.RecordExistsAction = as.REPLACE })
			wantRC(t, "replace", c.Put(p, k2, as.BinMap{"only": 1}), types.OK)
			r, _ := c.Get(nil, k2)
			if !reflect.DeepEqual(r.Bins, as.BinMap{"only": 1}) {
				t.Fatalf("after replace %v", r.Bins)
			}
		}},
	}
	for _, st := range steps {
		if !t.Run(st.name, st.run) {
			return
		}
	}
}

// TestTTLExpiry checks on both targets that a record with a TTL of 1 s is
// gone 2.5 s later and can be created again (generation 1).
func TestTTLExpiry(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		k := tg.key(t, "ttl", "short")
		p := writePolicy(func(p *as.WritePolicy) { p.Expiration = 1; p.RecordExistsAction = as.CREATE_ONLY })
		wantRC(t, "put", c.Put(p, k, as.BinMap{"v": 1}), types.OK)
		wantRC(t, "put again", c.Put(p, k, as.BinMap{"v": 1}), types.KEY_EXISTS_ERROR)
		time.Sleep(2500 * time.Millisecond)
		_, err := c.Get(nil, k)
		wantRC(t, "get after expiry", err, types.KEY_NOT_FOUND_ERROR)
		ok, err := c.Exists(nil, k)
		if ok || err != nil {
			t.Fatalf("exists after expiry: %v %v", ok, err)
		}
		wantRC(t, "create after expiry", c.Put(p, k, as.BinMap{"v": 2}), types.OK)
		r, err := c.Get(nil, k)
		wantRC(t, "get", err, types.OK)
		if r.Generation != 1 || r.Bins["v"] != 2 {
			t.Fatalf("recreated record %+v", r)
		}
	})
}

// TestTTLExpiryFakeClock checks aerotest's injectable clock and DefaultTTL.
func TestTTLExpiryFakeClock(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	srv := startServer(t, Options{Now: clock.Now})
	c := newClient(t, srv)
	k := key(t, "ttl", "short")
	p := writePolicy(func(p *as.WritePolicy) { p.Expiration = 10; p.RecordExistsAction = as.CREATE_ONLY })
	wantRC(t, "put", c.Put(p, k, as.BinMap{"v": 1}), types.OK)
	wantRC(t, "put again", c.Put(p, k, as.BinMap{"v": 1}), types.KEY_EXISTS_ERROR)
	clock.Advance(9 * time.Second)
	if _, err := c.Get(nil, k); err != nil {
		t.Fatalf("expired too early: %v", err)
	}
	clock.Advance(2 * time.Second)
	_, err := c.Get(nil, k)
	wantRC(t, "get after expiry", err, types.KEY_NOT_FOUND_ERROR)
	ok, err := c.Exists(nil, k)
	if ok || err != nil {
		t.Fatalf("exists after expiry: %v %v", ok, err)
	}
	wantRC(t, "create after expiry", c.Put(p, k, as.BinMap{"v": 2}), types.OK)
	r, err := c.Get(nil, k)
	wantRC(t, "get", err, types.OK)
	if r.Generation != 1 || r.Bins["v"] != 2 {
		t.Fatalf("recreated record %+v", r)
	}

	// Default TTL applies to ttl 0 writes when configured.
	clock2 := &fakeClock{t: time.Now()}
	srv2 := startServer(t, Options{Now: clock2.Now, DefaultTTL: time.Minute})
	c2 := newClient(t, srv2)
	wantRC(t, "put default ttl", c2.Put(writePolicy(nil), k, as.BinMap{"v": 1}), types.OK)
	clock2.Advance(61 * time.Second)
	_, err = c2.Get(nil, k)
	wantRC(t, "get after default ttl", err, types.KEY_NOT_FOUND_ERROR)
}

func TestDropResponseAfterWrite(t *testing.T) {
	srv := startServer(t, Options{})
	c := newClient(t, srv)
	k := key(t, "faults", "k")
	wantRC(t, "put", c.Put(writePolicy(nil), k, as.BinMap{"n": 1}), types.OK)

	srv.DropResponses(1, func(cmd Command) bool {
		return cmd.Kind == KindWrite && cmd.Set == "faults" && cmd.Digest == [20]byte(k.Digest())
	})
	p := writePolicy(func(p *as.WritePolicy) {
		p.TotalTimeout = 300 * time.Millisecond
		p.SocketTimeout = 300 * time.Millisecond
	})
	_, err := c.Operate(p, k, as.AddOp(as.NewBin("n", 10)))
	if err == nil {
		t.Fatal("expected a timeout")
	}
	if !err.IsInDoubt() || !err.Matches(types.TIMEOUT) {
		t.Fatalf("want in-doubt TIMEOUT, got %v", err)
	}
	r, err := c.Get(nil, k)
	wantRC(t, "get", err, types.OK)
	if r.Bins["n"] != 11 || r.Generation != 2 {
		t.Fatalf("write not applied: %+v", r)
	}
	if st := srv.Stats(); st.Dropped != 1 {
		t.Fatalf("dropped %d", st.Dropped)
	}
	// The rule is used up: the next write is answered.
	wantRC(t, "put after drop", c.Put(p, k, as.BinMap{"n": 1}), types.OK)

	// Delay.
	srv.SetDelay(400 * time.Millisecond)
	_, err = c.Get(&as.BasePolicy{TotalTimeout: 100 * time.Millisecond, SocketTimeout: 100 * time.Millisecond}, k)
	if err == nil || !err.Matches(types.TIMEOUT) {
		t.Fatalf("delayed get: want timeout, got %v", err)
	}
	srv.SetDelay(0)
	_, err = c.Get(nil, k)
	wantRC(t, "get after delay", err, types.OK)

	// Closing connections: the client reconnects.
	srv.CloseConnections()
	_, err = c.Get(nil, k)
	if err != nil {
		// The pooled connection may have been dead; one retry suffices.
		_, err = c.Get(nil, k)
	}
	wantRC(t, "get after close connections", err, types.OK)
}

func TestRestartKeepsData(t *testing.T) {
	srv := startServer(t, Options{})
	c := newClient(t, srv)
	k := key(t, "restart", "k")
	wantRC(t, "put", c.Put(writePolicy(nil), k, as.BinMap{"v": "kept"}), types.OK)
	port := srv.Port()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.Port() != port {
		t.Fatalf("port changed %d -> %d", port, srv.Port())
	}
	var r *as.Record
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if r, err = c.Get(nil, k); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantRC(t, "get after restart", err, types.OK)
	if r.Bins["v"] != "kept" {
		t.Fatalf("bins %v", r.Bins)
	}
}

func TestConcurrentAdds(t *testing.T) {
	forEachTarget(t, testConcurrentAdds)
}

func testConcurrentAdds(t *testing.T, tg *target) {
	c := tg.client(t)
	k := tg.key(t, "conc", "counter")
	const workers, perWorker = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			p := writePolicy(nil)
			for i := 0; i < perWorker; i++ {
				if _, err := c.Operate(p, k, as.AddOp(as.NewBin("n", w+1))); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, err := c.Get(nil, k)
	wantRC(t, "get", err, types.OK)
	want := perWorker * workers * (workers + 1) / 2
	if r.Bins["n"] != want || r.Generation != workers*perWorker {
		t.Fatalf("n=%v gen=%d, want n=%d gen=%d", r.Bins["n"], r.Generation, want, workers*perWorker)
	}
	if tg.srv != nil {
		if st := tg.srv.Stats(); st.Writes != workers*perWorker || st.Reads != 1 {
			t.Fatalf("stats %+v", st)
		}
	}
}

func TestTendSteadyState(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for client tends")
	}
	before := len(clientLog.snapshot())
	srv := startServer(t, Options{Namespaces: []string{"test", "other"}})
	c := newClient(t, srv)
	info0 := srv.Stats().Info
	time.Sleep(2500 * time.Millisecond)
	if got := srv.Stats().Info - info0; got < 2 {
		t.Fatalf("only %d info frames in 2.5s: client is not tending", got)
	}
	if lines := containsAny(clientLog.snapshot()[before:], "WARN", "ERR", "rror", "arn"); len(lines) > 0 {
		t.Fatalf("client logged problems: %q", lines)
	}
	nodes := c.GetNodes()
	if len(nodes) != 1 || nodes[0].GetName() != srv.NodeName() {
		t.Fatalf("nodes %v", nodes)
	}
	k, _ := as.NewKey("other", "s", 1)
	wantRC(t, "put other ns", c.Put(writePolicy(nil), k, as.BinMap{"a": 1}), types.OK)
	if srv.RecordCount("other") != 1 || srv.RecordCount("test") != 0 {
		t.Fatal("record not in namespace other")
	}
}

// TestCompression checks that compressed requests are ENTERPRISE_ONLY (25)
// on Community Edition, single and batch, while a request too small for the
// client to compress, and a request asking for a compressed reply, succeed.
func TestCompression(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target) {
		c := tg.client(t)
		p := writePolicy(func(p *as.WritePolicy) { p.UseCompression = true })
		k := tg.key(t, "z", "big")
		big := strings.Repeat("compressible ", 500)
		wantRC(t, "compressed put", c.Put(p, k, as.BinMap{"s": big}), types.ENTERPRISE_ONLY)
		_, err := c.Get(nil, k)
		wantRC(t, "get after refused put", err, types.KEY_NOT_FOUND_ERROR)
		wantRC(t, "small put (sent uncompressed)", c.Put(p, k, as.BinMap{"s": "x"}), types.OK)
		wantRC(t, "plain big put", c.Put(writePolicy(nil), k, as.BinMap{"s": big}), types.OK)
		rp := as.NewPolicy()
		rp.UseCompression = true
		r, err := c.Get(rp, k)
		wantRC(t, "get asking for a compressed reply", err, types.OK)
		if r.Bins["s"] != big {
			t.Fatal("value mismatch")
		}
		bp := as.NewBatchPolicy()
		bp.UseCompression = true
		keys := make([]*as.Key, 40)
		for i := range keys {
			keys[i] = tg.key(t, "z", strings.Repeat("k", 30)+string(rune('a'+i)))
		}
		keys[0] = k
		_, err = c.BatchGet(bp, keys)
		wantRC(t, "compressed batch", err, types.ENTERPRISE_ONLY)
		if tg.srv != nil && tg.srv.Stats().Compressed != 2 {
			t.Fatalf("stats %+v", tg.srv.Stats())
		}
		// The connection stays usable.
		_, err = c.Get(nil, k)
		wantRC(t, "get after", err, types.OK)
	})
}

func TestBatchOperateWritesAndStats(t *testing.T) {
	forEachTarget(t, testBatchOperateWrites)
}

func testBatchOperateWrites(t *testing.T, tg *target) {
	c := tg.client(t)
	ka, kb, kc := tg.key(t, "b", "a"), tg.key(t, "b", "b"), tg.key(t, "b", "c")
	wantRC(t, "put", c.Put(writePolicy(nil), kc, as.BinMap{"n": 1}), types.OK)
	co := as.NewBatchWritePolicy()
	co.RecordExistsAction = as.CREATE_ONLY
	recs := []as.BatchRecordIfc{
		as.NewBatchWrite(nil, ka, as.PutOp(as.NewBin("n", 5)), as.GetBinOp("n")),
		as.NewBatchWrite(co, kc, as.PutOp(as.NewBin("n", 9))),
		as.NewBatchDelete(nil, kb),
		as.NewBatchWrite(nil, kb, as.AddOp(as.NewBin("n", 2)), as.MapPutOp(as.DefaultMapPolicy(), "m", "k", 1)),
	}
	wantRC(t, "batch operate", c.BatchOperate(nil, recs), types.OK)
	// Batch writes always carry RESPOND_ALL_OPS, so the write op answers nil.
	if r := recs[0].BatchRec(); r.ResultCode != types.OK || !reflect.DeepEqual(r.Record.Bins["n"], as.OpResults{nil, 5}) {
		t.Fatalf("row0 %+v", r)
	}
	if r := recs[1].BatchRec(); r.ResultCode != types.KEY_EXISTS_ERROR {
		t.Fatalf("row1 %+v", r)
	}
	if r := recs[2].BatchRec(); r.ResultCode != types.KEY_NOT_FOUND_ERROR {
		t.Fatalf("row2 %+v", r)
	}
	if r := recs[3].BatchRec(); r.ResultCode != types.OK || r.Record.Bins["m"] != 1 {
		t.Fatalf("row3 %+v", r.Record)
	}
	if tg.srv == nil {
		return
	}
	before := tg.srv.Stats()
	for i := 0; i < 3; i++ {
		if _, err := c.BatchGet(nil, []*as.Key{ka, kb, kc}); err != nil {
			t.Fatal(err)
		}
	}
	st := tg.srv.Stats()
	if st.Batches-before.Batches != 3 || st.BatchRecords-before.BatchRecords != 9 || st.Reads != before.Reads {
		t.Fatalf("stats before %+v after %+v", before, st)
	}
}

// logCapture is a slog handler recording messages and attributes.
type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (h *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		sb.WriteString(" " + a.String())
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, sb.String())
	h.mu.Unlock()
	return nil
}
func (h *logCapture) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCapture) WithGroup(string) slog.Handler      { return h }

func (h *logCapture) find(sub string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

func TestUnsupportedIsRejectedAndLogged(t *testing.T) {
	logs := &logCapture{}
	srv := startServer(t, Options{Logger: slog.New(logs)})
	c := newClient(t, srv)
	k := key(t, "u", "k")
	p := writePolicy(nil)
	wantRC(t, "put", c.Put(p, k, as.BinMap{"l": []any{1}, "m": map[any]any{"a": map[any]any{"b": 1}}}), types.OK)

	_, err := c.Operate(p, k, as.ListSortOp("l", as.ListSortFlagsDefault))
	wantRC(t, "list sort", err, types.UNSUPPORTED_FEATURE)
	if !logs.find("cdt list op 13") {
		t.Fatalf("no log for list op: %q", logs.lines)
	}
	_, err = c.Operate(p, k, as.MapPutOp(as.DefaultMapPolicy(), "m", "c", 2, as.CtxMapKey(as.NewValue("a"))))
	wantRC(t, "nested map put", err, types.UNSUPPORTED_FEATURE)
	if !logs.find("context") {
		t.Fatalf("no log for nested op: %q", logs.lines)
	}
	_, err = c.Operate(p, k, as.ExpReadOp("x", as.ExpDigestModulo(3), as.ExpReadFlagDefault))
	wantRC(t, "digest modulo", err, types.UNSUPPORTED_FEATURE)
	_, err = c.Operate(p, k, as.BitSetOp(as.DefaultBitPolicy(), "b", 0, 8, []byte{1}))
	wantRC(t, "bit op", err, types.UNSUPPORTED_FEATURE)
	// Nothing was changed by the rejected commands.
	r, err := c.Get(nil, k)
	wantRC(t, "get", err, types.OK)
	if r.Generation != 1 || !reflect.DeepEqual(r.Bins["l"], []any{1}) {
		t.Fatalf("record changed: %+v", r)
	}
	info, err := c.GetNodes()[0].RequestInfo(as.NewInfoPolicy(), "no-such-command")
	if err != nil || !strings.HasPrefix(info["no-such-command"], "ERROR") {
		t.Fatalf("info: %v %v", info, err)
	}
}

func TestOperateDeleteAndGenerationOnMissing(t *testing.T) {
	forEachTarget(t, testOperateDeleteAndGenerationOnMissing)
}

func testOperateDeleteAndGenerationOnMissing(t *testing.T, tg *target) {
	c := tg.client(t)
	k := tg.key(t, "d", "k")
	p := writePolicy(nil)
	wantRC(t, "put", c.Put(p, k, as.BinMap{"a": 1, "b": 2}), types.OK)
	r, err := c.Operate(p, k, as.DeleteOp(), as.PutOp(as.NewBin("c", 3)))
	wantRC(t, "delete+put", err, types.OK)
	if r.Generation != 2 {
		t.Fatalf("gen %d", r.Generation)
	}
	r, _ = c.Get(nil, k)
	if !reflect.DeepEqual(r.Bins, as.BinMap{"c": 3}) {
		t.Fatalf("bins %v", r.Bins)
	}
	_, err = c.Operate(p, k, as.DeleteOp())
	wantRC(t, "delete op", err, types.OK)
	_, err = c.Get(nil, k)
	wantRC(t, "get deleted", err, types.KEY_NOT_FOUND_ERROR)

	// A missing record has generation 0 for generation checks.
	gp := writePolicy(func(p *as.WritePolicy) { p.GenerationPolicy = as.EXPECT_GEN_EQUAL; p.Generation = 3 })
	wantRC(t, "gen 3 on missing", c.Put(gp, k, as.BinMap{"a": 1}), types.GENERATION_ERROR)
	// Reading with a too-long set name is just a miss; writing is rejected.
	long := tg.key(t, strings.Repeat("x", 64), "k")
	_, err = c.Get(nil, long)
	wantRC(t, "get long set", err, types.KEY_NOT_FOUND_ERROR)
}

func TestMapTrimInverted(t *testing.T) {
	forEachTarget(t, testMapTrimInverted)
}

func testMapTrimInverted(t *testing.T, tg *target) {
	c := tg.client(t)
	k := tg.key(t, "m", "k")
	p := writePolicy(nil)
	items := map[any]any{}
	for i := 0; i < 10; i++ {
		items[fmt.Sprintf("op%02d", i)] = i * 10
	}
	_, err := c.Operate(p, k, as.MapPutItemsOp(as.DefaultMapPolicy(), "ops", items))
	wantRC(t, "put items", err, types.OK)
	// Keep the 3 highest keys: remove everything except index range [-3, +3).
	r, err := c.Operate(p, k,
		as.MapRemoveByIndexRangeCountOp("ops", -3, 3, as.MapReturnType.COUNT|as.MapReturnType.INVERTED),
		as.MapGetByRankRangeOp("ops", 0, as.MapReturnType.VALUE),
		as.MapGetByKeyListOp("ops", []any{"op09", "op00"}, as.MapReturnType.KEY),
		as.MapGetByValueRangeOp("ops", 75, 95, as.MapReturnType.RANK),
		as.MapGetByKeyRelativeIndexRangeCountOp("ops", "op08", -1, 2, as.MapReturnType.KEY),
	)
	wantRC(t, "trim", err, types.OK)
	want := as.OpResults{7, []any{70, 80, 90}, []any{"op09"}, []any{1, 2}, []any{"op07", "op08"}}
	if !reflect.DeepEqual(r.Bins["ops"], want) {
		t.Fatalf("got %#v\nwant %#v", r.Bins["ops"], want)
	}
	r, err = c.Operate(p, k, as.MapIncrementOp(as.DefaultMapPolicy(), "ops", "op09", 5), as.MapSizeOp("ops"))
	wantRC(t, "increment", err, types.OK)
	if !reflect.DeepEqual(r.Bins["ops"], as.OpResults{95, 3}) {
		t.Fatalf("increment %#v", r.Bins["ops"])
	}
}

// TestNsupWindow checks aerotest's nsup model with a fake clock: until the
// nsup pass after its expiry, an expired record is invisible to reads and
// writes but a delete still finds it (with its generation), as on the real
// server; without NsupPeriod it is gone the moment it expires.
func TestNsupWindow(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	srv := startServer(t, Options{Now: clock.Now, NsupPeriod: 10 * time.Second})
	c := newClient(t, srv)
	ttl1 := writePolicy(func(p *as.WritePolicy) { p.Expiration = 1 })
	k := key(t, "nsup", "k")
	wantRC(t, "put", c.Put(ttl1, k, as.BinMap{"v": 1}), types.OK)
	clock.Advance(2 * time.Second) // expired; the next nsup pass is at +10 s
	_, err := c.Get(nil, k)
	wantRC(t, "get expired", err, types.KEY_NOT_FOUND_ERROR)
	if ok, _ := c.Exists(nil, k); ok {
		t.Fatal("expired record exists")
	}
	wrongGen := writePolicy(func(p *as.WritePolicy) { p.GenerationPolicy = as.EXPECT_GEN_EQUAL; p.Generation = 2 })
	_, err = c.Delete(wrongGen, k)
	wantRC(t, "delete expired with the wrong generation", err, types.GENERATION_ERROR)
	existed, err := c.Delete(writePolicy(func(p *as.WritePolicy) { p.GenerationPolicy = as.EXPECT_GEN_EQUAL; p.Generation = 1 }), k)
	if err != nil || !existed {
		t.Fatalf("delete of an expired, unreaped record: %v %v", existed, err)
	}
	// Reaped by the pass after expiry.
	wantRC(t, "put", c.Put(ttl1, k, as.BinMap{"v": 1}), types.OK)
	clock.Advance(10 * time.Second)
	if existed, err := c.Delete(writePolicy(nil), k); err != nil || existed {
		t.Fatalf("delete after the nsup pass: %v %v", existed, err)
	}
	// A write over an expired record creates it afresh.
	wantRC(t, "put", c.Put(ttl1, k, as.BinMap{"v": 1}), types.OK)
	clock.Advance(2 * time.Second)
	wantRC(t, "create over an expired record", c.Put(writePolicy(func(p *as.WritePolicy) { p.RecordExistsAction = as.CREATE_ONLY }), k, as.BinMap{"v": 2}), types.OK)
	if r, _ := c.GetHeader(nil, k); r.Generation != 1 {
		t.Fatalf("generation %d after create over an expired record", r.Generation)
	}

	// Without NsupPeriod the record is gone at expiry.
	clock2 := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	srv2 := startServer(t, Options{Now: clock2.Now})
	c2 := newClient(t, srv2)
	wantRC(t, "put", c2.Put(ttl1, k, as.BinMap{"v": 1}), types.OK)
	clock2.Advance(2 * time.Second)
	if existed, err := c2.Delete(writePolicy(nil), k); err != nil || existed {
		t.Fatalf("delete of an expired record without nsup model: %v %v", existed, err)
	}
}
