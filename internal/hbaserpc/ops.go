package hbaserpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc/pb"
)

// Cell is one value read from HBase.
type Cell struct {
	// Row is the row key.
	Row []byte
	// Family is the column family.
	Family []byte
	// Qualifier is the column qualifier.
	Qualifier []byte
	// Value is the cell's value.
	Value []byte
	// Timestamp is the cell's version, in milliseconds since the epoch.
	Timestamp int64
	// Type is CellPut for a value; only a raw read (Get.Raw) returns delete markers.
	Type CellType
}

// Column selects a whole family (Qualifier nil) or one column.
type Column struct {
	// Family is the column family.
	Family []byte
	// Qualifier is the column qualifier; nil selects the whole family.
	Qualifier []byte
}

// Get reads one row, optionally restricted to some columns.
type Get struct {
	// Row is the row key.
	Row []byte
	// Columns restricts the read; empty reads the whole row.
	Columns []Column
	// Raw, with MaxVersions, reads the row as stored: delete markers and the values
	// they hide, every version up to MaxVersions (see rawAttribute). Columns must
	// then be empty: HBase refuses a raw read of named columns.
	Raw bool
	// MaxVersions is how many versions of each column to return, newest first
	// (default 1). A raw read may return more versions than the family keeps.
	MaxVersions int
}

// Value is one cell to write.
type Value struct {
	// Family is the column family.
	Family []byte
	// Qualifier is the column qualifier.
	Qualifier []byte
	// Value is the value to store.
	Value []byte
}

// Delta is one counter to add to.
type Delta struct {
	// Family is the column family.
	Family []byte
	// Qualifier is the column qualifier.
	Qualifier []byte
	// Amount is added to the counter (an 8-byte big-endian integer; absent is 0).
	Amount int64
}

// Mutation is a change to one row: *Put, *Delete or *Increment.
type Mutation interface {
	mutationRow() []byte
	toProto(nonce uint64) (*pb.MutationProto, error)
	// needsNonce says whether a retry could apply the change twice.
	needsNonce() bool
}

// Put writes cells to a row.
type Put struct {
	// Row is the row key.
	Row []byte
	// Values are the cells to write.
	Values []Value
	// Timestamp, when positive, is the version of every written cell, in milliseconds
	// since the epoch (as a Java client's new Put(row, ts) sets it). Zero lets the
	// server stamp the cells with its current time.
	Timestamp int64
	// TTL, when positive, makes the written cells expire after it (HBase cell TTL,
	// the "_ttl" mutation attribute; millisecond resolution). A cell expires when
	// the server's clock passes its timestamp plus its TTL.
	TTL time.Duration
}

// Delete removes data from a row. HBase deletes by writing markers: a marker hides
// every version, present or future, whose timestamp is at or before the marker's.
type Delete struct {
	// Row is the row key.
	Row []byte
	// Columns selects what to delete: empty deletes the whole row; a Column with a
	// nil Qualifier deletes a family; otherwise every version of that column.
	Columns []Column
	// Timestamp, when positive, stamps the markers with it (milliseconds since the
	// epoch): only versions with a timestamp at or before it are deleted, and a cell
	// written later with a larger timestamp stays visible. Zero stamps them with the
	// server's current time, which also hides a Put of the same millisecond, and a
	// Put stamped by a client whose clock is behind the server's.
	Timestamp int64
}

// Increment adds to counters of a row atomically and returns their new values.
//
// HBase (2.x) stamps each updated counter with max(server time, its previous version's
// timestamp + 1), and a counter it creates with the server time (or with Timestamp).
// An Increment without a TTL carries the TTL of the counter's previous version
// forward, counted from the new version's timestamp; one with a TTL replaces it.
type Increment struct {
	// Row is the row key.
	Row []byte
	// Deltas are the counters and amounts.
	Deltas []Delta
	// Timestamp, when positive, is the version (milliseconds since the epoch) of each
	// counter the Increment creates: HBase keeps an explicit timestamp for a counter
	// that does not exist yet, and stamps one that exists max(server time, previous
	// version + 1) whatever Timestamp says. Zero: the server's time.
	Timestamp int64
	// TTL, when positive, makes the updated cells expire after it.
	TTL time.Duration
	// SkipWAL skips the write-ahead log (durability SKIP_WAL): the change is lost if
	// the region server dies before a flush. For scratch cells only.
	SkipWAL bool
}

func (p *Put) mutationRow() []byte       { return p.Row }
func (d *Delete) mutationRow() []byte    { return d.Row }
func (i *Increment) mutationRow() []byte { return i.Row }
func (p *Put) needsNonce() bool          { return false }
func (d *Delete) needsNonce() bool       { return false }
func (i *Increment) needsNonce() bool    { return true }

// ttlAttribute is HBase's Mutation.setTTL encoding: attribute "_ttl" holding
// Bytes.toBytes(long milliseconds).
func ttlAttribute(ttl time.Duration) *pb.NameBytesPair {
	ms := ttl.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return &pb.NameBytesPair{Name: proto.String("_ttl"), Value: binary.BigEndian.AppendUint64(nil, uint64(ms))}
}

