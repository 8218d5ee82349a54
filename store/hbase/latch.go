package hbase

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// markerPrefix starts the qualifier of a lifetime marker (see the package doc). It
// never starts with "count_", so a Java DC read never meets one.
const markerPrefix = "dcsync_lt:"

// zero8 is the value of every dcsync-only latch cell: an 8-byte 0, which leaves the sum
// a Java XDC read takes unchanged (it adds up Bytes.toLong of every cell of family C,
// HBaseLatchStorage.java:128-134).
var zero8 = be64(0)

// marker is a parsed lifetime marker: the farm cell count_<farm> of (client, name) was
// created at ts (the marker's timestamp, written by the same mutation) with a TTL of
// ttl, so it ends at ts+ttl; op is the id of the create that wrote it.
type marker struct {
	qual   []byte
	id     dcsync.Key // level DC, with the farm of the cell the marker belongs to
	op     string
	ts     int64
	ttlMs  int64
	endsMs int64
}

// markerQualifier returns the qualifier of the marker of k's farm cell:
// "dcsync_lt:<ttl ms>:<op id>:<IdentityKey of the DC key of that cell>".
func markerQualifier(k dcsync.Key, ttlMs int64, opID string) []byte {
	id := k
	id.Level = dcsync.DC
	return []byte(markerPrefix + strconv.FormatInt(ttlMs, 10) + ":" + opID + ":" + layout.IdentityKey(id))
}

func parseMarker(c hbaserpc.Cell) (marker, bool) {
	rest, ok := strings.CutPrefix(string(c.Qualifier), markerPrefix)
	if !ok {
		return marker{}, false
	}
	ttl, rest, ok1 := strings.Cut(rest, ":")
	op, idKey, ok2 := strings.Cut(rest, ":")
	ttlMs, err := strconv.ParseInt(ttl, 10, 64)
	id, ok3 := layout.ParseIdentityKey(idKey)
	if !ok1 || !ok2 || !ok3 || err != nil || ttlMs <= 0 || id.Level != dcsync.DC {
		return marker{}, false
	}
	return marker{qual: c.Qualifier, id: id, op: op, ts: c.Timestamp, ttlMs: ttlMs, endsMs: c.Timestamp + ttlMs}, true
}

// latchView is a latch row as read: its count cells by farm, its lifetime markers and
// every cell (for the sum).
type latchView struct {
	cells   []hbaserpc.Cell
	counts  map[string]hbaserpc.Cell
	markers []marker
}

func parseLatchView(cells []hbaserpc.Cell) latchView {
	r := latchView{cells: cells, counts: map[string]hbaserpc.Cell{}}
	for _, c := range cells {
		if farm, ok := layout.ParseHBaseLatchQualifier(c.Qualifier); ok {
			r.counts[farm] = c
		} else if m, ok := parseMarker(c); ok {
			r.markers = append(r.markers, m)
		}
	}
	return r
}

// sameLatch reports whether marker identity id names the latch row of k.
func sameLatch(id, k dcsync.Key) bool { return id.Client == k.Client && id.Name == k.Name }

// collision returns InvalidArgument when the row holds a marker of another (client,
// name) whose Java row is the same as k's (see layout.AmbiguousHBaseLatchRow).
func (r latchView) collision(op string, k dcsync.Key) error {
	for _, m := range r.markers {
		if !sameLatch(m.id, k) {
			return driver.Errorf(dcsync.InvalidArgument, op,
				"latch (client %q, name %q) shares its HBase row %q with the latch (client %q, name %q) written by dcsync: the Java layout joins client and name with '_' and cannot keep them apart; use ids without '_'",
				k.Client, k.Name, layout.HBaseLatchRow(k.Client, k.Name), m.id.Client, m.id.Name)
		}
	}
	return nil
}

// markerOf returns the marker of farm's cell with the latest end, if any.
func (r latchView) markerOf(farm string) (marker, bool) {
	var best marker
	found := false
	for _, m := range r.markers {
		if m.id.Farm == farm && (!found || m.endsMs > best.endsMs) {
			best, found = m, true
		}
	}
	return best, found
}

