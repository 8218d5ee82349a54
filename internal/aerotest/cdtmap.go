package aerotest

import (
	"fmt"
	"sort"
)

// CDT map op codes (server proto.h as_cdt_optype).
const (
	mapSetType               = 64
	mapAdd                   = 65
	mapAddItems              = 66
	mapPut                   = 67
	mapPutItems              = 68
	mapReplace               = 69
	mapReplaceItems          = 70
	mapIncrement             = 73
	mapDecrement             = 74
	mapClear                 = 75
	mapRemoveByKey           = 76
	mapRemoveByIndex         = 77
	mapRemoveByValueSingle   = 78
	mapRemoveByRank          = 79
	mapRemoveKeyList         = 81
	mapRemoveByValue         = 82
	mapRemoveValueList       = 83
	mapRemoveByKeyInterval   = 84
	mapRemoveByIndexRange    = 85
	mapRemoveByValueInterval = 86
	mapRemoveByRankRange     = 87
	mapRemoveByKeyRelIndex   = 88
	mapRemoveByValueRelRank  = 89
	mapSize                  = 96
	mapGetByKey              = 97
	mapGetByIndex            = 98
	mapGetByValueSingle      = 99
	mapGetByRank             = 100
	mapGetByValue            = 102
	mapGetByKeyInterval      = 103
	mapGetByIndexRange       = 104
	mapGetByValueInterval    = 105
	mapGetByRankRange        = 106
	mapGetByKeyList          = 107
	mapGetByValueList        = 108
	mapGetByKeyRelIndex      = 109
	mapGetByValueRelRank     = 110
)

// Map write flags (the "modify" parameter of put and put_items).
const (
	mapFlagCreateOnly = 1 // AS_CDT_MAP_NO_OVERWRITE
	mapFlagUpdateOnly = 2 // AS_CDT_MAP_NO_CREATE
	mapFlagNoFail     = 4
	mapFlagPartial    = 8
)

// Map order flags in the msgpack ext header.
const (
	mapFlagKOrdered      = 1
	mapFlagKVOrdered     = 3
	mapFlagPreserveOrder = 8 // KEY_VALUE results: an ordered list of pairs
)

// Result types (server proto.h result_type_t).
const (
	rtNone         = 0
	rtIndex        = 1
	rtReverseIndex = 2
	rtRank         = 3
	rtReverseRank  = 4
	rtCount        = 5
	rtKey          = 6
	rtValue        = 7
	rtKeyValue     = 8
	rtIndexRange   = 9
	rtRevIndexRng  = 10
	rtRankRange    = 11
	rtRevRankRange = 12
	rtExists       = 13
	rtUnorderedMap = 16
	rtOrderedMap   = 17
	rtInverted     = 0x10000
)

var mapOpNames = map[int]string{
	mapSetType: "set_type", mapAdd: "add", mapAddItems: "add_items", mapPut: "put", mapPutItems: "put_items",
	mapReplace: "replace", mapReplaceItems: "replace_items", mapIncrement: "increment", mapDecrement: "decrement",
	mapClear: "clear", mapRemoveByKey: "remove_by_key", mapRemoveByIndex: "remove_by_index",
	mapRemoveByValueSingle: "remove_by_value", mapRemoveByRank: "remove_by_rank",
	mapRemoveKeyList: "remove_by_key_list", mapRemoveByValue: "remove_all_by_value",
	mapRemoveValueList: "remove_by_value_list", mapRemoveByKeyInterval: "remove_by_key_interval",
	mapRemoveByIndexRange: "remove_by_index_range", mapRemoveByValueInterval: "remove_by_value_interval",
	mapRemoveByRankRange: "remove_by_rank_range", mapRemoveByKeyRelIndex: "remove_by_key_rel_index_range",
	mapRemoveByValueRelRank: "remove_by_value_rel_rank_range", mapSize: "size", mapGetByKey: "get_by_key",
	mapGetByIndex: "get_by_index", mapGetByValueSingle: "get_by_value", mapGetByRank: "get_by_rank",
	mapGetByValue: "get_all_by_value", mapGetByKeyInterval: "get_by_key_interval",
	mapGetByIndexRange: "get_by_index_range", mapGetByValueInterval: "get_by_value_interval",
	mapGetByRankRange: "get_by_rank_range", mapGetByKeyList: "get_by_key_list",
	mapGetByValueList: "get_by_value_list", mapGetByKeyRelIndex: "get_by_key_rel_index_range",
	mapGetByValueRelRank: "get_by_value_rel_rank_range",
}

func isMapModify(code int) bool { return code >= 64 && code < 96 }

// applyCDT applies a CDT op to the bin value cur (nil if the bin is
// missing). It returns the new bin value, the op result (nil when the op
// produces none), and whether the bin changed. Map ops and the list ops in
// cdtlist.go are supported, without context.
func applyCDT(o wireOp, cur any) (newVal, res any, changed bool, err *opError) {
	payload, derr := decodeMsgpack(o.data)
	if derr != nil {
		return nil, nil, false, fail(rcParameter, "cdt: "+derr.Error())
	}
	l, ok := payload.(*listVal)
	if !ok || len(l.items) == 0 {
		return nil, nil, false, fail(rcParameter, "cdt: payload is not an array")
	}
	code, ok := l.items[0].(int64)
	if !ok {
		return nil, nil, false, fail(rcParameter, "cdt: op code is not an integer")
	}
	if code == 0xff {
		return nil, nil, false, unsupported("cdt op with context (nested CDT)")
	}
	args := make([]any, len(l.items)-1)
	for i, a := range l.items[1:] {
		if args[i], derr = normalizeValue(a); derr != nil {
			return nil, nil, false, fail(rcParameter, "cdt: "+derr.Error())
		}
	}
	if code < 64 {
		return applyListOp(int(code), args, cur, o.op == opCDTModify)
	}
	name, known := mapOpNames[int(code)]
	if !known {
		return nil, nil, false, unsupported(fmt.Sprintf("cdt map op %d", code))
	}
	if isMapModify(int(code)) != (o.op == opCDTModify) {
		return nil, nil, false, fail(rcParameter, fmt.Sprintf("cdt map op %s sent as %s", name, opName(o.op)))
	}
	var m *mapVal
	if cur != nil {
		mv, isMap := cur.(*mapVal)
		if !isMap {
			return nil, nil, false, fail(rcBinTypeError, "cdt map op "+name+" on a non-map bin")
		}
		m = mv
	}
	return mapOp(int(code), name, args, m)
}

