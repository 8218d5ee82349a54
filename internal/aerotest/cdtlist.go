package aerotest

import (
	"fmt"
	"sort"
)

// CDT list op codes (server proto.h as_cdt_optype).
const (
	listSetType             = 0
	listAppend              = 1
	listAppendItems         = 2
	listInsert              = 3
	listInsertItems         = 4
	listPop                 = 5
	listPopRange            = 6
	listRemove              = 7
	listRemoveRange         = 8
	listSet                 = 9
	listTrim                = 10
	listClear               = 11
	listIncrement           = 12
	listSize                = 16
	listGet                 = 17
	listGetRange            = 18
	listGetByIndex          = 19
	listGetByValue          = 20
	listGetAllByValue       = 22
	listGetByIndexRange     = 24
	listRemoveByIndex       = 32
	listRemoveByValue       = 33
	listRemoveAllByValue    = 35
	listRemoveByIndexRange  = 37
	listFlagOrdered         = 1
	listWriteAddUnique      = 1
	listWriteInsertBounded  = 2
	listWriteNoFail         = 4
	listWritePartial        = 8
	listModifyCodesBoundary = 16 // codes below are modify ops
)

var listOpNames = map[int]string{
	listSetType: "set_type", listAppend: "append", listAppendItems: "append_items", listInsert: "insert",
	listInsertItems: "insert_items", listPop: "pop", listPopRange: "pop_range", listRemove: "remove",
	listRemoveRange: "remove_range", listSet: "set", listTrim: "trim", listClear: "clear",
	listIncrement: "increment", listSize: "size", listGet: "get", listGetRange: "get_range",
	listGetByIndex: "get_by_index", listGetByIndexRange: "get_by_index_range",
	listRemoveByIndex: "remove_by_index", listRemoveByIndexRange: "remove_by_index_range",
	listGetByValue: "get_by_value", listGetAllByValue: "get_all_by_value",
	listRemoveByValue: "remove_by_value", listRemoveAllByValue: "remove_all_by_value",
}

func isListModify(code int) bool {
	return code < listModifyCodesBoundary || (code >= 32 && code < 64)
}