// groupByFamily builds ColumnValues, one per family, in first-seen order.
func groupByFamily(n int, at func(i int) ([]byte, *pb.MutationProto_ColumnValue_QualifierValue)) []*pb.MutationProto_ColumnValue {
	var out []*pb.MutationProto_ColumnValue
	idx := map[string]int{}
	for i := 0; i < n; i++ {
		fam, qv := at(i)
		j, ok := idx[string(fam)]
		if !ok {
			j = len(out)
			idx[string(fam)] = j
			out = append(out, &pb.MutationProto_ColumnValue{Family: fam})
		}
		out[j].QualifierValue = append(out[j].QualifierValue, qv)
	}
	return out
}

func (p *Put) toProto(nonce uint64) (*pb.MutationProto, error) {
	if len(p.Row) == 0 {
		return nil, errors.New("put: empty row")
	}
	if len(p.Values) == 0 {
		return nil, errors.New("put: no values")
	}
	for _, v := range p.Values {
		if len(v.Family) == 0 {
			return nil, errors.New("put: empty family")
		}
	}
	if p.Timestamp < 0 {
		return nil, errors.New("put: negative timestamp")
	}
	m := &pb.MutationProto{
		Row:        p.Row,
		MutateType: pb.MutationProto_PUT.Enum(),
		ColumnValue: groupByFamily(len(p.Values), func(i int) ([]byte, *pb.MutationProto_ColumnValue_QualifierValue) {
			v := p.Values[i]
			qv := &pb.MutationProto_ColumnValue_QualifierValue{Qualifier: nonNil(v.Qualifier), Value: nonNil(v.Value)}
			if p.Timestamp > 0 {
				qv.Timestamp = proto.Uint64(uint64(p.Timestamp))
			}
			return v.Family, qv
		}),
	}
	if p.Timestamp > 0 {
		m.Timestamp = proto.Uint64(uint64(p.Timestamp))
	}
	if p.TTL > 0 {
		m.Attribute = append(m.Attribute, ttlAttribute(p.TTL))
	}
	if nonce != 0 {
		m.Nonce = proto.Uint64(nonce)
	}
	return m, nil
}

func (d *Delete) toProto(nonce uint64) (*pb.MutationProto, error) {
	if len(d.Row) == 0 {
		return nil, errors.New("delete: empty row")
	}
	if d.Timestamp < 0 {
		return nil, errors.New("delete: negative timestamp")
	}
	ts := uint64(math.MaxInt64) // HConstants.LATEST_TIMESTAMP: "now"
	if d.Timestamp > 0 {
		ts = uint64(d.Timestamp)
	}
	m := &pb.MutationProto{
		Row:        d.Row,
		MutateType: pb.MutationProto_DELETE.Enum(),
		Timestamp:  proto.Uint64(ts),
	}
	for _, c := range d.Columns {
		if len(c.Family) == 0 {
			return nil, errors.New("delete: empty family")
		}
	}
	m.ColumnValue = groupByFamily(len(d.Columns), func(i int) ([]byte, *pb.MutationProto_ColumnValue_QualifierValue) {
		c := d.Columns[i]
		qv := &pb.MutationProto_ColumnValue_QualifierValue{Timestamp: proto.Uint64(ts)}
		if c.Qualifier == nil {
			qv.DeleteType = pb.MutationProto_DELETE_FAMILY.Enum()
		} else {
			qv.Qualifier = c.Qualifier
			qv.DeleteType = pb.MutationProto_DELETE_MULTIPLE_VERSIONS.Enum()
		}
		return c.Family, qv
	})
	if nonce != 0 {
		m.Nonce = proto.Uint64(nonce)
	}
	return m, nil
}