// latest returns the marker with the latest end, if any.
func (r latchView) latest() (marker, bool) {
	var best marker
	found := false
	for _, m := range r.markers {
		if !found || m.endsMs > best.endsMs {
			best, found = m, true
		}
	}
	return best, found
}

func (r latchView) hasOp(opID string) bool {
	for _, m := range r.markers {
		if m.op == opID {
			return true
		}
	}
	return false
}

// exists reports whether k's latch exists in the row: its farm cell (DC) or any farm
// cell (XDC).
func (r latchView) exists(k dcsync.Key) bool {
	if k.Level == dcsync.XDC {
		return len(r.counts) > 0
	}
	_, ok := r.counts[k.Farm]
	return ok
}

func latchCols(k dcsync.Key) []hbaserpc.Column {
	if k.Level == dcsync.XDC {
		return []hbaserpc.Column{{Family: famLatch}}
	}
	return []hbaserpc.Column{{Family: famLatch, Qualifier: layout.HBaseLatchQualifier(k.Farm)}}
}

// sumCells adds up cells as the Java reader does (Bytes.toLong of every cell), but
// saturating at the int64 bounds instead of wrapping (driver.SumCounts).
func sumCells(op string, cells []hbaserpc.Cell) (int64, error) {
	vals, err := cellValues(op, cells)
	if err != nil {
		return 0, err
	}
	return driver.SumCounts(vals...), nil
}

// cellValues decodes every cell but op lanes (latch_op.go: their longer values read as
// 0 to a Java reader, which takes their first 8 bytes).
func cellValues(op string, cells []hbaserpc.Cell) ([]int64, error) {
	vals := make([]int64, 0, len(cells))
	for _, c := range cells {
		if isOpLane(c.Qualifier) {
			continue
		}
		v, err := decode64(op, c)
		if err != nil {
			return nil, err
		}
		vals = append(vals, v)
	}
	return vals, nil
}

func newOpID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CreateLatch writes count into the caller's farm cell C:count_<farm> with the TTL, by a
// check-and-mutate "cell absent" (never an Increment, which would add to an existing
// count as the Java create does, HBaseLatchStorage.java:80-82). If the latch exists it
// returns AlreadyExists and changes nothing.
//
// The same Put writes the cell's lifetime marker (an 8-byte zero whose qualifier
// carries the TTL, an id of this create, and the latch's identity; see the package
// doc), so the latch's end is known to every later update, and a create whose reply was
// lost can tell its own write from another's.
//
// At level XDC the latch exists when any farm's cell exists, which a check on one cell
// cannot test. CreateLatch first reads family C (any cell: AlreadyExists), then writes,
// atomically and only if the cell C:dcsync_xdc is absent, that cell (an 8-byte zero)
// together with its own count cell and marker. Of concurrent XDC creates from several
// farms exactly one passes that check. (An XDC create racing a DC create of the same
// latch in the same farm is not excluded: both may succeed, the later write's count
// standing.)
//
// When the row is ambiguous (layout.AmbiguousHBaseLatchRow: another client and name
// share it), the create reads the row first and refuses, with InvalidArgument and
// writing nothing, when a marker of another (client, name) is there.
//
// When the write's outcome is unknown, the row is read back: our marker there means
// created; the latch created by another means AlreadyExists; nothing means not applied,
// and the write is sent again. A resend that finds the latch created by our own earlier
// attempt (one that reached the server late) reports it created.
func (s *Store) CreateLatch(ctx context.Context, k dcsync.Key, count int64, ttl time.Duration) error {
	const op = "hbase.CreateLatch"
	if err := driver.CheckLatch(k, ttl); err != nil {
		return err
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return err
	}
	if err := driver.ValidateCount(count); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	created, err := s.create(ctx, op, k, count, ttl)
	switch {
	case err != nil:
		return wrap(err, op)
	case !created:
		return driver.Errorf(dcsync.AlreadyExists, op, "latch %s exists", k)
	}
	return nil
}