// applyListOp applies a list op without context, following the server's
// particle_list.c. Value, rank and value-list selectors and sort are not
// modelled and answer UNSUPPORTED_FEATURE.
func applyListOp(code int, args []any, cur any, modify bool) (any, any, bool, *opError) {
	name, known := listOpNames[code]
	if !known {
		return nil, nil, false, unsupported(fmt.Sprintf("cdt list op %d", code))
	}
	if isListModify(code) != modify {
		return nil, nil, false, fail(rcParameter, fmt.Sprintf("cdt list op %s sent as the wrong op type", name))
	}
	bad := func(why string) (any, any, bool, *opError) {
		return nil, nil, false, fail(rcParameter, "cdt list "+name+": "+why)
	}
	var l *listVal
	if cur != nil {
		lv, ok := cur.(*listVal)
		if !ok {
			return nil, nil, false, fail(rcBinTypeError, "cdt list op "+name+" on a non-list bin")
		}
		l = lv
	}
	switch code {
	case listPop, listPopRange, listRemove, listRemoveRange, listTrim, listClear, listRemoveByIndex, listRemoveByIndexRange,
		listRemoveByValue, listRemoveAllByValue:
		if l == nil {
			return nil, nil, false, nil // no-op on a missing bin
		}
	}
	items := func() []any {
		if l == nil {
			return nil
		}
		return l.items
	}
	flags := byte(0)
	if l != nil {
		flags = l.flags
	}
	ordered := flags&listFlagOrdered != 0
	newList := func(it []any) *listVal { return &listVal{flags: flags, items: nonNilItems(it)} }

	switch code {
	case listSetType:
		t, ok := argInt(args, 0)
		if !ok {
			return bad("missing type")
		}
		if t&^0x11 != 0 { // cdt_check_flags: ORDERED | PERSIST_INDEX
			return nil, nil, false, fail(rcOpNotApplicable, "cdt list set_type: invalid flags")
		}
		it := append([]any(nil), items()...)
		if byte(t)&listFlagOrdered != 0 {
			sort.SliceStable(it, func(a, b int) bool { return compareValues(it[a], it[b]) < 0 })
		}
		return &listVal{flags: byte(t) & listFlagOrdered, items: nonNilItems(it)}, nil, true, nil

	case listAppend, listAppendItems:
		if len(args) < 1 {
			return bad("missing value")
		}
		if l == nil {
			if attr, ok := argInt(args, 1); ok {
				flags = byte(attr) & listFlagOrdered
				ordered = flags&listFlagOrdered != 0
			}
		}
		mod, _ := argInt(args, 2)
		vals := []any{args[0]}
		if code == listAppendItems {
			lv, ok := args[0].(*listVal)
			if !ok {
				return bad("items are not a list")
			}
			vals = lv.items
		}
		if ordered {
			return listAddOrdered(newList, items(), vals, mod)
		}
		return listInsertAt(newList, items(), int64(len(items())), vals, code == listAppendItems, mod)

	case listInsert, listInsertItems:
		idx, ok := argInt(args, 0)
		if !ok || len(args) < 2 {
			return bad("missing index/value")
		}
		if ordered {
			return nil, nil, false, fail(rcOpNotApplicable, "cdt list insert on an ordered list")
		}
		mod, _ := argInt(args, 2)
		vals := []any{args[1]}
		if code == listInsertItems {
			lv, ok := args[1].(*listVal)
			if !ok {
				return bad("items are not a list")
			}
			vals = lv.items
		}
		return listInsertAt(newList, items(), idx, vals, code == listInsertItems, mod)

	case listSet:
		idx, ok := argInt(args, 0)
		if !ok || len(args) < 2 {
			return bad("missing index/value")
		}
		mod, _ := argInt(args, 2)
		return listSetAt(newList, items(), ordered, idx, args[1], mod)

	case listIncrement:
		idx, ok := argInt(args, 0)
		if !ok {
			return bad("missing index")
		}
		n := int64(len(items()))
		if idx < 0 {
			idx += n
		}
		if idx < 0 {
			return nil, nil, false, fail(rcOpNotApplicable, "cdt list increment: index out of bounds")
		}
		var delta, cur any
		if len(args) > 1 {
			delta = args[1]
		}
		if idx < n {
			cur = items()[idx]
		}
		nv, err := calcDelta(cur, delta)
		if err != nil {
			return bad(err.Error())
		}
		if ordered {
			return nil, nil, false, unsupported("cdt list increment on an ordered list")
		}
		nl, _, _, oerr := listSetAt(newList, items(), false, idx, nv, 0)
		if oerr != nil {
			return nil, nil, false, oerr
		}
		return nl, nv, true, nil

	case listClear:
		return newList(nil), nil, true, nil

	case listSize:
		return nil, int64(len(items())), false, nil

	case listGetByValue, listGetAllByValue, listRemoveByValue, listRemoveAllByValue:
		rt, ok := argInt(args, 0)
		if !ok || len(args) < 2 {
			return bad("bad return type/value")
		}
		rd := &resultData{typ: rt &^ rtInverted, inverted: rt&rtInverted != 0,
			multi: code == listGetAllByValue || code == listRemoveAllByValue}
		kept, err := listByValue(rd, items(), ordered, args[1])
		if err != nil {
			return nil, nil, false, err
		}
		if modify && kept != nil {
			return newList(kept), rd.val, true, nil
		}
		return nil, rd.val, false, nil
	}

	// Index selections: pop, remove, trim, get and the by-index ops.
	rd := &resultData{}
	var index int64
	var count uint64 = 1
	var ok bool
	switch code {
	case listPop, listRemove, listGet:
		rd.typ = rtValue
		if code == listRemove {
			rd.typ = rtCount
		}
		if index, ok = argInt(args, 0); !ok {
			return bad("missing index")
		}
	case listPopRange, listRemoveRange, listGetRange:
		rd.typ, rd.multi = rtValue, true
		if code == listRemoveRange {
			rd.typ = rtCount
		}
		index, ok = argInt(args, 0)
		c, ok2 := argCount(args, 1)
		if !ok || !ok2 {
			return bad("bad index/count")
		}
		count = c
	case listTrim:
		rd.typ, rd.multi, rd.inverted = rtCount, true, true
		index, ok = argInt(args, 0)
		c, ok2 := argCount(args, 1)
		if !ok || !ok2 {
			return bad("bad index/count")
		}
		count = c
	case listGetByIndex, listRemoveByIndex, listGetByIndexRange, listRemoveByIndexRange:
		rt, ok1 := argInt(args, 0)
		idx, ok2 := argInt(args, 1)
		if !ok1 || !ok2 {
			return bad("bad return type/index")
		}
		rd.typ, rd.inverted, index = rt&^rtInverted, rt&rtInverted != 0, idx
		if code == listGetByIndexRange || code == listRemoveByIndexRange {
			rd.multi = true
			c, ok3 := argCount(args, 2)
			if !ok3 {
				return bad("bad count")
			}
			count = c
		}
	}
	kept, err := listByIndexRange(rd, items(), ordered, index, count)
	if err != nil {
		return nil, nil, false, err
	}
	if modify && kept != nil {
		return newList(kept), rd.val, true, nil
	}
	return nil, rd.val, false, nil
}