func (inc *Increment) toProto(nonce uint64) (*pb.MutationProto, error) {
	if len(inc.Row) == 0 {
		return nil, errors.New("increment: empty row")
	}
	if len(inc.Deltas) == 0 {
		return nil, errors.New("increment: no deltas")
	}
	for _, d := range inc.Deltas {
		if len(d.Family) == 0 {
			return nil, errors.New("increment: empty family")
		}
	}
	if inc.Timestamp < 0 {
		return nil, errors.New("increment: negative timestamp")
	}
	m := &pb.MutationProto{
		Row:        inc.Row,
		MutateType: pb.MutationProto_INCREMENT.Enum(),
		ColumnValue: groupByFamily(len(inc.Deltas), func(i int) ([]byte, *pb.MutationProto_ColumnValue_QualifierValue) {
			d := inc.Deltas[i]
			qv := &pb.MutationProto_ColumnValue_QualifierValue{
				Qualifier: nonNil(d.Qualifier),
				Value:     binary.BigEndian.AppendUint64(nil, uint64(d.Amount)),
			}
			if inc.Timestamp > 0 {
				qv.Timestamp = proto.Uint64(uint64(inc.Timestamp))
			}
			return d.Family, qv
		}),
	}
	if inc.TTL > 0 {
		m.Attribute = append(m.Attribute, ttlAttribute(inc.TTL))
	}
	if inc.SkipWAL {
		m.Durability = pb.MutationProto_SKIP_WAL.Enum()
	}
	if nonce != 0 {
		m.Nonce = proto.Uint64(nonce)
	}
	return m, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Int64 decodes a counter value (8 bytes, big-endian), as returned by Increment.
func Int64(v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("counter value has %d bytes, want 8", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func toGetProto(row []byte, cols []Column) *pb.Get {
	g := &pb.Get{Row: row}
	idx := map[string]int{}
	for _, c := range cols {
		j, ok := idx[string(c.Family)]
		if !ok {
			j = len(g.Column)
			idx[string(c.Family)] = j
			g.Column = append(g.Column, &pb.Column{Family: c.Family})
		}
		if c.Qualifier != nil {
			g.Column[j].Qualifier = append(g.Column[j].Qualifier, c.Qualifier)
		}
	}
	// A family asked for whole wins over single qualifiers of it.
	for _, c := range cols {
		if c.Qualifier == nil {
			g.Column[idx[string(c.Family)]].Qualifier = nil
		}
	}
	return g
}

func cellsFromResult(r *pb.Result) []Cell {
	if r == nil || len(r.GetCell()) == 0 {
		return nil
	}
	out := make([]Cell, len(r.GetCell()))
	for i, c := range r.GetCell() {
		out[i] = Cell{
			Row:       c.GetRow(),
			Family:    c.GetFamily(),
			Qualifier: c.GetQualifier(),
			Value:     c.GetValue(),
			Timestamp: int64(c.GetTimestamp()),
			Type:      CellType(c.GetCellType()),
		}
	}
	return out
}

func validTable(op, table string) error {
	if table == "" {
		return driver.Errorf(dcsync.InvalidArgument, op, "empty table name")
	}
	return nil
}

// onRegion runs fn against the region of table holding row, re-locating the region
// and retrying as the retry policy allows.
func (c *Client) onRegion(ctx context.Context, op, table string, row []byte, idempotent bool, fn func(context.Context, *Region) error) error {
	return c.retry(ctx, op, idempotent, func(ctx context.Context) error {
		r, err := c.locate(ctx, table, row)
		if err != nil {
			return err
		}
		if err := fn(ctx, r); err != nil {
			c.noteFailure(r, err)
			return err
		}
		return nil
	})
}

// Get reads row from table. cols restricts the read (none: the whole row). A missing
// row yields no cells and no error.
func (c *Client) Get(ctx context.Context, table string, row []byte, cols ...Column) ([]Cell, error) {
	const op = "hbase.Get"
	if err := validTable(op, table); err != nil {
		return nil, err
	}
	if len(row) == 0 {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "empty row")
	}
	var cells []Cell
	err := c.onRegion(ctx, op, table, row, true, func(ctx context.Context, r *Region) error {
		resp := &pb.GetResponse{}
		req := &pb.GetRequest{Region: regionSpec(r), Get: toGetProto(row, cols)}
		if err := c.rpc(ctx, r.Server, serviceClient, "Get", req, resp); err != nil {
			return err
		}
		cells = cellsFromResult(resp.GetResult())
		return nil
	})
	return cells, err
}

// Put writes p to table. It is retried after a lost reply (writing the same cells
// again is harmless).
func (c *Client) Put(ctx context.Context, table string, p *Put) error {
	_, err := c.mutate(ctx, "hbase.Put", table, p)
	return err
}

// Delete applies d to table.
func (c *Client) Delete(ctx context.Context, table string, d *Delete) error {
	_, err := c.mutate(ctx, "hbase.Delete", table, d)
	return err
}

// Increment adds inc's deltas to table and returns the cells with the new values
// (decode them with Int64). It carries a nonce, reused by every retry of the call,
// so a retry after a lost reply is not applied twice.
func (c *Client) Increment(ctx context.Context, table string, inc *Increment) ([]Cell, error) {
	return c.mutate(ctx, "hbase.Increment", table, inc)
}

func (c *Client) mutate(ctx context.Context, op, table string, m Mutation) ([]Cell, error) {
	if err := validTable(op, table); err != nil {
		return nil, err
	}
	var nonce uint64
	if m.needsNonce() {
		nonce = c.newNonce()
	}
	mp, err := m.toProto(nonce)
	if err != nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "%v", err)
	}
	req := &pb.MutateRequest{Mutation: mp}
	if nonce != 0 {
		req.NonceGroup = proto.Uint64(c.nonceGroup)
	}
	var cells []Cell
	// With a nonce, a retry of an in-doubt attempt is deduplicated by the server.
	idempotent := !m.needsNonce() || nonce != 0 || c.noNonces
	err = c.onRegion(ctx, op, table, mp.Row, idempotent, func(ctx context.Context, r *Region) error {
		req.Region = regionSpec(r)
		resp := &pb.MutateResponse{}
		if err := c.rpc(ctx, r.Server, serviceClient, "Mutate", req, resp); err != nil {
			return err
		}
		cells = cellsFromResult(resp.GetResult())
		return nil
	})
	return cells, err
}

