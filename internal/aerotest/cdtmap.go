package aerotest

import (
	"fmt"
	"sort"
)

// CDT map op codes (client cdt_map.go).
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

// Map write flags.
const (
	mapFlagCreateOnly = 1
	mapFlagUpdateOnly = 2
	mapFlagNoFail     = 4
	mapFlagPartial    = 8
)

// Map return types.
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
	rtExists       = 13
	rtUnorderedMap = 16
	rtOrderedMap   = 17
	rtInverted     = 0x10000
)

var mapOpNames = map[int]string{
	mapSetType: "set_type", mapAdd: "add", mapAddItems: "add_items", mapPut: "put", mapPutItems: "put_items",
	mapReplace: "replace", mapReplaceItems: "replace_items", mapIncrement: "increment", mapDecrement: "decrement",
	mapClear: "clear", mapRemoveByKey: "remove_by_key", mapRemoveByIndex: "remove_by_index",
	mapRemoveByRank: "remove_by_rank", mapRemoveKeyList: "remove_by_key_list", mapRemoveByValue: "remove_by_value",
	mapRemoveValueList: "remove_by_value_list", mapRemoveByKeyInterval: "remove_by_key_interval",
	mapRemoveByIndexRange: "remove_by_index_range", mapRemoveByValueInterval: "remove_by_value_interval",
	mapRemoveByRankRange: "remove_by_rank_range", mapRemoveByKeyRelIndex: "remove_by_key_rel_index_range",
	mapRemoveByValueRelRank: "remove_by_value_rel_rank_range", mapSize: "size", mapGetByKey: "get_by_key",
	mapGetByIndex: "get_by_index", mapGetByRank: "get_by_rank", mapGetByValue: "get_by_value",
	mapGetByKeyInterval: "get_by_key_interval", mapGetByIndexRange: "get_by_index_range",
	mapGetByValueInterval: "get_by_value_interval", mapGetByRankRange: "get_by_rank_range",
	mapGetByKeyList: "get_by_key_list", mapGetByValueList: "get_by_value_list",
	mapGetByKeyRelIndex: "get_by_key_rel_index_range", mapGetByValueRelRank: "get_by_value_rel_rank_range",
}

func isMapModify(code int) bool { return code >= 64 && code < 96 }