// listUnorderedRank is the rank of v in an unordered list: the number of
// elements below it.
func listUnorderedRank(items []any, v any) int {
	r := 0
	for _, x := range items {
		if compareValues(x, v) < 0 {
			r++
		}
	}
	return r
}

// listByIndexRange is packed_list_get_remove_by_index_range. It returns the
// elements that remain (nil when nothing is removed).
func listByIndexRange(rd *resultData, items []any, ordered bool, index int64, count uint64) ([]any, *opError) {
	n := len(items)
	uindex, count32, ok := calcIndexCount(index, count, n, rd.multi)
	if !ok {
		return nil, notApplicable(fmt.Sprintf("list index %d out of bounds for %d elements", index, n))
	}
	if rd.inverted {
		if !rd.multi {
			return nil, notApplicable("INVERTED with a single result op")
		}
		rd.inverted = false
		switch {
		case count32 == 0:
			uindex, count32 = 0, n
		case uindex == 0:
			uindex, count32 = count32, n-count32
		case uindex+count32 >= n:
			uindex, count32 = 0, uindex
		default:
			return listTrimRange(rd, items, ordered, uindex, count32)
		}
	}
	if count32 == 0 {
		switch rd.typ {
		case rtKey, rtKeyValue, rtUnorderedMap, rtOrderedMap:
			return nil, notApplicable("list result type")
		}
		if !rd.setNotFound(int64(uindex)) {
			return nil, notApplicable("list result type")
		}
		return nil, nil
	}
	removed := items[uindex : uindex+count32]
	kept := append(append([]any{}, items[:uindex]...), items[uindex+count32:]...)
	switch rd.typ {
	case rtNone:
	case rtIndex, rtReverseIndex:
		return kept, rd.setIndexRankCount(uindex, count32, n)
	case rtRank, rtReverseRank:
		if len(kept) == 0 {
			return kept, rd.setIndexRankCount(0, count32, n)
		}
		rank := func(i int) int {
			if ordered {
				return uindex + i
			}
			return listUnorderedRank(items, removed[i])
		}
		rev := func(r int) int64 {
			if rd.typ == rtReverseRank {
				return int64(n - r - 1)
			}
			return int64(r)
		}
		if !rd.multi {
			rd.val = rev(rank(0))
			break
		}
		if ordered {
			rd.val = &listVal{items: nonNilItems(intRange(nil, uindex, count32, n, rd.typ == rtReverseRank))}
			break
		}
		out := []any{}
		for i := range removed {
			out = append(out, rev(rank(i)))
		}
		rd.val = &listVal{items: out}
	case rtCount:
		rd.val = int64(count32)
	case rtExists:
		rd.val = count32 != 0
	case rtValue:
		if rd.multi {
			rd.val = &listVal{items: append([]any{}, removed...)}
		} else {
			rd.val = removed[0]
		}
	default:
		return nil, notApplicable("list result type")
	}
	return kept, nil
}