// Condition is the check of CheckAndMutate: on one column of the mutated row, or (IfAll)
// on several.
type Condition struct {
	// Family is the column family checked.
	Family []byte
	// Qualifier is the column qualifier checked.
	Qualifier []byte
	// Value is the value the column must hold (when Absent and Present are false).
	Value []byte
	// Absent, when true, requires the column to be absent instead.
	Absent bool
	// Present, when true, requires the column to exist with a non-empty value.
	Present bool
	// all, when set (IfAll), replaces the single-column check.
	all []Condition
}

// IfAbsent is a Condition that the column does not exist. (As in HBase, a column
// holding an empty value counts as absent.)
func IfAbsent(family, qualifier []byte) Condition {
	return Condition{Family: family, Qualifier: qualifier, Absent: true}
}

// IfPresent is a Condition that the column exists with a non-empty value (HBase's
// check "NOT_EQUAL to nothing").
func IfPresent(family, qualifier []byte) Condition {
	return Condition{Family: family, Qualifier: qualifier, Present: true}
}

// IfEquals is a Condition that the column holds exactly value.
func IfEquals(family, qualifier, value []byte) Condition {
	return Condition{Family: family, Qualifier: qualifier, Value: value}
}

// IfAll is a Condition that every one of conds holds. Each must be an IfEquals,
// IfAbsent or IfPresent on one column; they are checked together, on the latest
// version of each column, as one HBase filter (a FilterList of
// SingleColumnValueFilters; HBase 2.4+). As single conditions, IfAbsent holds for a
// column that is missing or holds an empty value, and IfPresent for one with a
// non-empty value. The row must hold at least one cell for any IfAll to hold (HBase
// applies the filter to the row's cells: an empty row passes no filter).
func IfAll(conds ...Condition) Condition {
	return Condition{all: conds}
}

// columns returns the columns cond reads.
func (cond Condition) columns() []Column {
	if len(cond.all) > 0 {
		var out []Column
		for _, c := range cond.all {
			out = append(out, Column{Family: c.Family, Qualifier: c.Qualifier})
		}
		return out
	}
	return []Column{{Family: cond.Family, Qualifier: cond.Qualifier}}
}

// binaryComparator is a serialised BinaryComparator; a nil value compares as "no
// value" (HBase 2.x encodes ifNotExists() that way).
func binaryComparator(value []byte) (*pb.Comparator, error) {
	comparable := &pb.ByteArrayComparable{Value: value}
	ser, err := proto.Marshal(&pb.BinaryComparator{Comparable: comparable})
	if err != nil {
		return nil, err
	}
	return &pb.Comparator{Name: proto.String("org.apache.hadoop.hbase.filter.BinaryComparator"), SerializedComparator: ser}, nil
}

// HBase filter class names and the wire numbers of Filter.proto's SingleColumnValueFilter
// and FilterList (encoded by hand: the generated subset does not declare them).
const (
	filterSCVF          = "org.apache.hadoop.hbase.filter.SingleColumnValueFilter"
	filterList          = "org.apache.hadoop.hbase.filter.FilterList"
	filterListPassAll   = 1 // FilterList.Operator.MUST_PASS_ALL
	compareTypeEqual    = 2 // CompareType.EQUAL
	scvfFamily          = 1
	scvfQualifier       = 2
	scvfCompareOp       = 3
	scvfComparator      = 4
	scvfFilterIfMissing = 5
	scvfLatestVersion   = 6
	filterListOperator  = 1
	filterListFilters   = 2
	filterName          = 1
	filterSerialized    = 2
)

func appendFilter(b []byte, field protowire.Number, name string, ser []byte) []byte {
	var f []byte
	f = protowire.AppendTag(f, filterName, protowire.BytesType)
	f = protowire.AppendString(f, name)
	f = protowire.AppendTag(f, filterSerialized, protowire.BytesType)
	f = protowire.AppendBytes(f, ser)
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, f)
}