func argInt(args []any, i int) (int64, bool) {
	if i >= len(args) {
		return 0, false
	}
	v, ok := args[i].(int64)
	return v, ok
}

// argCount reads an optional count parameter; a missing one means "all"
// (the server defaults it to UINT32_MAX).
func argCount(args []any, i int) (uint64, bool) {
	if i >= len(args) {
		return 1<<32 - 1, true
	}
	v, ok := args[i].(int64)
	return uint64(v), ok
}

func mapOrderFlags(attr int64) byte { return byte(attr) & mapFlagKVOrdered }

func mapOp(code int, name string, args []any, m *mapVal) (any, any, bool, *opError) {
	bad := func(why string) (any, any, bool, *opError) {
		return nil, nil, false, fail(rcParameter, "cdt map "+name+": "+why)
	}
	switch code {
	case mapSetType:
		attr, ok := argInt(args, 0)
		if !ok {
			return bad("missing order attribute")
		}
		if attr&^0x13 != 0 { // cdt_check_flags: KV_ORDERED | PERSIST_INDEX
			return nil, nil, false, fail(rcOpNotApplicable, "cdt map set_type: invalid flags")
		}
		nm := &mapVal{}
		if m != nil {
			nm = m.clone()
		}
		nm.flags = mapOrderFlags(attr)
		return nm, nil, true, nil

	case mapAdd, mapPut, mapReplace:
		if len(args) < 2 {
			return bad("missing key/value")
		}
		var attr, flags int64
		if code != mapReplace {
			attr, _ = argInt(args, 2)
		}
		if code == mapPut {
			flags, _ = argInt(args, 3)
		}
		switch code {
		case mapAdd:
			flags = mapFlagCreateOnly
		case mapReplace:
			flags = mapFlagUpdateOnly
		}
		if !isMapKey(args[0]) {
			return bad("invalid key type")
		}
		return mapPutAll(m, []mapPair{{args[0], args[1]}}, attr, flags, false)

	case mapAddItems, mapPutItems, mapReplaceItems:
		if code == mapReplaceItems && m == nil {
			return nil, nil, false, fail(rcElementNotFound, "cdt map replace_items: no map")
		}
		if len(args) < 1 {
			return bad("missing items")
		}
		items, ok := args[0].(*mapVal)
		if !ok {
			return bad("items are not a map")
		}
		var attr, flags int64
		if code != mapReplaceItems {
			attr, _ = argInt(args, 1)
		}
		if code == mapPutItems {
			flags, _ = argInt(args, 2)
		}
		switch code {
		case mapAddItems:
			flags = mapFlagCreateOnly
		case mapReplaceItems:
			flags = mapFlagUpdateOnly
		}
		return mapPutAll(m, items.pairs, attr, flags, true)

	case mapIncrement, mapDecrement:
		if len(args) < 1 {
			return bad("missing key")
		}
		var attr int64
		if len(args) > 2 {
			attr, _ = argInt(args, 2)
		}
		nm := &mapVal{flags: mapOrderFlags(attr)}
		if m != nil {
			nm = m.clone()
		}
		k := args[0]
		var delta, cur any
		if len(args) > 1 {
			delta = args[1]
		}
		if code == mapDecrement {
			delta = negate(delta)
		}
		if i := nm.find(k); i >= 0 {
			cur = nm.pairs[i].v
		}
		nv, err := calcDelta(cur, delta)
		if err != nil {
			return bad(err.Error())
		}
		nm.put(k, nv)
		return nm, nv, true, nil

	case mapClear:
		if m == nil {
			return nil, nil, false, nil
		}
		return &mapVal{flags: m.flags}, nil, true, nil

	case mapSize:
		if m == nil {
			return nil, nil, false, nil
		}
		return nil, int64(len(m.pairs)), false, nil
	}

	// Selection ops: [returnType, args...].
	rt, ok := argInt(args, 0)
	if !ok {
		return bad("missing return type")
	}
	args = args[1:]
	if m == nil {
		// Removes on a missing bin are no-ops; reads never get here.
		return nil, nil, false, nil
	}
	if m.flags == mapFlagKVOrdered {
		// The server keeps a value index for these maps and takes other code
		// paths; aerotest does not model them.
		return nil, nil, false, unsupported("cdt map " + name + " on a key-value ordered map")
	}
	mc := &mapCtx{pairs: m.pairs, kOrdered: m.flags != 0, modify: isMapModify(code)}
	rd := &resultData{typ: rt &^ rtInverted, inverted: rt&rtInverted != 0}
	switch rd.typ {
	case rtNone, rtIndex, rtReverseIndex, rtRank, rtReverseRank, rtCount, rtKey, rtValue, rtKeyValue, rtExists, rtUnorderedMap, rtOrderedMap:
	default:
		return nil, nil, false, unsupported(fmt.Sprintf("cdt map return type %d", rd.typ))
	}
	var err *opError
	switch code {
	case mapGetByKey, mapRemoveByKey:
		if len(args) < 1 {
			return bad("missing key")
		}
		err = mc.byKeyInterval(rd, args[0], nil, true, true)
	case mapGetByKeyInterval, mapRemoveByKeyInterval:
		if len(args) < 1 {
			return bad("missing begin")
		}
		rd.multi = true
		var end any
		if len(args) > 1 {
			end = args[1]
		}
		err = mc.byKeyInterval(rd, args[0], end, false, len(args) > 1)
	case mapGetByIndex, mapRemoveByIndex:
		idx, ok := argInt(args, 0)
		if !ok {
			return bad("missing index")
		}
		err = mc.byIndexRange(rd, idx, 1)
	case mapGetByIndexRange, mapRemoveByIndexRange:
		idx, ok := argInt(args, 0)
		count, ok2 := argCount(args, 1)
		if !ok || !ok2 {
			return bad("bad index/count")
		}
		rd.multi = true
		err = mc.byIndexRange(rd, idx, count)
	case mapGetByValueSingle, mapRemoveByValueSingle, mapGetByValue, mapRemoveByValue:
		if len(args) < 1 {
			return bad("missing value")
		}
		rd.multi = code == mapGetByValue || code == mapRemoveByValue
		err = mc.byValueInterval(rd, args[0], nil, true, true)
	case mapGetByValueInterval, mapRemoveByValueInterval:
		if len(args) < 1 {
			return bad("missing begin")
		}
		rd.multi = true
		var end any
		if len(args) > 1 {
			end = args[1]
		}
		err = mc.byValueInterval(rd, args[0], end, false, len(args) > 1)
	case mapGetByRank, mapRemoveByRank:
		rank, ok := argInt(args, 0)
		if !ok {
			return bad("missing rank")
		}
		err = mc.byRankRange(rd, rank, 1)
	case mapGetByRankRange, mapRemoveByRankRange:
		rank, ok := argInt(args, 0)
		count, ok2 := argCount(args, 1)
		if !ok || !ok2 {
			return bad("bad rank/count")
		}
		rd.multi = true
		err = mc.byRankRange(rd, rank, count)
	case mapGetByKeyList, mapRemoveKeyList:
		items, ok := listArg(args, 0)
		if !ok {
			return bad("keys are not a list")
		}
		rd.multi = true
		err = mc.byKeyList(rd, items)
	case mapGetByValueList, mapRemoveValueList:
		items, ok := listArg(args, 0)
		if !ok {
			return bad("values are not a list")
		}
		rd.multi = true
		err = mc.byValueList(rd, items)
	case mapGetByKeyRelIndex, mapRemoveByKeyRelIndex:
		if len(args) < 2 {
			return bad("missing key/index")
		}
		off, ok := argInt(args, 1)
		count, ok2 := argCount(args, 2)
		if !ok || !ok2 {
			return bad("bad index/count")
		}
		rd.multi = true
		idx, cnt := calcRelIndexCount(off, count, mc.keyLowerBound(args[0]))
		err = mc.byIndexRange(rd, idx, cnt)
	case mapGetByValueRelRank, mapRemoveByValueRelRank:
		if len(args) < 2 {
			return bad("missing value/rank")
		}
		off, ok := argInt(args, 1)
		count, ok2 := argCount(args, 2)
		if !ok || !ok2 {
			return bad("bad rank/count")
		}
		rd.multi = true
		rank, cnt := calcRelIndexCount(off, count, mc.valueLowerBound(args[0]))
		err = mc.byRankRange(rd, rank, cnt)
	default:
		return nil, nil, false, unsupported("cdt map op " + name)
	}
	if err != nil {
		return nil, nil, false, err
	}
	if mc.modify && mc.changed {
		return &mapVal{flags: m.flags, pairs: mc.pairs}, rd.val, true, nil
	}
	return nil, rd.val, false, nil
}