// EnsureLatch creates the latch with count 0 as CreateLatch does, and reports false
// when it already existed.
func (s *Store) EnsureLatch(ctx context.Context, k dcsync.Key, ttl time.Duration) (bool, error) {
	const op = "hbase.EnsureLatch"
	if err := driver.CheckLatch(k, ttl); err != nil {
		return false, err
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return false, err
	}
	if err := s.check(op); err != nil {
		return false, err
	}
	created, err := s.create(ctx, op, k, 0, ttl)
	if err != nil {
		return false, wrap(err, op)
	}
	return created, nil
}

// create is CreateLatch's algorithm.
func (s *Store) create(ctx context.Context, op string, k dcsync.Key, count int64, ttl time.Duration) (created bool, err error) {
	if err := s.ready(ctx, op, &s.latches); err != nil {
		return false, err
	}
	row := layout.HBaseLatchRow(k.Client, k.Name)
	q := layout.HBaseLatchQualifier(k.Farm)
	ambiguous := layout.AmbiguousHBaseLatchRow(k.Client, k.Name)
	readRow := func() (latchView, error) {
		cells, err := s.db.Get(ctx, s.latchTable, row, hbaserpc.Column{Family: famLatch})
		if err != nil {
			return latchView{}, err
		}
		return parseLatchView(cells), nil
	}
	if k.Level == dcsync.XDC || ambiguous {
		r, err := readRow()
		if err != nil {
			return false, err
		}
		if err := r.collision(op, k); err != nil {
			return false, err
		}
		if k.Level == dcsync.XDC && len(latchCells(r.cells)) > 0 || r.exists(k) {
			return false, nil
		}
	}
	opID := newOpID()
	vals := []hbaserpc.Value{
		{Family: famLatch, Qualifier: q, Value: be64(uint64(count))},
		{Family: famLatch, Qualifier: markerQualifier(k, ttl.Milliseconds(), opID), Value: zero8},
	}
	cond := hbaserpc.IfAbsent(famLatch, q)
	if k.Level == dcsync.XDC {
		cond = hbaserpc.IfAbsent(famLatch, qualXDCCreated)
		vals = append(vals, hbaserpc.Value{Family: famLatch, Qualifier: qualXDCCreated, Value: zero8})
	}
	put := &hbaserpc.Put{Values: vals, TTL: ttl}
	doubted := false
	for try := 0; ; try++ {
		ok, _, err := s.db.CheckAndMutate(ctx, s.latchTable, row, cond, put)
		if err == nil && ok {
			return true, nil
		}
		if err == nil && !doubted && !ambiguous {
			return false, nil
		}
		if err != nil && (!inDoubt(err) || try >= maxTries-1) {
			return false, err
		}
		// Not applied after an earlier attempt was in doubt, or in doubt now, or refused
		// on an ambiguous row: read the row to tell whose latch is there.
		doubted = doubted || err != nil
		r, rerr := readRow()
		if rerr != nil {
			if err != nil {
				return false, err
			}
			return false, rerr
		}
		s.log.Debug("hbase: latch create refused or in doubt; read back", "key", k.String(), "mine", r.hasOp(opID), "err", err)
		switch {
		case r.hasOp(opID):
			return true, nil
		case r.collision(op, k) != nil:
			return false, r.collision(op, k)
		case err == nil:
			return false, nil // refused: another create's latch
		case k.Level == dcsync.XDC && len(latchCells(r.cells)) > 0 || r.exists(k):
			return false, nil // in doubt, and another create's latch is there
		}
		// In doubt and nothing there: not applied (or not yet); send it again.
	}
}