// allFilter encodes conds as FilterList(MUST_PASS_ALL) of one
// SingleColumnValueFilter(family, qualifier, op, comparator, filterIfMissing,
// latestVersionOnly=true) each: a row passes only when every one holds. A
// SingleColumnValueFilter lets a row through when the column's latest value compares
// as op asks, and, when the column is missing, only without filterIfMissing. So
//
//	IfEquals(v):  EQUAL to v,            filterIfMissing: the column holds v
//	IfPresent:    NOT_EQUAL to nothing,  filterIfMissing: a non-empty value
//	IfAbsent:     EQUAL to nothing,      missing passes:  missing or empty
//
// (BinaryComparator with an empty value compares equal to an empty value only.)
func allFilter(conds []Condition) (*pb.Filter, error) {
	var list []byte
	list = protowire.AppendTag(list, filterListOperator, protowire.VarintType)
	list = protowire.AppendVarint(list, filterListPassAll)
	for _, c := range conds {
		if len(c.all) > 0 || c.Absent && c.Present || len(c.Family) == 0 || !c.Absent && !c.Present && len(c.Value) == 0 {
			return nil, errors.New("condition: IfAll takes IfEquals (with a value), IfAbsent and IfPresent conditions with a family")
		}
		var value []byte
		op, ifMissing := pb.CompareType_EQUAL, uint64(1)
		switch {
		case c.Present:
			op = pb.CompareType_NOT_EQUAL
		case c.Absent:
			ifMissing = 0
		default:
			value = c.Value
		}
		cmp, err := binaryComparator(value)
		if err != nil {
			return nil, err
		}
		cmpBytes, err := proto.Marshal(cmp)
		if err != nil {
			return nil, err
		}
		var scvf []byte
		scvf = protowire.AppendTag(scvf, scvfFamily, protowire.BytesType)
		scvf = protowire.AppendBytes(scvf, c.Family)
		scvf = protowire.AppendTag(scvf, scvfQualifier, protowire.BytesType)
		scvf = protowire.AppendBytes(scvf, nonNil(c.Qualifier))
		scvf = protowire.AppendTag(scvf, scvfCompareOp, protowire.VarintType)
		scvf = protowire.AppendVarint(scvf, uint64(op))
		scvf = protowire.AppendTag(scvf, scvfComparator, protowire.BytesType)
		scvf = protowire.AppendBytes(scvf, cmpBytes)
		scvf = protowire.AppendTag(scvf, scvfFilterIfMissing, protowire.VarintType)
		scvf = protowire.AppendVarint(scvf, ifMissing)
		scvf = protowire.AppendTag(scvf, scvfLatestVersion, protowire.VarintType)
		scvf = protowire.AppendVarint(scvf, 1)
		list = appendFilter(list, filterListFilters, filterSCVF, scvf)
	}
	return &pb.Filter{Name: proto.String(filterList), SerializedFilter: list}, nil
}

func (cond Condition) toProto(row []byte) (*pb.Condition, error) {
	if len(cond.all) > 0 {
		f, err := allFilter(cond.all)
		if err != nil {
			return nil, err
		}
		return &pb.Condition{Row: row, Filter: f}, nil
	}
	if len(cond.Family) == 0 {
		return nil, errors.New("condition: empty family")
	}
	if cond.Absent && cond.Present {
		return nil, errors.New("condition: both absent and present")
	}
	// HBase 2.x encodes ifNotExists() as EQUAL against a BinaryComparator without a
	// value: the server treats a null/empty comparator value as "absent", and
	// NOT_EQUAL to it as "present with a non-empty value".
	var value []byte
	op := pb.CompareType_EQUAL
	switch {
	case cond.Present:
		op = pb.CompareType_NOT_EQUAL
	case !cond.Absent:
		if len(cond.Value) == 0 {
			return nil, errors.New("condition: an empty value can only be checked as absent")
		}
		value = cond.Value
	}
	cmp, err := binaryComparator(value)
	if err != nil {
		return nil, err
	}
	return &pb.Condition{
		Row:         row,
		Family:      cond.Family,
		Qualifier:   nonNil(cond.Qualifier),
		CompareType: op.Enum(),
		Comparator:  cmp,
	}, nil
}

// CheckAndMutate atomically applies muts to row when cond holds. One mutation is
// sent as a conditional Mutate; several are applied together as a conditional
// RowMutations (an atomic Multi). Every mutation's Row must be row (or empty).
// It reports whether the mutations were applied, and the cells HBase returns (the
// new values of a conditional Increment).
//
// A CheckAndMutate whose reply is lost is not retried (a retry could report false
// for a change it made itself), and fails with a dcsync.Connection error, unless it
// is made of Increments and Deletes at an explicit Timestamp, none touching a column
// the condition reads: then the retry carries the first attempt's nonce, HBase
// applies the increments at most once (a retry of an applied attempt returns the
// counters' current values), the delete markers are the same markers again, and the
// condition, which the mutations do not change, is checked again.
func (c *Client) CheckAndMutate(ctx context.Context, table string, row []byte, cond Condition, muts ...Mutation) (bool, []Cell, error) {
	ok, cells, _, err := c.checkAndMutate(ctx, "hbase.CheckAndMutate", table, row, cond, muts, nil)
	return ok, cells, err
}

// CheckAndMutateRead is CheckAndMutate followed, in the same call to the region
// server, by a Get of row (restricted to cols; none reads the whole row). The Get runs
// after the conditional mutation, so it sees its effect when applied: the row as it
// is afterwards, or the cells that made the condition fail. (The two are not one
// atomic step: a write by another client may land between them.) In-doubt attempts
// are retried as CheckAndMutate's are.
func (c *Client) CheckAndMutateRead(ctx context.Context, table string, row []byte, cond Condition, muts []Mutation, cols ...Column) (applied bool, mutated, read []Cell, err error) {
	ok, mutated, reads, err := c.checkAndMutate(ctx, "hbase.CheckAndMutateRead", table, row, cond, muts, []*pb.Get{toGetProto(row, cols)})
	if err != nil {
		return false, nil, nil, err
	}
	return ok, mutated, reads[0], nil
}