func listArg(args []any, i int) ([]any, bool) {
	if i >= len(args) {
		return nil, false
	}
	l, ok := args[i].(*listVal)
	if !ok {
		return nil, false
	}
	return l.items, true
}

// isMapKey reports whether v may be a map key (the server's map_is_key:
// integers, strings and blobs, floats are not allowed).
func isMapKey(v any) bool {
	switch v.(type) {
	case int64, string, blobVal:
		return true
	}
	return false
}

// mapPutAll implements put/put_items/add/replace with write flags, as the
// server's map_add and map_add_items do.
func mapPutAll(m *mapVal, items []mapPair, attr, flags int64, multi bool) (any, any, bool, *opError) {
	var nm *mapVal
	if m == nil {
		nm = &mapVal{flags: mapOrderFlags(attr)}
	} else {
		nm = m.clone()
	}
	var ok []mapPair
	denied := false
	for _, it := range items {
		exists := nm.find(it.k) >= 0
		if flags&mapFlagCreateOnly != 0 && exists {
			if flags&mapFlagNoFail == 0 {
				return nil, nil, false, fail(rcElementExists, "cdt map: key exists")
			}
			denied = true
			continue
		}
		if flags&mapFlagUpdateOnly != 0 && !exists {
			if flags&mapFlagNoFail == 0 {
				return nil, nil, false, fail(rcElementNotFound, "cdt map: key not found")
			}
			denied = true
			continue
		}
		ok = append(ok, it)
	}
	if denied && multi && flags&mapFlagPartial == 0 {
		ok = nil // NO_FAIL without PARTIAL: nothing is committed
	}
	for _, it := range ok {
		nm.put(it.k, it.v)
	}
	return nm, int64(len(nm.pairs)), true, nil
}

// resultData is the server's cdt_result_data: the requested result type
// and the result built by an op (nil when none).
type resultData struct {
	typ      int64
	inverted bool
	multi    bool
	val      any
}

func (rd *resultData) isReturnMap() bool {
	return rd.typ == rtKeyValue || rd.typ == rtUnorderedMap || rd.typ == rtOrderedMap
}
func (rd *resultData) isOrdered() bool { return rd.typ == rtOrderedMap }
func (rd *resultData) isReturnElements() bool {
	return rd.typ == rtKey || rd.typ == rtValue || rd.isReturnMap()
}
func (rd *resultData) isReturnIndex() bool { return rd.typ == rtIndex || rd.typ == rtReverseIndex }
func (rd *resultData) isReturnRank() bool  { return rd.typ == rtRank || rd.typ == rtReverseRank }
func (rd *resultData) isReturnIndexRange() bool {
	return rd.typ == rtIndexRange || rd.typ == rtRevIndexRng
}
func (rd *resultData) isReturnRankRange() bool {
	return rd.typ == rtRankRange || rd.typ == rtRevRankRange
}
func (rd *resultData) isRev() bool { return rd.typ == rtReverseIndex || rd.typ == rtReverseRank }

// resultMapFlags is the server's result_map_type_to_map_flags.
func resultMapFlags(typ int64) byte {
	switch typ {
	case rtKeyValue:
		return mapFlagPreserveOrder
	case rtOrderedMap:
		return mapFlagKOrdered
	}
	return 0
}

// setNotFound is the server's result_data_set_not_found.
func (rd *resultData) setNotFound(index int64) bool {
	switch rd.typ {
	case rtNone:
	case rtRevIndexRng, rtIndexRange, rtRankRange, rtRevRankRange:
		rd.val = &listVal{items: []any{index, int64(0)}}
	case rtIndex, rtReverseIndex, rtRank, rtReverseRank:
		if rd.multi {
			rd.val = &listVal{items: []any{}}
			break
		}
		rd.val = int64(-1)
	case rtCount:
		rd.val = int64(0)
	case rtExists:
		rd.val = false
	case rtKey, rtValue:
		if rd.multi {
			rd.val = &listVal{items: []any{}}
		}
	case rtKeyValue, rtUnorderedMap, rtOrderedMap:
		rd.val = &mapVal{flags: resultMapFlags(rd.typ)}
	default:
		return false
	}
	return true
}