// AddLatch adds delta to the caller's farm cell with HBase's Increment and returns the
// count at k's level afterwards, without moving the latch's end (the lifetime rule, see
// the package doc). In one call to the region server it first reads the latch row and
// the server's clock (hbaserpc.GetWithClock): NotFound, writing nothing, when the latch
// does not exist; InvalidArgument, writing nothing, when the row holds another (client,
// name)'s latch (layout.AmbiguousHBaseLatchRow). Then, in a second call:
//
//   - A farm cell that has a lifetime marker (created by dcsync) gets an Increment
//     whose TTL is the marker's end minus a lower bound of the timestamp HBase will
//     give the new version (the larger of the server clock just read and the cell's
//     previous timestamp + 1), so the new version ends at the latch's end (later by at
//     most the update's own latency), together with a delete of the versions read
//     (stamped at the timestamp read), so that no older version, whatever its TTL (a
//     Java update carries one forward from its own time), can reappear when the new
//     one ends. The two are one conditional RowMutations, conditional on the marker
//     still being there: an update arriving after the latch ended is not applied
//     (NotFound), and cannot re-create the cell holding only delta.
//   - An XDC update from a farm without a cell creates it, with a marker of its own,
//     ending with the latch (the latest end among the row's markers). An XDC update of
//     a latch dcsync created at level XDC (the row has C:dcsync_xdc) also adopts every
//     farm cell without a marker (a Java update from a farm without a cell creates one
//     with no TTL at all): it gets a marker, a new version (added 0) ending with the
//     latch, and its older versions deleted, so the latch ends whole.
//   - A farm cell without a marker (a latch a Java client created) gets an Increment
//     without TTL, as the Java update sends (HBaseLatchStorage.java:92-93): HBase
//     carries the cell's TTL forward from the new version's timestamp, so each update
//     extends it, as it does for Java. It is conditional on a count cell of the latch
//     being present.
//
// A DC update of a cell this store updated last (and whose row no other latch can
// share) skips the read: one call, the write planned from what the store remembers,
// checked against the Increment's result (latch_known.go).
//
// Every update of a cell with a lifetime marker is also a compare-and-set on an op lane
// of the store's (latch_op.go):
// every attempt of one AddLatch is conditional on the lane holding what it held before
// the update and writes the update's own value into it, so the update is applied at
// most once, whichever region server an attempt reaches, also after a clean region
// move (where the Increment's nonce is unknown) and also when an attempt lands late.
// When an attempt's outcome is unknown, AddLatch reads the row: its value in the lane
// means applied, and AddLatch returns the count read (a state after this update); the
// value before, not applied, and it plans the update again from that read and sends it
// with the same lane and value. At level DC AddLatch returns the Increment's result. At
// level XDC the same call to the server reads the row right after the update and
// AddLatch returns its sum: a state after this update (another client's update may land
// in between, and is then included), never an estimate. An update whose outcome stays
// unknown (the row unreadable, or opResendWindow passed) fails with Connection: it may
// have been applied.
//
// An update of a cell without a lifetime marker (a latch a Java client created) goes
// without a lane, so that no dcsync cell outlives the Java latch (latch_op.go, "No
// lane"): it is sent once, applied at most once, and when its outcome is unknown
// AddLatch fails with Connection (it may have been applied) instead of resending it.
func (s *Store) AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error) {
	const op = "hbase.AddLatch"
	if err := driver.CheckLatch(k, 0); err != nil {
		return 0, err
	}
	if err := s.check(op); err != nil {
		return 0, err
	}
	if err := s.ready(ctx, op, &s.latches); err != nil {
		return 0, err
	}
	row := layout.HBaseLatchRow(k.Client, k.Name)
	q := layout.HBaseLatchQualifier(k.Farm)
	notFound := func() error { return driver.Errorf(dcsync.NotFound, op, "latch %s does not exist", k) }
	oneCall := k.Level == dcsync.DC && !layout.AmbiguousHBaseLatchRow(k.Client, k.Name)
	o := s.newLatchOp(row, q)
	applied := false
	defer func() { s.end(o, applied) }()
	if l, ok := s.latchMem.get(row, q); oneCall && ok && time.Since(l.anchorR) < maxAnchorAge {
		if _, err := driver.AddCount(op, l.val, delta); err == nil {
			own, done, err := s.addKnown(ctx, op, o, row, q, l, delta)
			applied = done
			if err != nil {
				return 0, wrap(err, op)
			}
			if done {
				if pre := own - delta; delta > 0 && pre > own || delta < 0 && pre < own {
					lower := l.lower(time.Now())
					cond := hbaserpc.IfEquals(famLatch, l.marker, zero8)
					return 0, s.takeBack(ctx, op, k, row, cond, timedWrite(q, delta, l.endsMs, lower, 0)[0].(*hbaserpc.Increment), delta, l.endsMs, lower, "farm "+k.Farm+"'s count")
				}
				return own, nil
			}
			// Not applied (the full path reads why), or in doubt (o.doubted: the full
			// path's read tells whether it was applied).
		}
	}
	for try := 0; try < maxTries; try++ {
		if o.tooLate() {
			break
		}
		sent := time.Now()
		cells, now, err := s.db.GetWithClock(ctx, s.latchTable, row, famLatch, hbaserpc.Column{Family: famLatch})
		if err != nil {
			return 0, o.fail(op, k, err)
		}
		anchorR := time.Now()
		r := parseLatchView(cells)
		if !o.first.IsZero() {
			if o.appliedIn(r) {
				// An earlier attempt of this update, whose reply was lost, was applied.
				applied = true
				return s.appliedEarlier(op, k, r, now, sent, anchorR, oneCall)
			}
			s.recheck(o, r)
		}
		if err := r.collision(op, k); err != nil {
			return 0, err
		}
		if !r.exists(k) {
			return 0, notFound()
		}
		// A count never wraps around: refuse, writing nothing, an update whose farm cell
		// or (XDC) sum would leave the int64 range.
		if own, ok := r.counts[k.Farm]; ok {
			v, err := decode64(op, own)
			if err != nil {
				return 0, err
			}
			if _, err := driver.AddCount(op, v, delta); err != nil {
				return 0, driver.Errorf(dcsync.InvalidArgument, op, "latch %s: adding %d to farm %s's count %d would overflow int64; nothing was written", k, delta, k.Farm, v)
			}
		}
		if k.Level == dcsync.XDC {
			vals, err := cellValues(op, r.cells)
			if err != nil {
				return 0, err
			}
			if !driver.SumUpdateFits(vals, delta) {
				return 0, driver.Errorf(dcsync.InvalidArgument, op, "latch %s: adding %d to count %d would overflow int64; nothing was written", k, delta, driver.SumCounts(vals...))
			}
		}
		w, ok := r.update(k, delta, now)
		if !ok {
			return 0, notFound() // the latch has ended, by the server's clock
		}
		if w.endsMs == 0 && o.doubted {
			// An earlier attempt went through the lane, in doubt, and the update
			// would now go without it (see latch_op.go, "No lane"): the lane could
			// no longer tell whether it was applied.
			return 0, driver.Errorf(dcsync.Connection, op, "latch %s: the update's outcome is unknown (it may have been applied): the latch's lifetime marker is gone", k)
		}
		cond, muts := o.guard(w.cond, w.muts, w.endsMs, w.lower)
		o.sending()
		var res, after []hbaserpc.Cell
		if k.Level == dcsync.DC {
			applied, res, err = s.db.CheckAndMutate(ctx, s.latchTable, row, cond, muts...)
		} else {
			applied, res, after, err = s.db.CheckAndMutateRead(ctx, s.latchTable, row, cond, muts, hbaserpc.Column{Family: famLatch})
		}
		if err != nil {
			if !inDoubt(err) {
				return 0, o.fail(op, k, err)
			}
			o.doubted = true
			if !o.laned {
				// No lane (a cell a Java client created): nothing tells whether it
				// was applied, and a resend could apply it twice.
				return 0, o.fail(op, k, err)
			}
			s.log.Debug("hbase: latch update in doubt; reading the row for its op lane", "key", k.String(), "try", try, "err", err)
			continue
		}
		if !applied {
			// The marker or cell the update was conditional on is gone (the latch ended
			// in between, or the Java cell chosen expired), or an earlier attempt of
			// this update was applied: the next read tells.
			s.log.Debug("hbase: latch update not applied; reading again", "key", k.String(), "try", try)
			continue
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
			return 0, driver.Errorf(dcsync.Internal, op, "Increment of %s returned no value", k)
		}
		// A concurrent update between the read and the write may still have carried the
		// cell (HBase adds with Java's wrapping arithmetic) or the sum out of range: take
		// this update back and refuse it.
		inc := w.muts[0].(*hbaserpc.Increment)
		if pre := own - delta; delta > 0 && pre > own || delta < 0 && pre < own {
			return 0, s.takeBack(ctx, op, k, row, w.cond, inc, delta, w.endsMs, w.lower, "farm "+k.Farm+"'s count")
		}
		if k.Level == dcsync.DC {
			m, marked := r.markerOf(k.Farm)
			if _, hasOwn := r.counts[k.Farm]; oneCall && marked && hasOwn {
				c, _ := cellOf(res, q)
				s.latchMem.put(row, q, knownLatch{marker: m.qual, endsMs: m.endsMs, ts: c.Timestamp, val: own,
					anchorS: now, anchorR: anchorR, anchorRTT: anchorR.Sub(sent)})
			}
			return own, nil
		}
		vals, err := cellValues(op, after)
		if err != nil {
			return 0, err
		}
		// The counts before this update: the ones read back, less delta.
		if !driver.SumUpdateFits(append(vals, -delta), delta) {
			return 0, s.takeBack(ctx, op, k, row, w.cond, inc, delta, w.endsMs, w.lower, "the sum")
		}
		return driver.SumCounts(vals...), nil
	}
	if o.doubted {
		return 0, o.fail(op, k, nil)
	}
	return 0, notFound()
}

