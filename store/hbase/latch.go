package hbase

import (
	"bytes"
	"context"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

func latchCols(k dcsync.Key) []hbaserpc.Column {
	if k.Level == dcsync.XDC {
		return []hbaserpc.Column{{Family: famLatch}}
	}
	return []hbaserpc.Column{{Family: famLatch, Qualifier: layout.HBaseLatchQualifier(k.Farm)}}
}

// sumCells adds up cells as the Java reader does (Bytes.toLong of every cell).
func sumCells(op string, cells []hbaserpc.Cell) (int64, error) {
	var n int64
	for _, c := range cells {
		v, err := decode64(op, c)
		if err != nil {
			return 0, err
		}
		n += v
	}
	return n, nil
}

// CreateLatch writes count into the caller's farm cell C:count_<farm> with the TTL, by a
// check-and-mutate "cell absent" (never an Increment, which would add to an existing
// count as the Java create does). If the latch exists it returns AlreadyExists and
// changes nothing.
//
// At level XDC the latch exists when any farm's cell exists, which a check on one cell
// cannot test. CreateLatch first reads family C (any cell: AlreadyExists), then writes,
// atomically and only if the cell C:dcsync_xdc is absent, that cell (an 8-byte zero,
// which leaves the sums Java readers take unchanged) together with its own count cell.
// Of concurrent XDC creates from several farms exactly one passes that check. (An XDC
// create racing a DC create of the same latch in the same farm is not excluded: both
// may succeed, the later write's count standing.)
//
// When the write's outcome is unknown, the row is read back: not there means not
// applied (sent again); there is ambiguous (ours, or a concurrent create's) and
// CreateLatch returns a Connection error saying the outcome is unknown.
func (s *Store) CreateLatch(ctx context.Context, k dcsync.Key, count int64, ttl time.Duration) error {
	const op = "hbase.CreateLatch"
	if err := dcsync.CheckLatch(k, ttl); err != nil {
		return err
	}
	if err := dcsync.ValidateTTL(ttl); err != nil {
		return err
	}
	if err := dcsync.ValidateCount(count); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	created, unknown, err := s.create(ctx, op, k, count, ttl)
	switch {
	case err != nil:
		return wrap(err, op)
	case unknown:
		return dcsync.Errorf(dcsync.Connection, op, "outcome unknown: %s exists, but maybe not by this create", k)
	case !created:
		return dcsync.Errorf(dcsync.AlreadyExists, op, "latch %s exists", k)
	}
	return nil
}

// EnsureLatch creates the latch with count 0 as CreateLatch does, and reports false
// when it already existed. When the create's outcome is unknown and the cell exists
// afterwards, it reports false: the latch exists either way.
func (s *Store) EnsureLatch(ctx context.Context, k dcsync.Key, ttl time.Duration) (bool, error) {
	const op = "hbase.EnsureLatch"
	if err := dcsync.CheckLatch(k, ttl); err != nil {
		return false, err
	}
	if err := dcsync.ValidateTTL(ttl); err != nil {
		return false, err
	}
	if err := s.check(op); err != nil {
		return false, err
	}
	created, _, err := s.create(ctx, op, k, 0, ttl)
	if err != nil {
		return false, wrap(err, op)
	}
	return created, nil
}

// create is CreateLatch's algorithm. unknown reports an in-doubt write after which the
// cell exists.
func (s *Store) create(ctx context.Context, op string, k dcsync.Key, count int64, ttl time.Duration) (created, unknown bool, err error) {
	row := layout.HBaseLatchRow(k.Client, k.Name)
	q := layout.HBaseLatchQualifier(k.Farm)
	if k.Level == dcsync.XDC {
		cells, err := s.db.Get(ctx, s.latchTable, row, hbaserpc.Column{Family: famLatch})
		if err != nil {
			return false, false, err
		}
		if len(cells) > 0 {
			return false, false, nil
		}
	}
	val := be64(uint64(count))
	cond := hbaserpc.IfAbsent(famLatch, q)
	vals := []hbaserpc.Value{{Family: famLatch, Qualifier: q, Value: val}}
	check := q
	if k.Level == dcsync.XDC {
		cond = hbaserpc.IfAbsent(famLatch, qualXDCCreated)
		vals = append(vals, hbaserpc.Value{Family: famLatch, Qualifier: qualXDCCreated, Value: be64(0)})
		check = qualXDCCreated
	}
	for try := 0; ; try++ {
		ok, _, err := s.db.CheckAndMutate(ctx, s.latchTable, row, cond, &hbaserpc.Put{Values: vals, TTL: ttl})
		if err == nil {
			return ok, false, nil
		}
		if !inDoubt(err) || try >= maxTries-1 {
			return false, false, err
		}
		cells, rerr := s.db.Get(ctx, s.latchTable, row, hbaserpc.Column{Family: famLatch, Qualifier: check})
		if rerr != nil {
			return false, false, err
		}
		s.log.Debug("hbase: latch create outcome unknown; read back", "key", k.String(), "present", len(cells) > 0)
		if len(cells) > 0 {
			return false, true, nil
		}
	}
}

// AddLatch adds delta to the caller's farm cell with HBase's Increment, renewing its
// TTL, after a read that the latch exists (NotFound, writing nothing, when it does not).
// The Increment carries a nonce that every retry reuses, so an attempt whose reply was
// lost is never applied twice. If the latch expires in the moment between the read and
// the Increment, the Increment re-creates the cell holding delta (HBase cannot make an
// Increment conditional on a cell's existence without giving up the nonce's retry
// safety). At level DC it returns the Increment's result; at XDC it reads the family
// again and returns the sum.
func (s *Store) AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error) {
	ttl := time.Hour // placeholder until the latch lifetime rule lands (issue 7)
	const op = "hbase.AddLatch"
	if err := dcsync.CheckLatch(k, ttl); err != nil {
		return 0, err
	}
	if err := dcsync.ValidateTTL(ttl); err != nil {
		return 0, err
	}
	if err := s.check(op); err != nil {
		return 0, err
	}
	row := layout.HBaseLatchRow(k.Client, k.Name)
	q := layout.HBaseLatchQualifier(k.Farm)
	before, err := s.db.Get(ctx, s.latchTable, row, latchCols(k)...)
	if err != nil {
		return 0, wrap(err, op)
	}
	if len(before) == 0 {
		return 0, dcsync.Errorf(dcsync.NotFound, op, "latch %s does not exist", k)
	}
	res, err := s.db.Increment(ctx, s.latchTable, &hbaserpc.Increment{
		Row:    row,
		Deltas: []hbaserpc.Delta{{Family: famLatch, Qualifier: q, Amount: delta}},
		TTL:    ttl,
	})
	if err != nil {
		return 0, wrap(err, op)
	}
	var own int64
	found := false
	for _, c := range res {
		if bytes.Equal(c.Qualifier, q) {
			if own, err = decode64(op, c); err != nil {
				return 0, err
			}
			found = true
		}
	}
	if !found {
		return 0, dcsync.Errorf(dcsync.Internal, op, "Increment of %s returned no value", k)
	}
	if k.Level == dcsync.DC {
		return own, nil
	}
	after, err := s.db.Get(ctx, s.latchTable, row, hbaserpc.Column{Family: famLatch})
	if err == nil && len(after) > 0 {
		return sumCells(op, after)
	}
	// The update is applied; do not fail it. Estimate from the first read.
	s.log.Debug("hbase: reading the XDC sum after an update failed; using the earlier read", "key", k.String(), "err", err)
	n := own
	for _, c := range before {
		if !bytes.Equal(c.Qualifier, q) {
			v, err := decode64(op, c)
			if err != nil {
				return 0, err
			}
			n += v
		}
	}
	return n, nil
}