func (rd *resultData) setKeyNotFound(index int64) bool {
	if rd.isReturnRankRange() {
		return false
	}
	return rd.setNotFound(index)
}

func (rd *resultData) setValueNotFound(rank int64) bool {
	if rd.isReturnIndexRange() {
		return false
	}
	return rd.setNotFound(rank)
}

// intRange is cdt_container_builder_add_int_range: count consecutive
// integers from start, or, reversed, from ele_count - start - count.
func intRange(out []any, start, count, n int, rev bool) []any {
	if rev {
		start = n - start - count
	}
	for i := 0; i < count; i++ {
		out = append(out, int64(start+i))
	}
	return out
}

// setIndexRankCount is the server's result_data_set_index_rank_count.
func (rd *resultData) setIndexRankCount(start, count, n int) *opError {
	rev := false
	switch rd.typ {
	case rtNone:
	case rtCount:
		if rd.inverted {
			rd.val = int64(n - count)
		} else {
			rd.val = int64(count)
		}
	case rtExists:
		// As the server: an inverted EXISTS answers whether the selection
		// before inversion was empty.
		if rd.inverted {
			rd.val = count == 0
		} else {
			rd.val = count != 0
		}
	case rtReverseIndex, rtReverseRank:
		rev = true
		fallthrough
	case rtIndex, rtRank:
		if !rd.multi {
			if count == 0 {
				rd.val = int64(-1)
				break
			}
			if rev {
				start = n - start - 1
			}
			rd.val = int64(start)
			break
		}
		var out []any
		if rd.inverted {
			out = intRange(out, 0, start, n, rev)
			out = intRange(out, start+count, n-start-count, n, rev)
		} else {
			out = intRange(out, start, count, n, rev)
		}
		rd.val = &listVal{items: nonNilItems(out)}
	default:
		return fail(rcOpNotApplicable, fmt.Sprintf("cdt result type %d not applicable", rd.typ))
	}
	return nil
}

func nonNilItems(items []any) []any {
	if items == nil {
		return []any{}
	}
	return items
}

// setRange is the server's result_data_set_range.
func (rd *resultData) setRange(start, count, n int) *opError {
	switch rd.typ {
	case rtNone:
		return nil
	case rtCount, rtExists, rtReverseIndex, rtReverseRank, rtIndex, rtRank:
		return rd.setIndexRankCount(start, count, n)
	}
	return fail(rcOpNotApplicable, fmt.Sprintf("cdt result type %d not applicable", rd.typ))
}

// mapCtx is one map op on a map whose pairs are physically in key order
// (aerotest, like the server's untrusted-rewrite, stores every map sorted by
// key; an unordered map differs from a key-ordered one only in the code
// paths the server takes, which decide result order and edge cases).
type mapCtx struct {
	pairs    []mapPair
	kOrdered bool
	modify   bool
	changed  bool
}

func (mc *mapCtx) n() int { return len(mc.pairs) }

func keyEq(a, b any) bool { return typeRank(a) == typeRank(b) && compareValues(a, b) == 0 }

// keyLowerBound is the index of the first key >= k.
func (mc *mapCtx) keyLowerBound(k any) int {
	return sort.Search(mc.n(), func(i int) bool { return compareValues(mc.pairs[i].k, k) >= 0 })
}

// findKey returns the index of key k, or its insertion index.
func (mc *mapCtx) findKey(k any) (int, bool) {
	i := mc.keyLowerBound(k)
	return i, i < mc.n() && keyEq(mc.pairs[i].k, k)
}

// rankOrder lists element indexes by (value, key), the server's rank order.
func (mc *mapCtx) rankOrder() []int {
	idx := make([]int, mc.n())
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		return compareValues(mc.pairs[idx[a]].v, mc.pairs[idx[b]].v) < 0
	})
	return idx
}

// rankOf is the rank of element idx.
func (mc *mapCtx) rankOf(idx int) int {
	for r, i := range mc.rankOrder() {
		if i == idx {
			return r
		}
	}
	return -1
}

// valueLowerBound is the number of elements whose value is below v.
func (mc *mapCtx) valueLowerBound(v any) int {
	n := 0
	for _, p := range mc.pairs {
		if compareValues(p.v, v) < 0 {
			n++
		}
	}
	return n
}

func (mc *mapCtx) removeMask(mask []bool) {
	var keep []mapPair
	for i, p := range mc.pairs {
		if !mask[i] {
			keep = append(keep, p)
		}
	}
	mc.pairs = keep
	mc.changed = true
}

func (mc *mapCtx) removeRange(start, count int) {
	mask := make([]bool, mc.n())
	for i := start; i < start+count; i++ {
		mask[i] = true
	}
	mc.removeMask(mask)
}

func maskCount(mask []bool) int {
	c := 0
	for _, b := range mask {
		if b {
			c++
		}
	}
	return c
}

func maskIdxs(mask []bool) []int {
	var out []int
	for i, b := range mask {
		if b {
			out = append(out, i)
		}
	}
	return out
}

func invertMask(mask []bool) {
	for i := range mask {
		mask[i] = !mask[i]
	}
}

// calcIndexCount is the server's calc_index_count.
func calcIndexCount(index int64, count uint64, n int, multi bool) (int, int, bool) {
	if multi {
		switch {
		case index >= int64(n):
			return n, 0, true
		case index < 0 && index+int64(n) < 0:
			neg := uint64(-(index + int64(n)))
			if neg < count {
				out := count - neg
				if out > uint64(n) {
					out = uint64(n)
				}
				return 0, int(out), true
			}
			return 0, 0, true
		}
		if index < 0 {
			index += int64(n)
		}
		return int(index), calcCount(int(index), count, n), true
	}
	if index >= int64(n) {
		return 0, 0, false
	}
	if index < 0 {
		index += int64(n)
		if index < 0 {
			return 0, 0, false
		}
	}
	return int(index), calcCount(int(index), count, n), true
}