// fail returns AddLatch's error for err (nil: no attempt may be sent any more): when an
// attempt of o was in doubt, Connection, saying that the update may have been applied.
func (o *latchOp) fail(op string, k dcsync.Key, err error) error {
	if !o.doubted {
		return wrap(err, op)
	}
	if err == nil {
		return driver.Errorf(dcsync.Connection, op, "latch %s: the update's outcome is unknown (it may have been applied): neither confirmed nor refused in %d tries within %v", k, maxTries, opResendWindow)
	}
	return driver.Errorf(dcsync.Connection, op, "latch %s: the update's outcome is unknown (it may have been applied): %w", k, err)
}

// appliedEarlier returns AddLatch's result for an update an earlier attempt of which was
// applied, from the row r read (with the server clock now, sent at sent and answered at
// anchorR) and holding its value in its op lane: k's farm count (DC) or the sum (XDC), a state
// after the update. (A count carried out of the int64 range by a concurrent update in
// between is not detected here, as it is from an Increment's result.)
func (s *Store) appliedEarlier(op string, k dcsync.Key, r latchView, now int64, sent, anchorR time.Time, oneCall bool) (int64, error) {
	if !r.exists(k) {
		return 0, driver.Errorf(dcsync.NotFound, op, "latch %s was updated and has been deleted since", k)
	}
	if k.Level == dcsync.XDC {
		return sumCells(op, r.cells)
	}
	c := r.counts[k.Farm]
	own, err := decode64(op, c)
	if err != nil {
		return 0, err
	}
	if m, marked := r.markerOf(k.Farm); oneCall && marked {
		row := layout.HBaseLatchRow(k.Client, k.Name)
		s.latchMem.put(row, c.Qualifier, knownLatch{marker: m.qual, endsMs: m.endsMs, ts: c.Timestamp, val: own,
			anchorS: now, anchorR: anchorR, anchorRTT: anchorR.Sub(sent)})
	}
	return own, nil
}