// listTrimRange is packed_list_trim: keep [index, index+count).
func listTrimRange(rd *resultData, items []any, ordered bool, index, count int) ([]any, *opError) {
	n := len(items)
	rmCount := n - count
	kept := append([]any{}, items[index:index+count]...)
	var removed []any
	removed = append(removed, items[:index]...)
	removed = append(removed, items[index+count:]...)
	switch rd.typ {
	case rtNone:
	case rtCount:
		rd.val = int64(rmCount)
	case rtExists:
		rd.val = rmCount != 0
	case rtIndex, rtReverseIndex:
		rev := rd.typ == rtReverseIndex
		out := intRange(nil, 0, index, n, rev)
		out = intRange(out, index+count, n-index-count, n, rev)
		rd.val = &listVal{items: nonNilItems(out)}
	case rtRank, rtReverseRank:
		rev := rd.typ == rtReverseRank
		var out []any
		if ordered {
			out = intRange(nil, 0, index, n, rev)
			out = intRange(out, index+count, rmCount-index, n, rev)
		} else {
			for _, v := range removed {
				r := listUnorderedRank(items, v)
				if rev {
					r = n - r - 1
				}
				out = append(out, int64(r))
			}
		}
		rd.val = &listVal{items: nonNilItems(out)}
	case rtValue:
		rd.val = &listVal{items: nonNilItems(removed)}
	default:
		return nil, notApplicable("list trim result type")
	}
	return kept, nil
}

// listInsertAt is packed_list_insert for an unordered list.
func listInsertAt(newList func([]any) *listVal, items []any, index int64, vals []any, isList bool, mod int64) (any, any, bool, *opError) {
	n := int64(len(items))
	if isList && len(vals) == 0 {
		return newList(items), n, true, nil
	}
	if index > 1<<31-1 {
		return nil, nil, false, fail(rcOpNotApplicable, "cdt list insert: index out of bounds")
	}
	if index < 0 {
		index += n
		if index < 0 {
			return nil, nil, false, fail(rcOpNotApplicable, "cdt list insert: index out of bounds")
		}
	}
	noFail := mod&listWriteNoFail != 0
	if mod&listWriteInsertBounded != 0 && index > n {
		if noFail {
			return nil, n, false, nil
		}
		return nil, nil, false, fail(rcOpNotApplicable, "cdt list insert: index beyond the end of a bounded list")
	}
	add := vals
	if mod&listWriteAddUnique != 0 {
		partial := noFail && mod&listWritePartial != 0
		add = nil
		for i, v := range vals {
			dupInList := listContains(items, v)
			dupInItems := listContains(vals[:i], v)
			switch {
			case dupInList || dupInItems:
				if dupInItems && !dupInList && !noFail {
					return nil, nil, false, fail(rcOpNotApplicable, "cdt list insert: duplicate items")
				}
				if !partial {
					if noFail {
						return nil, n, false, nil
					}
					return nil, nil, false, fail(rcElementExists, "cdt list: element exists")
				}
			default:
				add = append(add, v)
			}
		}
		if len(add) == 0 {
			if noFail {
				return nil, n, false, nil
			}
			return nil, nil, false, fail(rcElementExists, "cdt list: element exists")
		}
	}
	var out []any
	if index >= n {
		out = append(out, items...)
		for i := n; i < index; i++ {
			out = append(out, nil)
		}
		out = append(out, add...)
	} else {
		out = append(out, items[:index]...)
		out = append(out, add...)
		out = append(out, items[index:]...)
	}
	return newList(out), int64(len(out)), true, nil
}

func listContains(items []any, v any) bool {
	for _, x := range items {
		if typeRank(x) == typeRank(v) && compareValues(x, v) == 0 {
			return true
		}
	}
	return false
}