// applyCDT applies a CDT op to the bin value cur (nil if the bin is
// missing). It returns the new bin value, the op result, and whether the
// bin changed. Only map ops without context are supported.
func applyCDT(o wireOp, cur any, s *Server) (newVal, res any, changed bool, err *opError) {
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
	if code < 64 || code > 127 {
		return nil, nil, false, unsupported(fmt.Sprintf("cdt list/other op %d", code))
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
	args := l.items[1:]
	return mapOp(int(code), name, args, m)
}

func argInt(args []any, i int) (int64, bool) {
	if i >= len(args) {
		return 0, false
	}
	v, ok := args[i].(int64)
	return v, ok
}

func mapOrderFlags(attr int64) byte { return byte(attr) & 0x03 }

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
		var nm *mapVal
		if m == nil {
			nm = &mapVal{}
		} else {
			nm = m.clone()
		}
		nm.flags = mapOrderFlags(attr)
		if nm.flags&1 != 0 {
			nm.sortByKey()
		}
		return nm, nil, true, nil

	case mapAdd, mapPut, mapReplace:
		if len(args) < 2 {
			return bad("missing key/value")
		}
		var attr, flags int64
		if len(args) > 2 {
			attr, _ = argInt(args, 2)
		}
		if len(args) > 3 {
			flags, _ = argInt(args, 3)
		}
		switch code {
		case mapAdd:
			flags |= mapFlagCreateOnly
		case mapReplace:
			flags |= mapFlagUpdateOnly
		}
		return mapPutAll(m, []mapPair{{args[0], args[1]}}, attr, flags)

	case mapAddItems, mapPutItems, mapReplaceItems:
		if len(args) < 1 {
			return bad("missing items")
		}
		items, ok := args[0].(*mapVal)
		if !ok {
			return bad("items are not a map")
		}
		var attr, flags int64
		if len(args) > 1 {
			attr, _ = argInt(args, 1)
		}
		if len(args) > 2 {
			flags, _ = argInt(args, 2)
		}
		switch code {
		case mapAddItems:
			flags |= mapFlagCreateOnly
		case mapReplaceItems:
			flags |= mapFlagUpdateOnly
		}
		return mapPutAll(m, items.pairs, attr, flags)

	case mapIncrement, mapDecrement:
		if len(args) < 2 {
			return bad("missing key/delta")
		}
		var attr int64
		if len(args) > 2 {
			attr, _ = argInt(args, 2)
		}
		nm := &mapVal{flags: mapOrderFlags(attr)}
		if m != nil {
			nm = m.clone()
		}
		k, delta := args[0], args[1]
		var nv any
		i := nm.find(k)
		switch d := delta.(type) {
		case int64:
			if code == mapDecrement {
				d = -d
			}
			if i < 0 {
				nv = d
			} else if c, ok := nm.pairs[i].v.(int64); ok {
				nv = c + d
			} else {
				return nil, nil, false, fail(rcBinTypeError, "cdt map increment: value is not an integer")
			}
		case float64:
			if code == mapDecrement {
				d = -d
			}
			if i < 0 {
				nv = d
			} else if c, ok := nm.pairs[i].v.(float64); ok {
				nv = c + d
			} else {
				return nil, nil, false, fail(rcBinTypeError, "cdt map increment: value is not a float")
			}
		default:
			return bad("delta is not numeric")
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
		// Reads and removes on a missing bin return nil and change nothing.
		return nil, nil, false, nil
	}
	sel, byRank, err := mapSelect(code, name, args, m)
	if err != nil {
		return nil, nil, false, err
	}
	if rt&rtInverted != 0 {
		sel = invertSelection(sel, len(m.pairs))
		byRank = false
	}
	res, err := mapResult(m, sel, rt&^rtInverted, isSingle(code) && rt&rtInverted == 0, byRank)
	if err != nil {
		return nil, nil, false, err
	}
	if isMapModify(code) {
		if len(sel) == 0 {
			return nil, res, false, nil
		}
		sorted := m.sortedPairs()
		drop := make(map[int]bool, len(sel))
		for _, i := range sel {
			drop[i] = true
		}
		nm := &mapVal{flags: m.flags}
		keep := make([]mapPair, 0, len(m.pairs)-len(sel))
		for i, p := range sorted {
			if !drop[i] {
				keep = append(keep, p)
			}
		}
		if m.flags&1 != 0 {
			nm.pairs = keep
		} else {
			// Preserve insertion order of the survivors.
			for _, p := range m.pairs {
				for _, k := range keep {
					if compareValues(p.k, k.k) == 0 && typeRank(p.k) == typeRank(k.k) {
						nm.pairs = append(nm.pairs, p)
						break
					}
				}
			}
		}
		return nm, res, true, nil
	}
	return nil, res, false, nil
}

func isSingle(code int) bool {
	switch code {
	case mapRemoveByKey, mapGetByKey, mapRemoveByIndex, mapGetByIndex, mapRemoveByRank, mapGetByRank:
		return true
	}
	return false
}

// mapPutAll implements put/put_items/add/replace with write flags.
func mapPutAll(m *mapVal, items []mapPair, attr, flags int64) (any, any, bool, *opError) {
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
	if denied && flags&mapFlagPartial == 0 {
		ok = nil // NO_FAIL without PARTIAL: nothing is committed
	}
	for _, it := range ok {
		nm.put(it.k, it.v)
	}
	return nm, int64(len(nm.pairs)), true, nil
}

func invertSelection(sel []int, n int) []int {
	in := make(map[int]bool, len(sel))
	for _, i := range sel {
		in[i] = true
	}
	out := make([]int, 0, n-len(sel))
	for i := 0; i < n; i++ {
		if !in[i] {
			out = append(out, i)
		}
	}
	return out
}

// rankOrder returns key-order indexes sorted by value (ties by key order).
func rankOrder(sorted []mapPair) []int {
	idx := make([]int, len(sorted))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return compareValues(sorted[idx[a]].v, sorted[idx[b]].v) < 0 })
	return idx
}