func calcCount(index int, count uint64, n int) int {
	if count >= uint64(n-index) {
		return n - index
	}
	return int(count)
}

// calcRelIndexCount is the server's calc_rel_index_count.
func calcRelIndexCount(index int64, count uint64, rel int) (int64, uint64) {
	index += int64(rel)
	if index < 0 {
		neg := uint64(-index)
		if count > neg {
			count -= neg
		} else {
			count = 0
		}
		index = 0
	}
	return index, count
}

// byKeyInterval is packed_map_get_remove_by_key_interval; single selects
// one key (start == end), hasEnd false means "to the end".
func (mc *mapCtx) byKeyInterval(rd *resultData, start, end any, single, hasEnd bool) *opError {
	if rd.isReturnRankRange() {
		return notApplicable("key interval result type")
	}
	if mc.kOrdered {
		index, count := mc.rangeByKeyIntervalOrdered(start, end, single, hasEnd)
		if count == 0 && !rd.multi {
			if !rd.setKeyNotFound(-1) {
				return notApplicable("key not found result type")
			}
			return nil
		}
		return mc.byIndexRange(rd, int64(index), uint64(count))
	}
	if rd.inverted && !rd.multi {
		return notApplicable("INVERTED with a single result op")
	}
	if single {
		idx, found := mc.findKey(start)
		if !found {
			if !rd.setKeyNotFound(-1) {
				return notApplicable("key not found result type")
			}
			return nil
		}
		pairs := mc.pairs
		if mc.modify {
			mc.removeRange(idx, 1)
		}
		return (&mapCtx{pairs: pairs, kOrdered: mc.kOrdered}).buildResultByKey(rd, idx, 1)
	}
	mask := make([]bool, mc.n())
	index, count := 0, 0
	for i, p := range mc.pairs {
		if compareValues(p.k, start) < 0 {
			index++
		} else if !hasEnd || compareValues(p.k, end) < 0 {
			mask[i] = true
			count++
		}
	}
	rmCount := count
	if rd.inverted {
		rmCount = mc.n() - count
		invertMask(mask)
	}
	orig := &mapCtx{pairs: mc.pairs, kOrdered: mc.kOrdered}
	if mc.modify {
		mc.removeMask(mask)
	}
	switch {
	case rd.isReturnElements():
		orig.buildEleResultByMask(rd, mask, rmCount)
	case rd.isReturnRank():
		orig.buildRankResultByMask(rd, mask, rmCount)
	default:
		return rd.setRange(index, count, orig.n())
	}
	return nil
}

func (mc *mapCtx) rangeByKeyIntervalOrdered(start, end any, single, hasEnd bool) (int, int) {
	index, found := mc.findKey(start)
	switch {
	case single:
		if found {
			return index, 1
		}
		return index, 0
	case hasEnd:
		e, _ := mc.findKey(end)
		if e <= index {
			return index, 0
		}
		return index, e - index
	}
	return index, mc.n() - index
}

func notApplicable(why string) *opError { return fail(rcOpNotApplicable, "cdt map: "+why) }

// byIndexRange is packed_map_get_remove_by_index_range.
func (mc *mapCtx) byIndexRange(rd *resultData, index int64, count uint64) *opError {
	n := mc.n()
	uindex, count32, ok := calcIndexCount(index, count, n, rd.multi)
	if !ok {
		return notApplicable(fmt.Sprintf("index %d out of bounds for %d elements", index, n))
	}
	if rd.isReturnRankRange() {
		return notApplicable("index range result type")
	}
	if rd.inverted {
		if !rd.multi {
			return notApplicable("INVERTED with a single result op")
		}
		rd.inverted = false
		switch {
		case count32 == 0:
			uindex, count32 = 0, n
		case uindex == 0:
			uindex, count32 = count32, n-count32
		case uindex+count32 >= n:
			uindex, count32 = 0, uindex
		case mc.kOrdered:
			return mc.trimOrdered(rd, uindex, count32)
		default:
			rd.inverted = true
		}
	}
	if count32 == 0 {
		if !rd.setKeyNotFound(int64(uindex)) {
			return notApplicable("empty range result type")
		}
		return nil
	}
	if count32 == n {
		return mc.getRemoveAll(rd)
	}
	orig := &mapCtx{pairs: mc.pairs, kOrdered: mc.kOrdered}
	if mc.kOrdered {
		if mc.modify {
			mc.removeRange(uindex, count32)
		}
		switch {
		case rd.isReturnElements():
			orig.buildEleResultByIdxRange(rd, uindex, count32)
		case rd.isReturnRank():
			orig.buildRankResultByIndexRange(rd, uindex, count32)
		default:
			return rd.setRange(uindex, count32, n)
		}
		return nil
	}
	// Unordered: the server selects by key with a heap; the selection comes
	// out in key order, which is index order here.
	sel := make([]int, count32)
	mask := make([]bool, n)
	for i := range sel {
		sel[i] = uindex + i
		mask[uindex+i] = true
	}
	rmCount := count32
	if rd.inverted {
		invertMask(mask)
		rmCount = n - count32
	}
	if mc.modify {
		mc.removeMask(mask)
	}
	switch {
	case rd.isReturnRank():
		if rd.inverted {
			orig.buildRankResultByMask(rd, mask, rmCount)
		} else {
			orig.buildRankResultByEleIdx(rd, sel)
		}
	case rd.isReturnElements():
		if rd.inverted {
			orig.buildEleResultByMask(rd, mask, rmCount)
		} else {
			orig.buildEleResultByEleIdx(rd, sel)
		}
	default:
		return rd.setRange(uindex, count32, n)
	}
	return nil
}

// trimOrdered is packed_map_trim_ordered: keep [index, index+count).
func (mc *mapCtx) trimOrdered(rd *resultData, index, count int) *opError {
	n := mc.n()
	rmCount := n - count
	orig := &mapCtx{pairs: mc.pairs, kOrdered: mc.kOrdered}
	if mc.modify {
		mc.pairs = append([]mapPair(nil), mc.pairs[index:index+count]...)
		mc.changed = true
	}
	switch rd.typ {
	case rtNone:
	case rtCount:
		rd.val = int64(rmCount)
	case rtExists:
		rd.val = rmCount != 0
	case rtReverseIndex, rtIndex:
		rev := rd.typ == rtReverseIndex
		var out []any
		out = intRange(out, 0, index, n, rev)
		out = intRange(out, index+count, n-index-count, n, rev)
		rd.val = &listVal{items: nonNilItems(out)}
	case rtRank, rtReverseRank:
		rd.inverted = true
		orig.buildRankResultByIndexRange(rd, index, count)
	case rtKey, rtValue, rtKeyValue, rtUnorderedMap, rtOrderedMap:
		rd.inverted = true
		orig.buildEleResultByIdxRange(rd, index, count)
	default:
		return notApplicable("trim result type")
	}
	return nil
}