// takeBack undoes an applied update of delta whose result left the int64 range (inc is
// the update's Increment: it is sent again with -delta, under the same condition cond,
// as an update of its own, in a lane of its own) and returns the InvalidArgument error
// AddLatch reports.
func (s *Store) takeBack(ctx context.Context, op string, k dcsync.Key, row []byte, cond hbaserpc.Condition, inc *hbaserpc.Increment, delta, endsMs, lower int64, what string) error {
	q := layout.HBaseLatchQualifier(k.Farm)
	back := *inc
	back.Deltas = []hbaserpc.Delta{{Family: famLatch, Qualifier: q, Amount: -delta}}
	o := s.newLatchOp(row, q)
	applied := false
	defer func() { s.end(o, applied) }()
	for try := 0; try < maxTries && !o.tooLate(); try++ {
		gcond, muts := o.guard(cond, []hbaserpc.Mutation{&back}, endsMs, lower)
		o.sending()
		ok, _, err := s.db.CheckAndMutate(ctx, s.latchTable, row, gcond, muts...)
		if err == nil && ok {
			applied = true
			break
		}
		if err != nil && !inDoubt(err) {
			s.log.Warn("hbase: taking back an update that overflowed failed", "key", k.String(), "delta", delta, "err", err)
			return o.fail(op, k, err)
		}
		if err != nil {
			o.doubted = true
			if !o.laned {
				s.log.Warn("hbase: taking back an update that overflowed: outcome unknown", "key", k.String(), "delta", delta, "err", err)
				return o.fail(op, k, err)
			}
		}
		cells, rerr := s.db.Get(ctx, s.latchTable, row, hbaserpc.Column{Family: famLatch})
		if rerr != nil {
			s.log.Warn("hbase: taking back an update that overflowed: outcome unknown", "key", k.String(), "delta", delta, "err", rerr)
			return o.fail(op, k, rerr)
		}
		r := parseLatchView(cells)
		if o.appliedIn(r) {
			applied = true
			break
		}
		if err == nil && !o.doubted {
			if v, ok := r.value(o.lane.qual); ok == (o.lane.prev != nil) && (!ok || bytes.Equal(v, o.lane.prev)) {
				break // not applied, and not for its lane: the latch has ended
			}
		}
		s.recheck(o, r)
	}
	return driver.Errorf(dcsync.InvalidArgument, op, "latch %s: adding %d carried %s out of the int64 range; the update was taken back", k, delta, what)
}