// clipRange resolves (index, count) against n like the server: negative
// index counts from the end; a missing count means "to the end".
func clipRange(index int64, count int64, hasCount bool, n int) (int, int) {
	start := index
	if start < 0 {
		start += int64(n)
	}
	end := int64(n)
	if hasCount {
		if count < 0 {
			count = 0
		}
		end = start + count
	}
	if start < 0 {
		start = 0
	}
	if end > int64(n) {
		end = int64(n)
	}
	if start > end {
		start = end
	}
	return int(start), int(end)
}

// mapSelect returns selected key-order indexes, and whether the result
// should be presented in rank (value) order.
func mapSelect(code int, name string, args []any, m *mapVal) ([]int, bool, *opError) {
	sorted := m.sortedPairs()
	n := len(sorted)
	bad := func(why string) ([]int, bool, *opError) {
		return nil, false, fail(rcParameter, "cdt map "+name+": "+why)
	}
	inRange := func(v, begin any, end any, hasEnd bool) bool {
		if compareValues(v, begin) < 0 {
			return false
		}
		if !hasEnd || isInfinity(end) {
			return true
		}
		return compareValues(v, end) < 0
	}
	switch code {
	case mapRemoveByKey, mapGetByKey:
		if len(args) < 1 {
			return bad("missing key")
		}
		for i, p := range sorted {
			if compareValues(p.k, args[0]) == 0 && typeRank(p.k) == typeRank(args[0]) {
				return []int{i}, false, nil
			}
		}
		return nil, false, nil

	case mapRemoveByIndex, mapGetByIndex:
		idx, ok := argInt(args, 0)
		if !ok {
			return bad("missing index")
		}
		if idx < 0 {
			idx += int64(n)
		}
		if idx < 0 || idx >= int64(n) {
			return nil, false, nil
		}
		return []int{int(idx)}, false, nil

	case mapRemoveByRank, mapGetByRank:
		rank, ok := argInt(args, 0)
		if !ok {
			return bad("missing rank")
		}
		if rank < 0 {
			rank += int64(n)
		}
		if rank < 0 || rank >= int64(n) {
			return nil, true, nil
		}
		return []int{rankOrder(sorted)[rank]}, true, nil

	case mapRemoveByIndexRange, mapGetByIndexRange:
		idx, ok := argInt(args, 0)
		if !ok {
			return bad("missing index")
		}
		count, hasCount := argInt(args, 1)
		start, end := clipRange(idx, count, hasCount, n)
		var sel []int
		for i := start; i < end; i++ {
			sel = append(sel, i)
		}
		return sel, false, nil

	case mapRemoveByRankRange, mapGetByRankRange:
		rank, ok := argInt(args, 0)
		if !ok {
			return bad("missing rank")
		}
		count, hasCount := argInt(args, 1)
		start, end := clipRange(rank, count, hasCount, n)
		return append([]int(nil), rankOrder(sorted)[start:end]...), true, nil

	case mapRemoveByValue, mapGetByValue:
		if len(args) < 1 {
			return bad("missing value")
		}
		var sel []int
		for _, i := range rankOrder(sorted) {
			if compareValues(sorted[i].v, args[0]) == 0 {
				sel = append(sel, i)
			}
		}
		return sel, true, nil

	case mapRemoveKeyList, mapGetByKeyList:
		keys, ok := args[0].(*listVal)
		if len(args) < 1 || !ok {
			return bad("keys are not a list")
		}
		var sel []int
		for i, p := range sorted {
			for _, k := range keys.items {
				if compareValues(p.k, k) == 0 && typeRank(p.k) == typeRank(k) {
					sel = append(sel, i)
					break
				}
			}
		}
		return sel, false, nil

	case mapRemoveValueList, mapGetByValueList:
		vals, ok := args[0].(*listVal)
		if len(args) < 1 || !ok {
			return bad("values are not a list")
		}
		var sel []int
		for _, i := range rankOrder(sorted) {
			for _, v := range vals.items {
				if compareValues(sorted[i].v, v) == 0 {
					sel = append(sel, i)
					break
				}
			}
		}
		return sel, true, nil

	case mapRemoveByKeyInterval, mapGetByKeyInterval:
		if len(args) < 1 {
			return bad("missing begin")
		}
		hasEnd := len(args) > 1
		var end any
		if hasEnd {
			end = args[1]
		}
		var sel []int
		for i, p := range sorted {
			if inRange(p.k, args[0], end, hasEnd) {
				sel = append(sel, i)
			}
		}
		return sel, false, nil

	case mapRemoveByValueInterval, mapGetByValueInterval:
		if len(args) < 1 {
			return bad("missing begin")
		}
		hasEnd := len(args) > 1
		var end any
		if hasEnd {
			end = args[1]
		}
		var sel []int
		for _, i := range rankOrder(sorted) {
			if inRange(sorted[i].v, args[0], end, hasEnd) {
				sel = append(sel, i)
			}
		}
		return sel, true, nil

	case mapRemoveByKeyRelIndex, mapGetByKeyRelIndex:
		if len(args) < 2 {
			return bad("missing key/index")
		}
		off, ok := argInt(args, 1)
		if !ok {
			return bad("index is not an integer")
		}
		count, hasCount := argInt(args, 2)
		anchor := sort.Search(n, func(i int) bool { return compareValues(sorted[i].k, args[0]) >= 0 })
		start, end := relRange(int64(anchor)+off, count, hasCount, n)
		var sel []int
		for i := start; i < end; i++ {
			sel = append(sel, i)
		}
		return sel, false, nil

	case mapRemoveByValueRelRank, mapGetByValueRelRank:
		if len(args) < 2 {
			return bad("missing value/rank")
		}
		off, ok := argInt(args, 1)
		if !ok {
			return bad("rank is not an integer")
		}
		count, hasCount := argInt(args, 2)
		order := rankOrder(sorted)
		anchor := sort.Search(n, func(i int) bool { return compareValues(sorted[order[i]].v, args[0]) >= 0 })
		start, end := relRange(int64(anchor)+off, count, hasCount, n)
		return append([]int(nil), order[start:end]...), true, nil
	}
	return nil, false, unsupported("cdt map op " + name)
}