// getRemoveAll is packed_map_get_remove_all.
func (mc *mapCtx) getRemoveAll(rd *resultData) *opError {
	n := mc.n()
	orig := &mapCtx{pairs: mc.pairs, kOrdered: mc.kOrdered}
	if mc.modify {
		mc.pairs = nil
		mc.changed = true
	}
	rev := false
	switch rd.typ {
	case rtNone:
	case rtReverseIndex, rtReverseRank:
		rev = true
		fallthrough
	case rtIndex, rtRank:
		if !rd.multi {
			rd.val = int64(0)
			break
		}
		rd.val = &listVal{items: nonNilItems(intRange(nil, 0, n, n, rev))}
	case rtCount:
		rd.val = int64(n)
	case rtExists:
		rd.val = n != 0
	case rtKey, rtValue, rtKeyValue, rtUnorderedMap, rtOrderedMap:
		orig.buildEleResultByIdxRange(rd, 0, n)
	default:
		return notApplicable("remove-all result type")
	}
	return nil
}

// byValueInterval is packed_map_get_remove_by_value_interval (the path for
// maps without a value index); single selects one value (start == end).
func (mc *mapCtx) byValueInterval(rd *resultData, start, end any, single, hasEnd bool) *opError {
	if rd.isReturnIndexRange() {
		return notApplicable("value interval result type")
	}
	if rd.inverted && !rd.multi {
		return notApplicable("INVERTED with a single result op")
	}
	n := mc.n()
	if n == 0 {
		if !rd.setValueNotFound(-1) {
			return notApplicable("value not found result type")
		}
		return nil
	}
	mask := make([]bool, n)
	rank, count := 0, 0
	firstMatch := -1
	for i, p := range mc.pairs {
		c := compareValues(p.v, start)
		switch {
		case c < 0:
			rank++
		case !single:
			if !hasEnd || compareValues(p.v, end) < 0 {
				mask[i] = true
				count++
			}
		case c == 0:
			if !rd.multi {
				if count == 0 {
					firstMatch = i
					count = 1
				}
				continue
			}
			mask[i] = true
			count++
		}
	}
	if count == 0 {
		if rd.inverted {
			rd.inverted = false
			return mc.getRemoveAll(rd)
		}
		if !rd.setValueNotFound(int64(rank)) {
			return notApplicable("value not found result type")
		}
		return nil
	}
	if !rd.multi {
		if firstMatch >= 0 {
			mask = make([]bool, n)
			mask[firstMatch] = true
		} else {
			// A single-result interval keeps only its first match.
			first := maskIdxs(mask)[0]
			mask = make([]bool, n)
			mask[first] = true
		}
		count = 1
	}
	rmCount := count
	if rd.inverted {
		invertMask(mask)
		rmCount = n - count
	}
	orig := &mapCtx{pairs: mc.pairs, kOrdered: mc.kOrdered}
	if mc.modify {
		mc.removeMask(mask)
	}
	switch {
	case rd.isReturnElements():
		orig.buildEleResultByMask(rd, mask, rmCount)
	case rd.isReturnIndex():
		orig.buildIndexResultByMask(rd, mask, rmCount)
	default:
		return rd.setRange(rank, count, n)
	}
	return nil
}

// byRankRange is packed_map_get_remove_by_rank_range (without a value index).
func (mc *mapCtx) byRankRange(rd *resultData, rank int64, count uint64) *opError {
	n := mc.n()
	urank, count32, ok := calcIndexCount(rank, count, n, rd.multi)
	if !ok {
		return notApplicable(fmt.Sprintf("rank %d out of bounds for %d elements", rank, n))
	}
	if rd.isReturnIndexRange() {
		return notApplicable("rank range result type")
	}
	if rd.inverted {
		if !rd.multi {
			return notApplicable("INVERTED with a single result op")
		}
		rd.inverted = false
		switch {
		case count32 == 0:
			urank, count32 = 0, n
		case urank == 0:
			urank, count32 = count32, n-count32
		case urank+count32 >= n:
			urank, count32 = 0, urank
		default:
			rd.inverted = true
		}
	}
	if count32 == 0 {
		if !rd.setValueNotFound(int64(urank)) {
			return notApplicable("empty rank range result type")
		}
		return nil
	}
	inverted := rd.inverted
	rmCount := count32
	if inverted {
		rmCount = n - count32
	}
	order := mc.rankOrder()
	sel := order[urank : urank+count32]
	mask := make([]bool, n)
	for _, i := range sel {
		mask[i] = true
	}
	if inverted {
		invertMask(mask)
	}
	byMask := inverted || rd.isOrdered()
	orig := &mapCtx{pairs: mc.pairs, kOrdered: mc.kOrdered}
	if !byMask {
		switch {
		case rd.isReturnIndex():
			orig.buildIndexResultByEleIdx(rd, sel, urank)
		case rd.isReturnElements():
			orig.buildEleResultByEleIdx(rd, sel)
		}
	}
	if mc.modify {
		mc.removeMask(mask)
	}
	switch rd.typ {
	case rtNone, rtCount, rtExists, rtRank, rtReverseRank:
		return rd.setIndexRankCount(urank, count32, n)
	case rtIndex, rtReverseIndex:
		if inverted {
			orig.buildIndexResultByMask(rd, mask, rmCount)
		}
	case rtKey, rtValue, rtKeyValue, rtUnorderedMap, rtOrderedMap:
		if byMask {
			orig.buildEleResultByMask(rd, mask, rmCount)
		}
	default:
		return notApplicable("rank range result type")
	}
	return nil
}