// latchWrite is AddLatch's planned write: the condition, the mutations (the first is the
// Increment), the latch's end (0 when unknown: a Java cell) and the lower bound of the
// server's time the plan assumed.
type latchWrite struct {
	cond          hbaserpc.Condition
	muts          []hbaserpc.Mutation
	endsMs, lower int64
}

// update plans AddLatch's write from the row as read with the server clock now (see
// AddLatch). ok is false when the latch's end has passed by now.
func (r latchView) update(k dcsync.Key, delta int64, now int64) (w latchWrite, ok bool) {
	q := layout.HBaseLatchQualifier(k.Farm)
	_, hasOwn := r.counts[k.Farm]
	m, hasMarker := r.markerOf(k.Farm)
	latest, hasLatest := r.latest()
	adopt := k.Level == dcsync.XDC && hasLatest && r.xdcCreated()
	switch {
	case hasOwn && hasMarker:
		return r.timed(k, delta, hbaserpc.IfEquals(famLatch, m.qual, zero8), m.endsMs, now, adopt)
	case !hasOwn && hasLatest, hasOwn && adopt:
		// A new farm cell of the latch, or our own unmarked cell of a latch dcsync
		// created at level XDC: it ends with the latch.
		return r.timed(k, delta, hbaserpc.IfEquals(famLatch, latest.qual, zero8), latest.endsMs, now, adopt)
	case hasOwn:
		w.cond = hbaserpc.IfPresent(famLatch, q)
	default: // a Java XDC latch updated from a farm without a cell
		// Also "no cell of ours yet", which the plan assumes, and which makes the
		// condition read the column the Increment changes: the client does not resend
		// an attempt of unknown outcome (no lane here: latch_op.go).
		w.cond = hbaserpc.IfAll(hbaserpc.IfPresent(famLatch, layout.HBaseLatchQualifier(sortedFarms(r.counts)[0])), hbaserpc.IfAbsent(famLatch, q))
	}
	inc := &hbaserpc.Increment{Deltas: []hbaserpc.Delta{{Family: famLatch, Qualifier: q, Amount: delta}}}
	w.muts, w.lower = []hbaserpc.Mutation{inc}, now
	return w, true
}