// retrySafe reports whether an in-doubt conditional call of muts under cond may be
// sent again: every mutation is a nonce'd Increment or a Delete of columns at an
// explicit timestamp (the same markers written twice are one), at least one is an
// Increment, and none touches a column cond reads. (HBase deduplicates the nonce of an
// Increment also inside a conditional RowMutations: checked by the integration test.)
func (c *Client) retrySafe(cond Condition, muts []Mutation) bool {
	if c.noNonces {
		return false
	}
	checked := cond.columns()
	touches := func(fam, qual []byte) bool {
		for _, col := range checked {
			if bytes.Equal(fam, col.Family) && (col.Qualifier == nil || qual == nil || bytes.Equal(qual, col.Qualifier)) {
				return true
			}
		}
		return false
	}
	incs := 0
	for _, m := range muts {
		switch v := m.(type) {
		case *Increment:
			incs++
			for _, d := range v.Deltas {
				if touches(d.Family, d.Qualifier) {
					return false
				}
			}
		case *Delete:
			if v.Timestamp <= 0 || len(v.Columns) == 0 {
				return false
			}
			for _, col := range v.Columns {
				if touches(col.Family, col.Qualifier) {
					return false
				}
			}
		default:
			return false
		}
	}
	return incs > 0
}

// checkAndMutate implements CheckAndMutate (gets nil), CheckAndMutateRead and
// CheckAndMutateGets: it returns the cells each of gets read, in order.
func (c *Client) checkAndMutate(ctx context.Context, op, table string, row []byte, cond Condition, muts []Mutation, gets []*pb.Get) (bool, []Cell, [][]Cell, error) {
	if err := validTable(op, table); err != nil {
		return false, nil, nil, err
	}
	if len(row) == 0 {
		return false, nil, nil, driver.Errorf(dcsync.InvalidArgument, op, "empty row")
	}
	if len(muts) == 0 {
		return false, nil, nil, driver.Errorf(dcsync.InvalidArgument, op, "no mutations")
	}
	pcond, err := cond.toProto(row)
	if err != nil {
		return false, nil, nil, driver.Errorf(dcsync.InvalidArgument, op, "%v", err)
	}
	nonce := c.newNonce()
	var mps []*pb.MutationProto
	for _, m := range muts {
		if r := m.mutationRow(); len(r) != 0 && !bytes.Equal(r, row) {
			return false, nil, nil, driver.Errorf(dcsync.InvalidArgument, op, "mutation row %q differs from row %q", r, row)
		}
		mp, err := fillRow(m, row, nonce)
		if err != nil {
			return false, nil, nil, driver.Errorf(dcsync.InvalidArgument, op, "%v", err)
		}
		mps = append(mps, mp)
	}
	var processed bool
	var cells []Cell
	var readCells [][]Cell
	err = c.onRegion(ctx, op, table, row, c.retrySafe(cond, muts), func(ctx context.Context, r *Region) error {
		processed, cells, readCells = false, nil, make([][]Cell, len(gets))
		if len(mps) == 1 && gets == nil {
			req := &pb.MutateRequest{Region: regionSpec(r), Mutation: mps[0], Condition: pcond}
			if nonce != 0 {
				req.NonceGroup = proto.Uint64(c.nonceGroup)
			}
			resp := &pb.MutateResponse{}
			if err := c.rpc(ctx, r.Server, serviceClient, "Mutate", req, resp); err != nil {
				return err
			}
			processed = resp.GetProcessed()
			cells = cellsFromResult(resp.GetResult())
			return nil
		}
		// A region action carrying the condition (HBase 2.4+; its result's processed
		// flag answers it), atomic for RowMutations; then, for a read, a second
		// region action with the Gets, which the server runs after the first.
		ra := &pb.RegionAction{Region: regionSpec(r), Atomic: proto.Bool(true), Condition: pcond}
		for i, mp := range mps {
			ra.Action = append(ra.Action, &pb.Action{Index: proto.Uint32(uint32(i)), Mutation: mp})
		}
		req := &pb.MultiRequest{RegionAction: []*pb.RegionAction{ra}}
		if gets != nil {
			reads := &pb.RegionAction{Region: regionSpec(r)}
			for i, g := range gets {
				reads.Action = append(reads.Action, &pb.Action{Index: proto.Uint32(uint32(i)), Get: g})
			}
			req.RegionAction = append(req.RegionAction, reads)
		}
		if nonce != 0 {
			req.NonceGroup = proto.Uint64(c.nonceGroup)
		}
		resp := &pb.MultiResponse{}
		if err := c.rpc(ctx, r.Server, serviceClient, "Multi", req, resp); err != nil {
			return err
		}
		rars := resp.GetRegionActionResult()
		if len(rars) != len(req.RegionAction) {
			return fmt.Errorf("multi: %d region results for %d region actions", len(rars), len(req.RegionAction))
		}
		for k, rar := range rars {
			if ex := rar.GetException(); ex != nil {
				return remoteFromNameBytes(ex.GetName(), ex.GetValue())
			}
			for _, roe := range rar.GetResultOrException() {
				if ex := roe.GetException(); ex != nil {
					return remoteFromNameBytes(ex.GetName(), ex.GetValue())
				}
				if k == 0 {
					cells = append(cells, cellsFromResult(roe.GetResult())...)
				} else if i := int(roe.GetIndex()); i < len(gets) {
					readCells[i] = append(readCells[i], cellsFromResult(roe.GetResult())...)
				}
			}
		}
		processed = rars[0].GetProcessed() || (gets == nil && resp.GetProcessed())
		return nil
	})
	if err != nil {
		return false, nil, nil, err
	}
	return processed, cells, readCells, nil
}