// itemStats gives, for each item of a key or value list, how many elements
// are below it and how many equal it (the server's "irc").
func (mc *mapCtx) itemStats(items []any, byValue bool) (below, equal []int) {
	below = make([]int, len(items))
	equal = make([]int, len(items))
	for j, it := range items {
		for _, p := range mc.pairs {
			x := p.k
			if byValue {
				x = p.v
			}
			switch c := compareValues(x, it); {
			case c < 0:
				below[j]++
			case c == 0 && (byValue || keyEq(x, it)):
				equal[j]++
			}
		}
	}
	return below, equal
}

// itemListResult is result_data_set_by_itemlist_irc / result_data_set_by_irc.
func (rd *resultData) itemListResult(items []any, below, equal []int, n int) {
	rev := rd.isRev()
	var out []any
	if !rd.inverted {
		for j := range items {
			for k := 0; k < equal[j]; k++ {
				out = intRange(out, below[j]+k, 1, n, rev)
			}
		}
	} else {
		order := make([]int, len(items))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return compareValues(items[order[a]], items[order[b]]) < 0 })
		prev := 0
		for _, j := range order {
			if equal[j] == 0 {
				continue
			}
			out = intRange(out, prev, below[j]-prev, n, rev)
			prev = below[j] + equal[j]
		}
		out = intRange(out, prev, n-prev, n, rev)
	}
	rd.val = &listVal{items: nonNilItems(out)}
}

// byKeyList is packed_map_get_remove_all_by_key_list.
func (mc *mapCtx) byKeyList(rd *resultData, items []any) *opError {
	n := mc.n()
	if len(items) == 0 {
		switch rd.typ {
		case rtRank, rtReverseRank, rtIndexRange, rtRevIndexRng, rtRankRange, rtRevRankRange:
			return notApplicable("key list result type")
		}
		if !rd.inverted {
			rd.setKeyNotFound(0)
			return nil
		}
		rd.inverted = false
		return mc.getRemoveAll(rd)
	}
	mask := make([]bool, n)
	for i, p := range mc.pairs {
		for _, it := range items {
			if keyEq(p.k, it) {
				mask[i] = true
				break
			}
		}
	}
	if rd.inverted {
		invertMask(mask)
	}
	rmCount := maskCount(mask)
	below, equal := mc.itemStats(items, false)
	orig := &mapCtx{pairs: mc.pairs, kOrdered: mc.kOrdered}
	if mc.modify {
		mc.removeMask(mask)
	}
	switch rd.typ {
	case rtNone:
	case rtReverseIndex, rtIndex:
		if mc.kOrdered && rd.inverted {
			orig.intListByMask(rd, mask, rmCount)
		} else {
			rd.itemListResult(items, below, equal, n)
		}
	case rtCount:
		rd.val = int64(rmCount)
	case rtExists:
		rd.val = rmCount != 0
	case rtKey, rtValue, rtKeyValue, rtUnorderedMap, rtOrderedMap:
		orig.buildEleResultByMask(rd, mask, rmCount)
	default:
		return notApplicable("key list result type")
	}
	return nil
}

// byValueList is packed_map_get_remove_all_by_value_list (without a value
// index).
func (mc *mapCtx) byValueList(rd *resultData, items []any) *opError {
	n := mc.n()
	if len(items) == 0 {
		switch rd.typ {
		case rtIndexRange, rtRevIndexRng, rtRankRange, rtRevRankRange:
			return notApplicable("value list result type")
		}
		if !rd.inverted {
			rd.setNotFound(0)
			return nil
		}
		rd.inverted = false
		return mc.getRemoveAll(rd)
	}
	mask := make([]bool, n)
	for i, p := range mc.pairs {
		for _, it := range items {
			if compareValues(p.v, it) == 0 {
				mask[i] = true
				break
			}
		}
	}
	if rd.inverted {
		invertMask(mask)
	}
	rmCount := maskCount(mask)
	rbelow := make([]int, len(items))
	requal := make([]int, len(items))
	if rd.isReturnRank() {
		for j, it := range items {
			rbelow[j] = mc.valueLowerBound(it)
			for _, p := range mc.pairs {
				if compareValues(p.v, it) == 0 {
					requal[j]++
				}
			}
		}
	}
	orig := &mapCtx{pairs: mc.pairs, kOrdered: mc.kOrdered}
	if mc.modify {
		mc.removeMask(mask)
	}
	switch rd.typ {
	case rtNone:
	case rtReverseIndex, rtIndex:
		orig.buildIndexResultByMask(rd, mask, rmCount)
	case rtReverseRank, rtRank:
		rd.itemListResult(items, rbelow, requal, n)
	case rtCount:
		rd.val = int64(rmCount)
	case rtExists:
		rd.val = rmCount != 0
	case rtKey, rtValue, rtKeyValue, rtUnorderedMap, rtOrderedMap:
		orig.buildEleResultByMask(rd, mask, rmCount)
	default:
		return notApplicable("value list result type")
	}
	return nil
}

// intListByMask is result_data_set_int_list_by_mask.
func (mc *mapCtx) intListByMask(rd *resultData, mask []bool, count int) {
	n := mc.n()
	rev := rd.isRev()
	idxs := maskIdxs(mask)
	if !rd.multi {
		idx := idxs[0]
		if rev {
			idx = n - idx - 1
		}
		rd.val = int64(idx)
		return
	}
	out := []any{}
	for _, idx := range idxs[:count] {
		if rev {
			idx = n - idx - 1
		}
		out = append(out, int64(idx))
	}
	rd.val = &listVal{items: out}
}

// buildResultByKey is packed_map_build_result_by_key.
func (mc *mapCtx) buildResultByKey(rd *resultData, idx, count int) *opError {
	n := mc.n()
	switch rd.typ {
	case rtNone:
	case rtIndex, rtReverseIndex:
		index := idx
		if rd.typ == rtReverseIndex {
			index = n - index - count
		}
		rd.val = int64(index)
	case rtRank, rtReverseRank:
		rank := mc.rankOf(idx)
		if rd.typ == rtReverseRank {
			rank = n - rank - 1
		}
		if rd.multi {
			rd.val = &listVal{items: []any{int64(rank)}}
		} else {
			rd.val = int64(rank)
		}
	case rtCount:
		rd.val = int64(count)
	case rtExists:
		rd.val = count != 0
	case rtKey, rtValue, rtKeyValue, rtUnorderedMap, rtOrderedMap:
		mc.buildEleResultByIdxRange(rd, idx, count)
	default:
		return notApplicable("key result type")
	}
	return nil
}