// timed plans an update of a latch that ends at endsMs: one Increment, with a TTL that
// makes every version it writes end at endsMs or a little after, of k's farm cell by
// delta and (adopt) of every other unmarked farm cell by 0, with a marker for each of
// those cells that has none; and a delete of the versions read of each existing cell
// it updates, so that none of them can outlive the new ones.
func (r latchView) timed(k dcsync.Key, delta int64, cond hbaserpc.Condition, endsMs, now int64, adopt bool) (latchWrite, bool) {
	type cell struct {
		farm   string
		amount int64
	}
	cells := []cell{{k.Farm, delta}}
	if adopt {
		for _, f := range sortedFarms(r.counts) {
			if _, marked := r.markerOf(f); !marked && f != k.Farm {
				cells = append(cells, cell{f, 0})
			}
		}
	}
	// A lower bound of the timestamp HBase gives each version the Increment writes:
	// the server's clock, and for an existing cell its previous timestamp + 1 (when the
	// Increment writes nothing but that cell).
	lower := now
	own, hasOwn := r.counts[k.Farm]
	_, ownMarked := r.markerOf(k.Farm)
	if len(cells) == 1 && hasOwn && ownMarked {
		lower = max(lower, own.Timestamp+1)
	}
	ttl := time.Duration(endsMs-lower) * time.Millisecond
	if ttl < time.Millisecond {
		return latchWrite{}, false
	}
	inc := &hbaserpc.Increment{TTL: ttl}
	var deletes []hbaserpc.Mutation
	for _, c := range cells {
		qual := layout.HBaseLatchQualifier(c.farm)
		inc.Deltas = append(inc.Deltas, hbaserpc.Delta{Family: famLatch, Qualifier: qual, Amount: c.amount})
		if _, marked := r.markerOf(c.farm); !marked {
			// The cell's marker, written by the same Increment: same timestamp and TTL.
			id := dcsync.Key{Level: dcsync.DC, Client: k.Client, Farm: c.farm, Name: k.Name}
			inc.Deltas = append(inc.Deltas, hbaserpc.Delta{Family: famLatch, Qualifier: markerQualifier(id, ttl.Milliseconds(), newOpID())})
		}
		if old, ok := r.counts[c.farm]; ok {
			deletes = append(deletes, &hbaserpc.Delete{Columns: []hbaserpc.Column{{Family: famLatch, Qualifier: qual}}, Timestamp: old.Timestamp})
		}
	}
	return latchWrite{cond: cond, muts: append([]hbaserpc.Mutation{inc}, deletes...), endsMs: endsMs, lower: lower}, true
}

// xdcCreated reports whether dcsync created the row's latch at level XDC (the cell
// C:dcsync_xdc is there).
func (r latchView) xdcCreated() bool {
	for _, c := range r.cells {
		if bytes.Equal(c.Qualifier, qualXDCCreated) {
			return true
		}
	}
	return false
}

func sortedFarms(counts map[string]hbaserpc.Cell) []string {
	farms := make([]string, 0, len(counts))
	for f := range counts {
		farms = append(farms, f)
	}
	slices.Sort(farms)
	return farms
}

// ReadLatches reads all keys in one MultiGet (one Multi call per region server; a
// single key is one Get): the caller's farm cell for a DC key, the whole family C,
// summed, for an XDC key. A latch is found when any cell but an op lane was read.
func (s *Store) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]driver.LatchCount, error) {
	const op = "hbase.ReadLatches"
	for _, k := range keys {
		if err := driver.CheckLatch(k, 0); err != nil {
			return nil, err
		}
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	out := make([]driver.LatchCount, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	if err := s.ready(ctx, op, &s.latches); err != nil {
		return nil, err
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
		return nil, driver.Errorf(dcsync.Internal, op, "%d results for %d keys", len(res), len(keys))
	}
	for i, cells := range res {
		if len(latchCells(cells)) == 0 {
			continue // nothing, or only op lanes (latch_op.go) outliving the latch
		}
		n, err := sumCells(op, cells)
		if err != nil {
			return nil, err
		}
		out[i] = driver.LatchCount{Found: true, Count: n}
	}
	return out, nil
}
