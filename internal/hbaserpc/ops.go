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

	"google.golang.org/protobuf/proto"

	"github.com/dcsync/dcsync"
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
	// Values are the cells to write (at the server's current time).
	Values []Value
	// TTL, when positive, makes the written cells expire after it (HBase cell TTL,
	// the "_ttl" mutation attribute; millisecond resolution).
	TTL time.Duration
}

// Delete removes data from a row.
type Delete struct {
	// Row is the row key.
	Row []byte
	// Columns selects what to delete: empty deletes the whole row; a Column with a
	// nil Qualifier deletes a family; otherwise every version of that column.
	Columns []Column
}

// Increment adds to counters of a row atomically and returns their new values.
type Increment struct {
	// Row is the row key.
	Row []byte
	// Deltas are the counters and amounts.
	Deltas []Delta
	// TTL, when positive, makes the updated cells expire after it.
	TTL time.Duration
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
	m := &pb.MutationProto{
		Row:        p.Row,
		MutateType: pb.MutationProto_PUT.Enum(),
		ColumnValue: groupByFamily(len(p.Values), func(i int) ([]byte, *pb.MutationProto_ColumnValue_QualifierValue) {
			v := p.Values[i]
			return v.Family, &pb.MutationProto_ColumnValue_QualifierValue{Qualifier: nonNil(v.Qualifier), Value: nonNil(v.Value)}
		}),
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
	m := &pb.MutationProto{
		Row:        d.Row,
		MutateType: pb.MutationProto_DELETE.Enum(),
		Timestamp:  proto.Uint64(math.MaxInt64), // HConstants.LATEST_TIMESTAMP: "now"
	}
	for _, c := range d.Columns {
		if len(c.Family) == 0 {
			return nil, errors.New("delete: empty family")
		}
	}
	m.ColumnValue = groupByFamily(len(d.Columns), func(i int) ([]byte, *pb.MutationProto_ColumnValue_QualifierValue) {
		c := d.Columns[i]
		qv := &pb.MutationProto_ColumnValue_QualifierValue{Timestamp: proto.Uint64(math.MaxInt64)}
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
	m := &pb.MutationProto{
		Row:        inc.Row,
		MutateType: pb.MutationProto_INCREMENT.Enum(),
		ColumnValue: groupByFamily(len(inc.Deltas), func(i int) ([]byte, *pb.MutationProto_ColumnValue_QualifierValue) {
			d := inc.Deltas[i]
			return d.Family, &pb.MutationProto_ColumnValue_QualifierValue{
				Qualifier: nonNil(d.Qualifier),
				Value:     binary.BigEndian.AppendUint64(nil, uint64(d.Amount)),
			}
		}),
	}
	if inc.TTL > 0 {
		m.Attribute = append(m.Attribute, ttlAttribute(inc.TTL))
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
		}
	}
	return out
}

func validTable(op, table string) error {
	if table == "" {
		return dcsync.Errorf(dcsync.InvalidArgument, op, "empty table name")
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
		return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "empty row")
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
		return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "%v", err)
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

// Condition is the check of CheckAndMutate, on one column of the mutated row.
type Condition struct {
	// Family is the column family checked.
	Family []byte
	// Qualifier is the column qualifier checked.
	Qualifier []byte
	// Value is the value the column must hold (when Absent is false).
	Value []byte
	// Absent, when true, requires the column to be absent instead.
	Absent bool
}

// IfAbsent is a Condition that the column does not exist. (As in HBase, a column
// holding an empty value counts as absent.)
func IfAbsent(family, qualifier []byte) Condition {
	return Condition{Family: family, Qualifier: qualifier, Absent: true}
}

// IfEquals is a Condition that the column holds exactly value.
func IfEquals(family, qualifier, value []byte) Condition {
	return Condition{Family: family, Qualifier: qualifier, Value: value}
}

func (cond Condition) toProto(row []byte) (*pb.Condition, error) {
	if len(cond.Family) == 0 {
		return nil, errors.New("condition: empty family")
	}
	// HBase 2.x encodes ifNotExists() as EQUAL against a BinaryComparator without a
	// value; the server treats a null/empty comparator value as "absent".
	comparable := &pb.ByteArrayComparable{}
	if !cond.Absent {
		if len(cond.Value) == 0 {
			return nil, errors.New("condition: an empty value can only be checked as absent")
		}
		comparable.Value = cond.Value
	}
	ser, err := proto.Marshal(&pb.BinaryComparator{Comparable: comparable})
	if err != nil {
		return nil, err
	}
	return &pb.Condition{
		Row:         row,
		Family:      cond.Family,
		Qualifier:   nonNil(cond.Qualifier),
		CompareType: pb.CompareType_EQUAL.Enum(),
		Comparator: &pb.Comparator{
			Name:                 proto.String("org.apache.hadoop.hbase.filter.BinaryComparator"),
			SerializedComparator: ser,
		},
	}, nil
}

// CheckAndMutate atomically applies muts to row when cond holds. One mutation is
// sent as a conditional Mutate; several are applied together as a conditional
// RowMutations (an atomic Multi). Every mutation's Row must be row (or empty).
// It reports whether the mutations were applied, and the cells HBase returns (the
// new values of a conditional Increment).
//
// A CheckAndMutate whose reply is lost is not retried (a retry could report false
// for a change it made itself): it fails with a dcsync.Connection error.
func (c *Client) CheckAndMutate(ctx context.Context, table string, row []byte, cond Condition, muts ...Mutation) (bool, []Cell, error) {
	const op = "hbase.CheckAndMutate"
	if err := validTable(op, table); err != nil {
		return false, nil, err
	}
	if len(row) == 0 {
		return false, nil, dcsync.Errorf(dcsync.InvalidArgument, op, "empty row")
	}
	if len(muts) == 0 {
		return false, nil, dcsync.Errorf(dcsync.InvalidArgument, op, "no mutations")
	}
	pcond, err := cond.toProto(row)
	if err != nil {
		return false, nil, dcsync.Errorf(dcsync.InvalidArgument, op, "%v", err)
	}
	nonce := c.newNonce()
	var mps []*pb.MutationProto
	for _, m := range muts {
		if r := m.mutationRow(); len(r) != 0 && !bytes.Equal(r, row) {
			return false, nil, dcsync.Errorf(dcsync.InvalidArgument, op, "mutation row %q differs from row %q", r, row)
		}
		mp, err := fillRow(m, row, nonce)
		if err != nil {
			return false, nil, dcsync.Errorf(dcsync.InvalidArgument, op, "%v", err)
		}
		mps = append(mps, mp)
	}
	var processed bool
	var cells []Cell
	err = c.onRegion(ctx, op, table, row, false, func(ctx context.Context, r *Region) error {
		if len(mps) == 1 {
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
		// RowMutations with a condition: an atomic RegionAction carrying the
		// condition (HBase 2.4+; the result's processed flag answers it).
		ra := &pb.RegionAction{Region: regionSpec(r), Atomic: proto.Bool(true), Condition: pcond}
		for i, mp := range mps {
			ra.Action = append(ra.Action, &pb.Action{Index: proto.Uint32(uint32(i)), Mutation: mp})
		}
		req := &pb.MultiRequest{RegionAction: []*pb.RegionAction{ra}}
		if nonce != 0 {
			req.NonceGroup = proto.Uint64(c.nonceGroup)
		}
		resp := &pb.MultiResponse{}
		if err := c.rpc(ctx, r.Server, serviceClient, "Multi", req, resp); err != nil {
			return err
		}
		if len(resp.GetRegionActionResult()) != 1 {
			return fmt.Errorf("multi: %d region results for 1 region action", len(resp.GetRegionActionResult()))
		}
		rar := resp.GetRegionActionResult()[0]
		if ex := rar.GetException(); ex != nil {
			return remoteFromNameBytes(ex.GetName(), ex.GetValue())
		}
		for _, roe := range rar.GetResultOrException() {
			if ex := roe.GetException(); ex != nil {
				return remoteFromNameBytes(ex.GetName(), ex.GetValue())
			}
			cells = append(cells, cellsFromResult(roe.GetResult())...)
		}
		processed = rar.GetProcessed() || resp.GetProcessed()
		return nil
	})
	if err != nil {
		return false, nil, err
	}
	return processed, cells, nil
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
			return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "empty row")
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
						ra.Action = append(ra.Action, &pb.Action{Index: proto.Uint32(uint32(i)), Get: toGetProto(gets[i].Row, gets[i].Columns)})
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