func (mc *mapCtx) element(rd *resultData, i int) any {
	if rd.typ == rtKey {
		return mc.pairs[i].k
	}
	return mc.pairs[i].v
}

// buildEleResultByIdxRange is packed_map_build_ele_result_by_idx_range; it
// respects the inverted flag.
func (mc *mapCtx) buildEleResultByIdxRange(rd *resultData, start, count int) {
	n := mc.n()
	var idxs []int
	if rd.inverted {
		for i := 0; i < start; i++ {
			idxs = append(idxs, i)
		}
		for i := start + count; i < n; i++ {
			idxs = append(idxs, i)
		}
	} else {
		for i := start; i < start+count; i++ {
			idxs = append(idxs, i)
		}
	}
	if rd.isReturnMap() {
		out := &mapVal{flags: resultMapFlags(rd.typ)}
		for _, i := range idxs {
			out.pairs = append(out.pairs, mc.pairs[i])
		}
		rd.val = out
		return
	}
	if !rd.multi {
		rd.val = mc.element(rd, start)
		return
	}
	out := []any{}
	for _, i := range idxs {
		out = append(out, mc.element(rd, i))
	}
	rd.val = &listVal{items: out}
}

// buildEleResultByEleIdx is packed_map_build_ele_result_by_ele_idx.
func (mc *mapCtx) buildEleResultByEleIdx(rd *resultData, idxs []int) {
	if rd.isReturnMap() {
		out := &mapVal{flags: resultMapFlags(rd.typ)}
		for _, i := range idxs {
			out.pairs = append(out.pairs, mc.pairs[i])
		}
		rd.val = out
		return
	}
	if !rd.multi {
		if len(idxs) > 0 {
			rd.val = mc.element(rd, idxs[0])
		}
		return
	}
	out := []any{}
	for _, i := range idxs {
		out = append(out, mc.element(rd, i))
	}
	rd.val = &listVal{items: out}
}

// buildEleResultByMask is packed_map_build_ele_result_by_mask.
func (mc *mapCtx) buildEleResultByMask(rd *resultData, mask []bool, count int) {
	idxs := maskIdxs(mask)
	if !rd.multi {
		mc.buildEleResultByEleIdx(rd, idxs[:min(1, len(idxs))])
		return
	}
	mc.buildEleResultByEleIdx(rd, idxs[:count])
}

// buildRankResultByIdx is packed_map_build_rank_result_by_idx.
func (mc *mapCtx) buildRankResultByIdx(rd *resultData, idx int) {
	rank := mc.rankOf(idx)
	if rd.typ == rtReverseRank {
		rank = mc.n() - rank - 1
	}
	rd.val = int64(rank)
}

func (mc *mapCtx) rankList(rd *resultData, idxs []int) {
	out := []any{}
	for _, i := range idxs {
		r := mc.rankOf(i)
		if rd.typ == rtReverseRank {
			r = mc.n() - r - 1
		}
		out = append(out, int64(r))
	}
	rd.val = &listVal{items: out}
}

// buildRankResultByEleIdx is packed_map_build_rank_result_by_ele_idx.
func (mc *mapCtx) buildRankResultByEleIdx(rd *resultData, idxs []int) {
	if !rd.multi {
		mc.buildRankResultByIdx(rd, idxs[0])
		return
	}
	mc.rankList(rd, idxs)
}

// buildRankResultByMask is packed_map_build_rank_result_by_mask.
func (mc *mapCtx) buildRankResultByMask(rd *resultData, mask []bool, count int) {
	idxs := maskIdxs(mask)
	if !rd.multi {
		mc.buildRankResultByIdx(rd, idxs[0])
		return
	}
	mc.rankList(rd, idxs[:count])
}

// buildRankResultByIndexRange is packed_map_build_rank_result_by_index_range;
// it respects the inverted flag.
func (mc *mapCtx) buildRankResultByIndexRange(rd *resultData, index, count int) {
	if !rd.multi {
		mc.buildRankResultByIdx(rd, index)
		return
	}
	var idxs []int
	if rd.inverted {
		for i := 0; i < index; i++ {
			idxs = append(idxs, i)
		}
		for i := index + count; i < mc.n(); i++ {
			idxs = append(idxs, i)
		}
	} else {
		for i := index; i < index+count; i++ {
			idxs = append(idxs, i)
		}
	}
	mc.rankList(rd, idxs)
}

// buildIndexResultByEleIdx is packed_map_build_index_result_by_ele_idx.
func (mc *mapCtx) buildIndexResultByEleIdx(rd *resultData, idxs []int, start int) {
	n := mc.n()
	if len(idxs) == 0 {
		rd.setNotFound(int64(start))
		return
	}
	if !rd.multi {
		idx := idxs[0]
		if rd.typ == rtReverseIndex {
			idx = n - idx - 1
		}
		rd.val = int64(idx)
		return
	}
	out := []any{}
	for _, idx := range idxs {
		if rd.typ == rtReverseIndex {
			idx = n - idx - 1
		}
		out = append(out, int64(idx))
	}
	rd.val = &listVal{items: out}
}

// buildIndexResultByMask is packed_map_build_index_result_by_mask.
func (mc *mapCtx) buildIndexResultByMask(rd *resultData, mask []bool, count int) {
	if count == 0 {
		rd.setNotFound(-1)
		return
	}
	mc.buildIndexResultByEleIdx(rd, maskIdxs(mask)[:count], 0)
}

// calcDelta is the server's cdt_calc_delta (cdt.c): cur plus delta, where
// cur is nil for a missing element and delta nil for 1; the element's type
// wins (a float delta added to an integer is truncated first).
func calcDelta(cur, delta any) (any, error) {
	var di int64 = 1
	var df = 1.0
	isFloat := false
	switch d := delta.(type) {
	case nil:
	case int64:
		di, df = d, float64(d)
	case float64:
		di, df, isFloat = int64(d), d, true
	default:
		return nil, fmt.Errorf("delta is not numeric")
	}
	switch c := cur.(type) {
	case nil:
		if isFloat {
			return df, nil
		}
		return di, nil
	case int64:
		return c + di, nil
	case float64:
		return c + df, nil
	}
	return nil, fmt.Errorf("element is not numeric")
}

func negate(delta any) any {
	switch d := delta.(type) {
	case nil:
		return int64(-1)
	case int64:
		return -d
	case float64:
		return -d
	}
	return delta
}