// GetWithClock reads row (restricted to cols; none reads the whole row) like Get and,
// in the same call to its region server, learns that server's clock: it increments a
// fresh counter (a random qualifier of probeFamily, 1 ms TTL, no WAL) in the scratch
// row row+"\xff\xffclock", which HBase stamps with its current time, and runs the
// Get after it. now, in milliseconds since the epoch, is therefore at or before the
// server's time during the Get and during anything sent after it: a lower bound of the
// timestamp HBase gives a later write. (0xFF never occurs in UTF-8, so the scratch row
// is no row a Java client writes with a string key.) Retried like a read.
func (c *Client) GetWithClock(ctx context.Context, table string, row, probeFamily []byte, cols ...Column) (cells []Cell, now int64, err error) {
	const op = "hbase.GetWithClock"
	if err := validTable(op, table); err != nil {
		return nil, 0, err
	}
	if len(row) == 0 || len(probeFamily) == 0 {
		return nil, 0, driver.Errorf(dcsync.InvalidArgument, op, "empty row or probe family")
	}
	probeRow := append(append([]byte(nil), row...), 0xff, 0xff, 'c', 'l', 'o', 'c', 'k')
	q := binary.BigEndian.AppendUint64(nil, randUint64())
	probe, err := (&Increment{Row: probeRow, Deltas: []Delta{{probeFamily, q, 1}}, TTL: time.Millisecond, SkipWAL: true}).toProto(0)
	if err != nil {
		return nil, 0, driver.Errorf(dcsync.InvalidArgument, op, "%v", err)
	}
	get := toGetProto(row, cols)
	err = c.onRegion(ctx, op, table, row, true, func(ctx context.Context, r *Region) error {
		cells, now = nil, 0
		if !r.contains(probeRow) {
			// The scratch row is in another region (a split right after row): probe
			// there first, in a call of its own.
			res, err := c.Increment(ctx, table, &Increment{Row: probeRow, Deltas: []Delta{{probeFamily, q, 1}}, TTL: time.Millisecond, SkipWAL: true})
			if err != nil {
				return err
			}
			if now, err = probeTime(res); err != nil {
				return err
			}
			resp := &pb.GetResponse{}
			if err := c.rpc(ctx, r.Server, serviceClient, "Get", &pb.GetRequest{Region: regionSpec(r), Get: get}, resp); err != nil {
				return err
			}
			cells = cellsFromResult(resp.GetResult())
			return nil
		}
		// One region action, not atomic: the server runs an Increment and a Get in
		// the order given.
		ra := &pb.RegionAction{Region: regionSpec(r), Action: []*pb.Action{
			{Index: proto.Uint32(0), Mutation: probe},
			{Index: proto.Uint32(1), Get: get},
		}}
		resp := &pb.MultiResponse{}
		if err := c.rpc(ctx, r.Server, serviceClient, "Multi", &pb.MultiRequest{RegionAction: []*pb.RegionAction{ra}}, resp); err != nil {
			return err
		}
		rars := resp.GetRegionActionResult()
		if len(rars) != 1 {
			return fmt.Errorf("multi: %d region results for 1 region action", len(rars))
		}
		if ex := rars[0].GetException(); ex != nil {
			return remoteFromNameBytes(ex.GetName(), ex.GetValue())
		}
		var probed, got bool
		for _, roe := range rars[0].GetResultOrException() {
			if ex := roe.GetException(); ex != nil {
				return remoteFromNameBytes(ex.GetName(), ex.GetValue())
			}
			switch roe.GetIndex() {
			case 0:
				var err error
				if now, err = probeTime(cellsFromResult(roe.GetResult())); err != nil {
					return err
				}
				probed = true
			case 1:
				cells = cellsFromResult(roe.GetResult())
				got = true
			}
		}
		if !probed || !got {
			return errors.New("multi: missing result of the clock probe or the get")
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return cells, now, nil
}

// probeTime returns the timestamp of a fresh counter's first version (value 1): the
// server's time when it was written. A larger value means the counter was not fresh
// (a retried probe); each earlier increment may have pushed its timestamp 1 ms past
// the server's time, so that much is taken off.
func probeTime(cells []Cell) (int64, error) {
	if len(cells) != 1 {
		return 0, fmt.Errorf("clock probe returned %d cells", len(cells))
	}
	v, err := Int64(cells[0].Value)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("clock probe value %v: %v", cells[0].Value, err)
	}
	return cells[0].Timestamp - (v - 1), nil
}

// fillRow converts m, with row when m's own row is empty.
func fillRow(m Mutation, row []byte, nonce uint64) (*pb.MutationProto, error) {
	switch v := m.(type) {
	case *Put:
		cp := *v
		cp.Row = row
		return cp.toProto(nonceIf(v, nonce))
	case *Delete:
		cp := *v
		cp.Row = row
		return cp.toProto(nonceIf(v, nonce))
	case *Increment:
		cp := *v
		cp.Row = row
		return cp.toProto(nonceIf(v, nonce))
	case nil:
		return nil, errors.New("nil mutation")
	}
	return nil, fmt.Errorf("unsupported mutation %T", m)
}

func nonceIf(m Mutation, nonce uint64) uint64 {
	if m.needsNonce() {
		return nonce
	}
	return 0
}

// MultiGet reads many rows of table, batching the reads of each region server into
// one Multi call. The result has one entry per get, in order; a missing row has no
// cells.
func (c *Client) MultiGet(ctx context.Context, table string, gets []Get) ([][]Cell, error) {
	const op = "hbase.MultiGet"
	if err := validTable(op, table); err != nil {
		return nil, err
	}
	for _, g := range gets {
		if len(g.Row) == 0 {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "empty row")
		}
	}
	out := make([][]Cell, len(gets))
	done := make([]bool, len(gets))
	// Locate in descending row order: each hbase:meta lookup prefetches the regions
	// just before the one it finds.
	order := make([]int, len(gets))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return bytes.Compare(gets[order[a]].Row, gets[order[b]].Row) > 0 })

	err := c.retry(ctx, op, true, func(ctx context.Context) error {
		type regionBatch struct {
			region *Region
			idx    []int
		}
		byServer := map[string]map[string]*regionBatch{}
		var firstErr error
		for _, i := range order {
			if done[i] {
				continue
			}
			r, err := c.locate(ctx, table, gets[i].Row)
			if err != nil {
				if classify(err) != kindRetry || ctx.Err() != nil {
					return err
				}
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			rs := byServer[r.Server]
			if rs == nil {
				rs = map[string]*regionBatch{}
				byServer[r.Server] = rs
			}
			b := rs[string(r.Name)]
			if b == nil {
				b = &regionBatch{region: r}
				rs[string(r.Name)] = b
			}
			b.idx = append(b.idx, i)
		}
		type serverResult struct{ err error }
		results := make(chan serverResult, len(byServer))
		for server, rs := range byServer {
			go func() {
				req := &pb.MultiRequest{}
				var batches []*regionBatch
				for _, b := range rs {
					ra := &pb.RegionAction{Region: regionSpec(b.region)}
					for _, i := range b.idx {
						ra.Action = append(ra.Action, &pb.Action{Index: proto.Uint32(uint32(i)), Get: gets[i].proto()})
					}
					req.RegionAction = append(req.RegionAction, ra)
					batches = append(batches, b)
				}
				resp := &pb.MultiResponse{}
				if err := c.rpc(ctx, server, serviceClient, "Multi", req, resp); err != nil {
					for _, b := range batches {
						c.noteFailure(b.region, err)
					}
					results <- serverResult{err}
					return
				}
				rars := resp.GetRegionActionResult()
				if len(rars) != len(batches) {
					results <- serverResult{fmt.Errorf("multi: %d region results for %d region actions", len(rars), len(batches))}
					return
				}
				var ferr error
				for k, rar := range rars {
					b := batches[k]
					if ex := rar.GetException(); ex != nil {
						e := remoteFromNameBytes(ex.GetName(), ex.GetValue())
						c.noteFailure(b.region, e)
						if ferr == nil {
							ferr = e
						}
						continue
					}
					for _, roe := range rar.GetResultOrException() {
						i := int(roe.GetIndex())
						if i < 0 || i >= len(gets) {
							ferr = fmt.Errorf("multi: result index %d out of range", i)
							continue
						}
						if ex := roe.GetException(); ex != nil {
							e := remoteFromNameBytes(ex.GetName(), ex.GetValue())
							c.noteFailure(b.region, e)
							if ferr == nil {
								ferr = e
							}
							continue
						}
						out[i] = cellsFromResult(roe.GetResult())
						done[i] = true
					}
				}
				results <- serverResult{ferr}
			}()
		}
		var errs []error
		for range byServer {
			if r := <-results; r.err != nil {
				errs = append(errs, r.err)
			}
		}
		if firstErr != nil {
			errs = append(errs, firstErr)
		}
		if len(errs) == 0 {
			for _, d := range done {
				if !d {
					return &locateError{msg: "multi: some gets got no result", retry: true}
				}
			}
			return nil
		}
		// Return the most severe error: a fatal one ends the call, otherwise retry.
		for _, e := range errs {
			if k := classify(e); k == kindFatal || k == kindCancelled {
				return e
			}
		}
		return errs[0]
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
