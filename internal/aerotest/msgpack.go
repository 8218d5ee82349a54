package aerotest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Particle types used on the wire (op particle byte and the first byte of
// msgpack strings holding values).
const (
	ptNull    = 0
	ptInteger = 1
	ptFloat   = 2
	ptString  = 3
	ptBlob    = 4
	ptBool    = 17
	ptHLL     = 18
	ptMap     = 19
	ptList    = 20
	ptGeoJSON = 23
)

// The decoded value model shared by bins, CDT payloads and expressions:
//
//	nil, bool, int64, float64, string, blobVal, *listVal, *mapVal, extVal
type blobVal struct {
	ptype byte // particle type carried by the msgpack string prefix (BLOB, GEOJSON, HLL ...)
	b     string
}

type listVal struct {
	flags byte // list order flags from the ext header (0 = unordered)
	items []any
}

type mapPair struct {
	k, v any
}

type mapVal struct {
	flags byte // map order flags from the ext header: 0 unordered, 1 key ordered, 3 key-value ordered
	pairs []mapPair
}

// extVal is a msgpack ext value (the client uses ext type 0xff for
// WILDCARD (data 0x00) and INFINITY (data 0x01)).
type extVal struct {
	typ  int8
	data string
}

func isInfinity(v any) bool {
	e, ok := v.(extVal)
	return ok && e.typ == -1 && e.data == "\x01"
}

func isWildcard(v any) bool {
	e, ok := v.(extVal)
	return ok && e.typ == -1 && e.data == "\x00"
}

var errMsgpack = errors.New("malformed msgpack")

type mpReader struct {
	b   []byte
	off int
	// raw: decode strings without a particle-type prefix (expression bin names)
}

func (r *mpReader) need(n int) error {
	if n < 0 || r.off+n > len(r.b) {
		return errMsgpack
	}
	return nil
}

func (r *mpReader) u8() (byte, error) {
	if err := r.need(1); err != nil {
		return 0, err
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *mpReader) bytesN(n int) ([]byte, error) {
	if err := r.need(n); err != nil {
		return nil, err
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

func (r *mpReader) uintN(n int) (uint64, error) {
	s, err := r.bytesN(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range s {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// peekArrayLen reports whether the next value is an array and its length,
// without consuming anything.
func (r *mpReader) peekIsArray() bool {
	if r.off >= len(r.b) {
		return false
	}
	c := r.b[r.off]
	return c&0xf0 == 0x90 || c == 0xdc || c == 0xdd
}

func (r *mpReader) readArrayLen() (int, error) {
	c, err := r.u8()
	if err != nil {
		return 0, err
	}
	switch {
	case c&0xf0 == 0x90:
		return int(c & 0x0f), nil
	case c == 0xdc:
		v, err := r.uintN(2)
		return int(v), err
	case c == 0xdd:
		v, err := r.uintN(4)
		return int(v), err
	}
	return 0, fmt.Errorf("%w: expected array, got 0x%02x", errMsgpack, c)
}

// decode reads one value. Strings are decoded with their particle prefix
// unless raw is set.
func (r *mpReader) decode() (any, error) { return r.decodeV(false) }

func (r *mpReader) decodeRaw() (any, error) { return r.decodeV(true) }

func (r *mpReader) decodeV(raw bool) (any, error) {
	c, err := r.u8()
	if err != nil {
		return nil, err
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c&0xe0 == 0xa0:
		return r.str(int(c&0x1f), raw)
	case c&0xf0 == 0x90:
		return r.list(int(c & 0x0f))
	case c&0xf0 == 0x80:
		return r.mapN(int(c & 0x0f))
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6:
		n, err := r.uintN(1 << (c - 0xc4))
		if err != nil {
			return nil, err
		}
		s, err := r.bytesN(int(n))
		if err != nil {
			return nil, err
		}
		return blobVal{ptype: ptBlob, b: string(s)}, nil
	case 0xc7, 0xc8, 0xc9:
		n, err := r.uintN(1 << (c - 0xc7))
		if err != nil {
			return nil, err
		}
		t, err := r.u8()
		if err != nil {
			return nil, err
		}
		s, err := r.bytesN(int(n))
		if err != nil {
			return nil, err
		}
		return extVal{typ: int8(t), data: string(s)}, nil
	case 0xca:
		v, err := r.uintN(4)
		return float64(math.Float32frombits(uint32(v))), err
	case 0xcb:
		v, err := r.uintN(8)
		return math.Float64frombits(v), err
	case 0xcc, 0xcd, 0xce, 0xcf:
		v, err := r.uintN(1 << (c - 0xcc))
		return int64(v), err // uint64 > MaxInt64 wraps, as the server stores int64
	case 0xd0:
		v, err := r.uintN(1)
		return int64(int8(v)), err
	case 0xd1:
		v, err := r.uintN(2)
		return int64(int16(v)), err
	case 0xd2:
		v, err := r.uintN(4)
		return int64(int32(v)), err
	case 0xd3:
		v, err := r.uintN(8)
		return int64(v), err
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		t, err := r.u8()
		if err != nil {
			return nil, err
		}
		s, err := r.bytesN(1 << (c - 0xd4))
		if err != nil {
			return nil, err
		}
		return extVal{typ: int8(t), data: string(s)}, nil
	case 0xd9, 0xda, 0xdb:
		n, err := r.uintN(1 << (c - 0xd9))
		if err != nil {
			return nil, err
		}
		return r.str(int(n), raw)
	case 0xdc, 0xdd:
		n, err := r.uintN(2 << (c - 0xdc))
		if err != nil {
			return nil, err
		}
		return r.list(int(n))
	case 0xde, 0xdf:
		n, err := r.uintN(2 << (c - 0xde))
		if err != nil {
			return nil, err
		}
		return r.mapN(int(n))
	}
	return nil, fmt.Errorf("%w: unknown type byte 0x%02x", errMsgpack, c)
}

func (r *mpReader) str(n int, raw bool) (any, error) {
	s, err := r.bytesN(n)
	if err != nil {
		return nil, err
	}
	if raw || n == 0 {
		return string(s), nil
	}
	switch s[0] {
	case ptString:
		return string(s[1:]), nil
	default:
		return blobVal{ptype: s[0], b: string(s[1:])}, nil
	}
}

func (r *mpReader) list(n int) (any, error) {
	if n > len(r.b)-r.off {
		return nil, errMsgpack
	}
	l := &listVal{items: make([]any, 0, n)}
	for i := 0; i < n; i++ {
		v, err := r.decode()
		if err != nil {
			return nil, err
		}
		if i == 0 {
			if e, ok := v.(extVal); ok && e.data == "" {
				l.flags = byte(e.typ)
				continue
			}
		}
		l.items = append(l.items, v)
	}
	return l, nil
}

func (r *mpReader) mapN(n int) (any, error) {
	if n > len(r.b)-r.off {
		return nil, errMsgpack
	}
	m := &mapVal{pairs: make([]mapPair, 0, n)}
	for i := 0; i < n; i++ {
		k, err := r.decode()
		if err != nil {
			return nil, err
		}
		v, err := r.decode()
		if err != nil {
			return nil, err
		}
		if i == 0 {
			if e, ok := k.(extVal); ok && e.data == "" {
				m.flags = byte(e.typ)
				continue
			}
		}
		m.pairs = append(m.pairs, mapPair{k, v})
	}
	return m, nil
}

// normalizeValue rewrites a value received from a client as the server's
// cdt_untrusted_rewrite does (cdt.c): every map, at any depth, is stored
// sorted by key (an unordered one is sorted, a key-ordered one must arrive
// sorted), duplicate map keys are refused, and an ordered list must arrive
// sorted. So a map read back comes out in key order whatever order the
// client sent.
func normalizeValue(v any) (any, error) {
	switch x := v.(type) {
	case *listVal:
		out := &listVal{flags: x.flags, items: make([]any, len(x.items))}
		for i, it := range x.items {
			n, err := normalizeValue(it)
			if err != nil {
				return nil, err
			}
			out.items[i] = n
			if i > 0 && x.flags&1 != 0 && compareValues(out.items[i-1], n) > 0 {
				return nil, errors.New("list not ordered as expected")
			}
		}
		return out, nil
	case *mapVal:
		out := &mapVal{flags: x.flags, pairs: make([]mapPair, len(x.pairs))}
		for i, p := range x.pairs {
			k, err := normalizeValue(p.k)
			if err != nil {
				return nil, err
			}
			val, err := normalizeValue(p.v)
			if err != nil {
				return nil, err
			}
			out.pairs[i] = mapPair{k, val}
		}
		sorted := sort.SliceIsSorted(out.pairs, func(i, j int) bool { return compareValues(out.pairs[i].k, out.pairs[j].k) < 0 })
		if !sorted {
			if x.flags&1 != 0 {
				return nil, errors.New("map not ordered as expected")
			}
			out.sortByKey()
		}
		for i := 1; i < len(out.pairs); i++ {
			if keyEq(out.pairs[i-1].k, out.pairs[i].k) {
				return nil, errors.New("map has duplicate keys")
			}
		}
		return out, nil
	}
	return v, nil
}

// decodeMsgpack decodes exactly one value from b.
func decodeMsgpack(b []byte) (any, error) {
	r := &mpReader{b: b}
	v, err := r.decode()
	if err != nil {
		return nil, err
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", errMsgpack, len(b)-r.off)
	}
	return v, nil
}

// ---- encoding ----

type mpWriter struct {
	bytes.Buffer
}

func (w *mpWriter) uint(prefix byte, n int, v uint64) {
	w.WriteByte(prefix)
	for i := n - 1; i >= 0; i-- {
		w.WriteByte(byte(v >> (8 * i)))
	}
}

func (w *mpWriter) int(v int64) {
	switch {
	case v >= 0 && v <= 0x7f:
		w.WriteByte(byte(v))
	case v < 0 && v >= -32:
		w.WriteByte(byte(int8(v)))
	case v >= 0 && v <= math.MaxUint8:
		w.uint(0xcc, 1, uint64(v))
	case v >= 0 && v <= math.MaxUint16:
		w.uint(0xcd, 2, uint64(v))
	case v >= 0 && v <= math.MaxUint32:
		w.uint(0xce, 4, uint64(v))
	case v >= 0:
		w.uint(0xcf, 8, uint64(v))
	case v >= math.MinInt8:
		w.uint(0xd0, 1, uint64(v))
	case v >= math.MinInt16:
		w.uint(0xd1, 2, uint64(v))
	case v >= math.MinInt32:
		w.uint(0xd2, 4, uint64(v))
	default:
		w.uint(0xd3, 8, uint64(v))
	}
}

func (w *mpWriter) strHeader(n int) {
	switch {
	case n < 32:
		w.WriteByte(0xa0 | byte(n))
	case n < 256:
		w.uint(0xd9, 1, uint64(n))
	case n < 65536:
		w.uint(0xda, 2, uint64(n))
	default:
		w.uint(0xdb, 4, uint64(n))
	}
}

func (w *mpWriter) arrayHeader(n int) {
	switch {
	case n < 16:
		w.WriteByte(0x90 | byte(n))
	case n < 65536:
		w.uint(0xdc, 2, uint64(n))
	default:
		w.uint(0xdd, 4, uint64(n))
	}
}

func (w *mpWriter) mapHeader(n int) {
	switch {
	case n < 16:
		w.WriteByte(0x80 | byte(n))
	case n < 65536:
		w.uint(0xde, 2, uint64(n))
	default:
		w.uint(0xdf, 4, uint64(n))
	}
}

func (w *mpWriter) encode(v any) {
	switch x := v.(type) {
	case nil:
		w.WriteByte(0xc0)
	case bool:
		if x {
			w.WriteByte(0xc3)
		} else {
			w.WriteByte(0xc2)
		}
	case int64:
		w.int(x)
	case int:
		w.int(int64(x))
	case float64:
		w.uint(0xcb, 8, math.Float64bits(x))
	case string:
		w.strHeader(len(x) + 1)
		w.WriteByte(ptString)
		w.WriteString(x)
	case blobVal:
		w.strHeader(len(x.b) + 1)
		w.WriteByte(x.ptype)
		w.WriteString(x.b)
	case extVal:
		switch len(x.data) {
		case 1, 2, 4, 8, 16:
			w.WriteByte(0xd4 + byte(bitsLen(len(x.data))))
		default:
			w.uint(0xc7, 1, uint64(len(x.data)))
		}
		w.WriteByte(byte(x.typ))
		w.WriteString(x.data)
	case *listVal:
		n := len(x.items)
		if x.flags != 0 {
			n++
		}
		w.arrayHeader(n)
		if x.flags != 0 {
			w.Write([]byte{0xc7, 0, x.flags})
		}
		for _, it := range x.items {
			w.encode(it)
		}
	case *mapVal:
		n := len(x.pairs)
		if x.flags != 0 {
			n++
		}
		w.mapHeader(n)
		if x.flags != 0 {
			w.Write([]byte{0xc7, 0, x.flags, 0xc0})
		}
		for _, p := range x.pairs {
			w.encode(p.k)
			w.encode(p.v)
		}
	default:
		panic(fmt.Sprintf("aerotest: cannot encode %T", v))
	}
}

func bitsLen(n int) int {
	i := 0
	for n > 1 {
		n >>= 1
		i++
	}
	return i
}

func encodeMsgpack(v any) []byte {
	var w mpWriter
	w.encode(v)
	return w.Bytes()
}

// ---- ordering (Aerospike msgpack order: NIL < BOOL < INT < STRING < LIST <
// MAP < BYTES < FLOAT < GEOJSON < INFINITY; WILDCARD matches anything) ----

func typeRank(v any) int {
	switch x := v.(type) {
	case nil:
		return 1
	case bool:
		return 2
	case int64, int:
		return 3
	case string:
		return 4
	case *listVal:
		return 5
	case *mapVal:
		return 6
	case blobVal:
		if x.ptype == ptGeoJSON {
			return 9
		}
		return 7
	case float64:
		return 8
	case extVal:
		if isWildcard(v) {
			return 0
		}
		return 10
	}
	return 11
}

// compareValues orders two values the way the server orders CDT elements.
func compareValues(a, b any) int {
	if isWildcard(a) || isWildcard(b) {
		return 0
	}
	ra, rb := typeRank(a), typeRank(b)
	if ra != rb {
		return cmpInt(ra, rb)
	}
	switch x := a.(type) {
	case bool:
		y := b.(bool)
		if x == y {
			return 0
		}
		if !x {
			return -1
		}
		return 1
	case int64:
		return cmpInt64(x, toInt64(b))
	case int:
		return cmpInt64(int64(x), toInt64(b))
	case string:
		return strings.Compare(x, b.(string))
	case blobVal:
		return strings.Compare(x.b, b.(blobVal).b)
	case float64:
		y := b.(float64)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	case *listVal:
		y := b.(*listVal)
		for i := 0; i < len(x.items) && i < len(y.items); i++ {
			if c := compareValues(x.items[i], y.items[i]); c != 0 {
				return c
			}
		}
		return cmpInt(len(x.items), len(y.items))
	case *mapVal:
		y := b.(*mapVal)
		if c := cmpInt(len(x.pairs), len(y.pairs)); c != 0 {
			return c
		}
		xs, ys := x.sortedPairs(), y.sortedPairs()
		for i := range xs {
			if c := compareValues(xs[i].k, ys[i].k); c != 0 {
				return c
			}
			if c := compareValues(xs[i].v, ys[i].v); c != 0 {
				return c
			}
		}
		return 0
	}
	return 0
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int:
		return int64(x)
	}
	return 0
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (m *mapVal) sortByKey() {
	sort.SliceStable(m.pairs, func(i, j int) bool { return compareValues(m.pairs[i].k, m.pairs[j].k) < 0 })
}

// sortedPairs returns the pairs in key order (a copy for unordered maps).
func (m *mapVal) sortedPairs() []mapPair {
	if m.flags&1 != 0 {
		return m.pairs
	}
	ps := append([]mapPair(nil), m.pairs...)
	sort.SliceStable(ps, func(i, j int) bool { return compareValues(ps[i].k, ps[j].k) < 0 })
	return ps
}

// find returns the index of key k, or -1. Stored maps are sorted by key.
func (m *mapVal) find(k any) int {
	i := sort.Search(len(m.pairs), func(i int) bool { return compareValues(m.pairs[i].k, k) >= 0 })
	if i < len(m.pairs) && keyEq(m.pairs[i].k, k) {
		return i
	}
	return -1
}

func (m *mapVal) clone() *mapVal {
	return &mapVal{flags: m.flags, pairs: append([]mapPair(nil), m.pairs...)}
}

// put inserts or replaces k. Maps are kept sorted by key whatever their
// order flag: the server inserts into an unordered map at the key's sorted
// position while the map is in key order (particle_map.c
// packed_map_find_key_maybe_unordered), and every map it stores is.
func (m *mapVal) put(k, v any) {
	if i := m.find(k); i >= 0 {
		m.pairs[i].v = v
		return
	}
	i := sort.Search(len(m.pairs), func(i int) bool { return compareValues(m.pairs[i].k, k) > 0 })
	m.pairs = append(m.pairs, mapPair{})
	copy(m.pairs[i+1:], m.pairs[i:])
	m.pairs[i] = mapPair{k, v}
}

// ---- bin particles <-> values ----

// particleToValue converts a bin particle (op value) to the value model.
func particleToValue(ptype byte, data []byte) (any, error) {
	switch ptype {
	case ptNull:
		return nil, nil
	case ptInteger:
		if len(data) != 8 {
			return nil, fmt.Errorf("integer particle of %d bytes", len(data))
		}
		return int64(binary.BigEndian.Uint64(data)), nil
	case ptFloat:
		if len(data) != 8 {
			return nil, fmt.Errorf("float particle of %d bytes", len(data))
		}
		return math.Float64frombits(binary.BigEndian.Uint64(data)), nil
	case ptString:
		return string(data), nil
	case ptBool:
		if len(data) != 1 {
			return nil, fmt.Errorf("bool particle of %d bytes", len(data))
		}
		return data[0] != 0, nil
	case ptMap, ptList:
		v, err := decodeMsgpack(data)
		if err != nil {
			return nil, err
		}
		switch v.(type) {
		case *mapVal:
			if ptype != ptMap {
				return nil, errors.New("list particle holds a map")
			}
		case *listVal:
			if ptype != ptList {
				return nil, errors.New("map particle holds a list")
			}
		default:
			return nil, errors.New("map/list particle holds a scalar")
		}
		return v, nil
	case ptBlob, ptGeoJSON, ptHLL:
		return blobVal{ptype: ptype, b: string(data)}, nil
	}
	return nil, fmt.Errorf("unsupported particle type %d", ptype)
}

// valueToParticle converts a value to a bin particle for a reply.
func valueToParticle(v any) (byte, []byte) {
	switch x := v.(type) {
	case nil:
		return ptNull, nil
	case bool:
		if x {
			return ptBool, []byte{1}
		}
		return ptBool, []byte{0}
	case int64:
		return ptInteger, binary.BigEndian.AppendUint64(nil, uint64(x))
	case int:
		return ptInteger, binary.BigEndian.AppendUint64(nil, uint64(int64(x)))
	case float64:
		return ptFloat, binary.BigEndian.AppendUint64(nil, math.Float64bits(x))
	case string:
		return ptString, []byte(x)
	case blobVal:
		return x.ptype, []byte(x.b)
	case *listVal:
		return ptList, encodeMsgpack(x)
	case *mapVal:
		return ptMap, encodeMsgpack(x)
	}
	panic(fmt.Sprintf("aerotest: no particle for %T", v))
}

// particleTypeOf reports the bin particle type of a stored value.
func particleTypeOf(v any) byte {
	switch x := v.(type) {
	case *listVal:
		return ptList
	case *mapVal:
		return ptMap
	case blobVal:
		return x.ptype
	}
	t, _ := valueToParticle(v)
	return t
}