// ReadLatches reads all keys in one MultiGet (one Multi call per region server; a
// single key is one Get): the caller's farm cell for a DC key, the whole family C,
// summed, for an XDC key. A latch is found when any cell was read.
func (s *Store) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]dcsync.LatchCount, error) {
	const op = "hbase.ReadLatches"
	for _, k := range keys {
		if err := dcsync.CheckLatch(k, 0); err != nil {
			return nil, err
		}
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	out := make([]dcsync.LatchCount, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	gets := make([]hbaserpc.Get, len(keys))
	for i, k := range keys {
		gets[i] = hbaserpc.Get{Row: layout.HBaseLatchRow(k.Client, k.Name), Columns: latchCols(k)}
	}
	var res [][]hbaserpc.Cell
	if len(gets) == 1 {
		// One key: a plain Get is lighter than a one-action Multi.
		cells, err := s.db.Get(ctx, s.latchTable, gets[0].Row, gets[0].Columns...)
		if err != nil {
			return nil, wrap(err, op)
		}
		res = [][]hbaserpc.Cell{cells}
	} else {
		var err error
		if res, err = s.db.MultiGet(ctx, s.latchTable, gets); err != nil {
			return nil, wrap(err, op)
		}
	}
	if len(res) != len(keys) {
		return nil, dcsync.Errorf(dcsync.Internal, op, "%d results for %d keys", len(res), len(keys))
	}
	for i, cells := range res {
		if len(cells) == 0 {
			continue
		}
		n, err := sumCells(op, cells)
		if err != nil {
			return nil, err
		}
		out[i] = dcsync.LatchCount{Found: true, Count: n}
	}
	return out, nil
}