// listAddOrdered is packed_list_add_ordered / add_items_ordered: insert
// each value at its sorted position.
func listAddOrdered(newList func([]any) *listVal, items, vals []any, mod int64) (any, any, bool, *opError) {
	out := append([]any{}, items...)
	unique := mod&listWriteAddUnique != 0
	noFail := mod&listWriteNoFail != 0
	added := 0
	for _, v := range vals {
		if unique && listContains(out, v) {
			if noFail && mod&listWritePartial != 0 {
				continue
			}
			if noFail {
				return nil, int64(len(items)), false, nil
			}
			return nil, nil, false, fail(rcElementExists, "cdt list: element exists")
		}
		i := sort.Search(len(out), func(i int) bool { return compareValues(out[i], v) > 0 })
		out = append(out, nil)
		copy(out[i+1:], out[i:])
		out[i] = v
		added++
	}
	if added == 0 && len(vals) > 0 {
		return nil, int64(len(items)), false, nil
	}
	return newList(out), int64(len(out)), true, nil
}

// listSetAt is list_set.
func listSetAt(newList func([]any) *listVal, items []any, ordered bool, index int64, v any, mod int64) (any, any, bool, *opError) {
	if ordered {
		return nil, nil, false, fail(rcOpNotApplicable, "cdt list set on an ordered list")
	}
	n := int64(len(items))
	if index >= n {
		nl, _, _, err := listInsertAt(newList, items, index, []any{v}, false, mod)
		return nl, nil, err == nil, err
	}
	if index < 0 {
		index += n
		if index < 0 {
			return nil, nil, false, fail(rcOpNotApplicable, "cdt list set: index out of bounds")
		}
	}
	if mod&listWriteAddUnique != 0 {
		for i, x := range items {
			if int64(i) != index && typeRank(x) == typeRank(v) && compareValues(x, v) == 0 {
				if mod&listWriteNoFail != 0 {
					return nil, nil, false, nil
				}
				return nil, nil, false, fail(rcElementExists, "cdt list: element exists")
			}
		}
	}
	out := append([]any{}, items...)
	out[index] = v
	return newList(out), nil, true, nil
}

// listByValue is packed_list_get_remove_by_value_interval for one value. It
// returns the elements that remain (nil when nothing is removed).
func listByValue(rd *resultData, items []any, ordered bool, v any) ([]any, *opError) {
	n := len(items)
	if rd.inverted && !rd.multi {
		return nil, notApplicable("INVERTED with a single result op")
	}
	if ordered {
		rank, count := 0, 0
		for _, x := range items {
			switch c := compareValues(x, v); {
			case c < 0:
				rank++
			case c == 0:
				count++
			}
		}
		if count == 0 && !rd.multi {
			switch rd.typ {
			case rtKey, rtKeyValue, rtUnorderedMap, rtOrderedMap:
				return nil, notApplicable("list result type")
			}
			rd.setNotFound(0)
			return nil, nil
		}
		if !rd.multi {
			count = 1
		}
		return listByIndexRange(rd, items, true, int64(rank), uint64(count))
	}
	mask := make([]bool, n)
	rank, count, first := 0, 0, -1
	for i, x := range items {
		c := compareValues(x, v)
		switch {
		case c < 0:
			rank++
			if rd.inverted {
				mask[i] = true
				count++
			}
		case c == 0:
			if rd.multi {
				if !rd.inverted {
					mask[i] = true
					count++
				}
			} else if count == 0 {
				first = i
				count++
			}
		case rd.inverted && rd.multi:
			mask[i] = true
			count++
		}
	}
	if first >= 0 {
		mask[first] = true
	}
	var kept []any
	if count != 0 {
		kept = []any{}
		for i, x := range items {
			if !mask[i] {
				kept = append(kept, x)
			}
		}
	}
	switch rd.typ {
	case rtNone, rtCount, rtExists, rtRank, rtReverseRank:
		c := count
		if rd.inverted {
			c = n - count
		}
		return kept, rd.setRange(rank, c, n)
	case rtIndex, rtReverseIndex:
		if rd.multi {
			(&mapCtx{pairs: make([]mapPair, n)}).intListByMask(rd, mask, count)
			return kept, nil
		}
		return kept, rd.setIndexRankCount(max(first, 0), count, n)
	case rtValue:
		if rd.multi {
			out := []any{}
			for i, x := range items {
				if mask[i] {
					out = append(out, x)
				}
			}
			rd.val = &listVal{items: out}
		} else if count != 0 {
			rd.val = items[first]
		}
		return kept, nil
	}
	return nil, notApplicable("list result type")
}