// relRange clips a relative range [start, start+count) to [0, n).
func relRange(start, count int64, hasCount bool, n int) (int, int) {
	end := int64(n)
	if hasCount {
		if count < 0 {
			count = 0
		}
		end = start + count
	}
	if start < 0 {
		start = 0
	}
	if end > int64(n) {
		end = int64(n)
	}
	if start > end {
		start = end
	}
	return int(start), int(end)
}

// mapResult shapes the result of a selection according to the return type.
func mapResult(m *mapVal, sel []int, rt int64, single, byRank bool) (any, *opError) {
	sorted := m.sortedPairs()
	n := len(sorted)
	var ranks map[int]int
	rankOf := func(i int) int {
		if ranks == nil {
			ranks = map[int]int{}
			for r, k := range rankOrder(sorted) {
				ranks[k] = r
			}
		}
		return ranks[i]
	}
	list := func(f func(i int) any) any {
		if single {
			if len(sel) == 0 {
				return nil
			}
			return f(sel[0])
		}
		l := &listVal{items: make([]any, 0, len(sel))}
		for _, i := range sel {
			l.items = append(l.items, f(i))
		}
		return l
	}
	switch rt {
	case rtNone:
		return nil, nil
	case rtIndex:
		return list(func(i int) any { return int64(i) }), nil
	case rtReverseIndex:
		return list(func(i int) any { return int64(n - 1 - i) }), nil
	case rtRank:
		return list(func(i int) any { return int64(rankOf(i)) }), nil
	case rtReverseRank:
		return list(func(i int) any { return int64(n - 1 - rankOf(i)) }), nil
	case rtCount:
		return int64(len(sel)), nil
	case rtKey:
		return list(func(i int) any { return sorted[i].k }), nil
	case rtValue:
		return list(func(i int) any { return sorted[i].v }), nil
	case rtExists:
		return len(sel) > 0, nil
	case rtKeyValue, rtUnorderedMap, rtOrderedMap:
		out := &mapVal{}
		if rt == rtOrderedMap || (rt == rtKeyValue && m.flags&1 != 0) {
			out.flags = 1
		}
		ordered := append([]int(nil), sel...)
		if !byRank || out.flags&1 != 0 {
			sort.Ints(ordered)
		}
		for _, i := range ordered {
			out.pairs = append(out.pairs, sorted[i])
		}
		return out, nil
	}
	return nil, unsupported(fmt.Sprintf("cdt map return type %d", rt))
}
