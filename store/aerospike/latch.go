package aerospike

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/layout"
)

// A latch record holds the Java bins count#<farm>, one per farm cell, and dcsync's own
// (see the package doc): OpsBin, EndsBin, IdentityBin and AtBin. Every write is one
// operate whose filter expression checks, on the server and atomically with the write,
// that the latch is in the state the write expects; its ops are plain writes and
// expression writes, which return no values and so may share an operate with a
// read-all op (the server refuses read-all beside any op that returns a value, CDT map
// and list ops included, even with return type NONE: PARAMETER_ERROR, "read-all op
// can't mix with ops that generate response bins").

// maxRounds bounds how often a create re-reads a record whose state changed between
// its read and its conditional write.
const maxRounds = 8

// ---- expressions over a latch record, evaluated by the server ----

// The constant expressions below are packed once (prepack): a count-down builds and
// packs only the parts that depend on its update.
var (
	endsMapExp    = prepack(as.ExpMapBin(EndsBin))
	hasEndsExp    = prepack(as.ExpBinExists(EndsBin))
	latchEndExp   = prepack(as.ExpMapGetByRank(as.MapReturnType.VALUE, as.ExpTypeINT, as.ExpIntVal(-1), as.ExpMapBin(EndsBin)))
	hasOpsExp     = prepack(as.ExpBinExists(OpsBin))
	opsMapExp     = prepack(as.ExpMapBin(OpsBin))
	opsOrEmptyExp = prepack(as.ExpCond(as.ExpBinExists(OpsBin), as.ExpMapBin(OpsBin), as.ExpMapVal(map[any]any{})))
)

func endsMap() *as.Expression { return endsMapExp }
func hasEnds() *as.Expression { return hasEndsExp }

// latchEnd is the latest end of any cell: when the latch as a whole ends. Only valid
// when hasEnds.
func latchEnd() *as.Expression { return latchEndExp }

func hasEntry(farm string) *as.Expression {
	return as.ExpMapGetByKey(as.MapReturnType.EXISTS, as.ExpTypeBOOL, as.ExpStringVal(farm), endsMap())
}

func entry(farm string) *as.Expression {
	return as.ExpMapGetByKey(as.MapReturnType.VALUE, as.ExpTypeINT, as.ExpStringVal(farm), endsMap())
}

// cellAlive is true when farm's cell exists and has not ended: in a record without
// EndsBin (a Java-created latch) every cell lives as long as the record; otherwise a
// cell ends at its entry in EndsBin, or, without one (a Java client's update created
// it), with the latch (latchEnd).
func cellAlive(farm string) *as.Expression {
	end := as.ExpCond(hasEntry(farm), entry(farm), latchEnd())
	return as.ExpAnd(as.ExpBinExists(layout.AerospikeLatchBin(farm)),
		as.ExpOr(as.ExpNot(hasEnds()), as.ExpGreater(end, serverNow())))
}

// entryAlive is true when farm has its own end in EndsBin and it has not passed.
func entryAlive(farm string) *as.Expression {
	return as.ExpAnd(hasEnds(), hasEntry(farm), as.ExpGreater(entry(farm), serverNow()))
}

// latchAlive is true when any cell of the record is alive (the latch exists at level
// XDC). Every cell dcsync writes has an entry and the latest entry's cell exists, so
// that is: no EndsBin (a Java latch, alive while its record is), or latchEnd ahead.
func latchAlive() *as.Expression { return latchAliveExp }

var latchAliveExp = prepack(as.ExpOr(as.ExpNot(hasEnds()), as.ExpGreater(latchEnd(), serverNow())))

// dcUpdateAlive is cellAlive(farm) and sameIncarnation at level DC together, for a
// latch whose incarnation (its cell's end, -1 for a record without EndsBin) is known to
// be end: with the cell's end equal to end, the cell is alive when end is ahead of the
// server's clock, a comparison with a constant instead of a second look into EndsBin.
func dcUpdateAlive(farm, bin string, end int64) *as.Expression {
	if end < 0 {
		return as.ExpAnd(as.ExpNot(hasEnds()), as.ExpBinExists(bin))
	}
	return as.ExpAnd(as.ExpBinExists(bin), hasEnds(), as.ExpEq(cellEnd(farm), as.ExpIntVal(end)),
		as.ExpGreater(as.ExpIntVal(end), serverNow()))
}

// cellEnd is latchIncarnation at level DC: farm's cell's end (its entry, or the
// latch's end for a cell without one), packed once per farm.
func cellEnd(farm string) *as.Expression {
	if e, ok := cellEnds.Load(farm); ok {
		return e.(*as.Expression)
	}
	e := prepack(as.ExpCond(hasEntry(farm), entry(farm), latchEnd()))
	cellEnds.Store(farm, e)
	return e
}

// cellEnds caches cellEnd by farm id (a deployment has a handful of farms).
var cellEnds sync.Map

// identityOK is true when the record has no identity (a Java client created it) or
// has id.
func identityOK(id string) *as.Expression {
	return as.ExpOr(as.ExpNot(as.ExpBinExists(IdentityBin)), as.ExpEq(as.ExpStringBin(IdentityBin), as.ExpStringVal(id)))
}

// applied is true when the record has applied update id (its writer's entry in OpsBin
// holds id's sequence number or a later one): an earlier, in-doubt try of it.
func applied(id opID) *as.Expression {
	w := as.ExpIntVal(id.writer)
	entry := as.ExpMapGetByKey(as.MapReturnType.VALUE, as.ExpTypeLIST, w, opsMapExp)
	return as.ExpAnd(hasOpsExp,
		as.ExpMapGetByKey(as.MapReturnType.EXISTS, as.ExpTypeBOOL, w, opsMapExp),
		as.ExpGreaterEq(as.ExpListGetByIndex(as.ListReturnTypeValue, as.ExpTypeINT, as.ExpIntVal(1), entry), as.ExpIntVal(id.seq)))
}

// inRange is true when adding delta to bin stays in the int64 range: the server wraps
// an integer add that leaves it, so an update refuses it instead.
func inRange(bin string, delta int64) *as.Expression {
	switch {
	case delta > 0:
		return as.ExpLessEq(as.ExpIntBin(bin), as.ExpIntVal(math.MaxInt64-delta))
	case delta < 0:
		return as.ExpGreaterEq(as.ExpIntBin(bin), as.ExpIntVal(math.MinInt64-delta))
	}
	return as.ExpBoolVal(true)
}

// ---- write ops ----

// The constant parts of recordOp: the policies (read only) and the entry's head, a list
// of the server's time, packed once.
var (
	defaultListPolicy = as.DefaultListPolicy()
	defaultMapPolicy  = as.DefaultMapPolicy()
	opEntryHeadExp    = prepack(as.ExpListAppend(as.DefaultListPolicy(), serverNow(), as.ExpListVal()))
)

// recordOp sets id's writer's entry in OpsBin to [server ms, sequence number], and
// keeps the Config.OpIDsKept entries written last (by rank: the server's time, then the
// number). An entry is forgotten only after OpIDsKept other writers updated the record
// since; no client clock is involved.
func (s *Store) recordOp(id opID) *as.Operation {
	entry := as.ExpListAppend(defaultListPolicy, as.ExpIntVal(id.seq), opEntryHeadExp)
	put := as.ExpMapPut(defaultMapPolicy, as.ExpIntVal(id.writer), entry, opsOrEmptyExp)
	kept := as.ExpMapRemoveByRankRange(as.MapReturnType.NONE|as.MapReturnType.INVERTED,
		as.ExpIntVal(-int64(s.cfg.OpIDsKept)), put)
	return as.ExpWriteOp(OpsBin, kept, as.ExpWriteFlagDefault)
}

// freshRecordOps writes a new record (create-only or replacing one whose cells have all
// ended): farm's cell, its end ttl from now, the identity and the update's id.
func (s *Store) freshRecordOps(k dcsync.Key, count int64, ttl time.Duration, id opID) []*as.Operation {
	end := as.ExpNumAdd(serverNow(), as.ExpIntVal(ceilMS(ttl)))
	return []*as.Operation{
		s.recordOp(id),
		as.PutOp(as.NewBin(layout.AerospikeLatchBin(k.Farm), count)),
		as.ExpWriteOp(EndsBin, as.ExpMapPut(as.DefaultMapPolicy(), as.ExpStringVal(k.Farm), end, as.ExpMapVal(map[any]any{})),
			as.ExpWriteFlagDefault),
		as.PutOp(as.NewBin(IdentityBin, latchIdentity(k))),
	}
}

// cellOps writes farm's cell into a live record: the count, its end ttl from now
// (only where the record has EndsBin: in a Java-created record every cell lives as long
// as the record), and the update's id.
func (s *Store) cellOps(k dcsync.Key, count int64, ttl time.Duration, id opID) []*as.Operation {
	end := as.ExpNumAdd(serverNow(), as.ExpIntVal(ceilMS(ttl)))
	return []*as.Operation{
		s.recordOp(id),
		as.PutOp(as.NewBin(layout.AerospikeLatchBin(k.Farm), count)),
		as.ExpWriteOp(EndsBin, as.ExpCond(hasEnds(), as.ExpMapPut(as.DefaultMapPolicy(), as.ExpStringVal(k.Farm), end, endsMap()),
			as.ExpUnknown()), as.ExpWriteFlagEvalNoFail),
	}
}

// latchIdentity is the identity a latch record carries: its (client, name), as
// layout.IdentityKey encodes an XDC key (which has no farm). Every farm's cell, at
// either level, shares the record.
func latchIdentity(k dcsync.Key) string {
	return layout.IdentityKey(dcsync.Key{Level: dcsync.XDC, Client: k.Client, Name: k.Name})
}

// recordTTL is the TTL of a latch record that must outlive a cell ending ttl from now:
// whole seconds, rounded up, plus one, because the server counts the TTL from the
// current whole second. The record's end only removes it; a cell's end is its entry in
// EndsBin, to the ms.
func recordTTL(ttl time.Duration) uint32 { return ttlSeconds(ttl) + 1 }

// ---- reading a record's state ----

// latchState is what a create or a refused update learns of a record.
type latchState struct {
	exists     bool
	identity   string // "" when the record has none
	hasEnds    bool
	ours       bool // the record has applied the update (applied)
	latchAlive bool
	cellAlive  bool
	ttl        int64 // the record's remaining TTL in s, -1 for never
}

// Names of the values readState's expression ops return.
const (
	rHasEnds = "dcsync_r_ends"
	rOurs    = "dcsync_r_ours"
	rLatch   = "dcsync_r_latch"
	rCell    = "dcsync_r_cell"
	rTTL     = "dcsync_r_ttl"
	rNow     = "dcsync_r_now"
)

func (s *Store) readState(ctx context.Context, op string, key *as.Key, farm string, id opID) (latchState, error) {
	var st latchState
	err := s.retry(ctx, op, false, func(*attempt) error {
		rec, err := s.client.Operate(s.writePolicy(ctx, 0), key,
			as.GetBinOp(IdentityBin),
			as.ExpReadOp(rHasEnds, hasEnds(), as.ExpReadFlagDefault),
			as.ExpReadOp(rOurs, applied(id), as.ExpReadFlagDefault),
			as.ExpReadOp(rLatch, latchAlive(), as.ExpReadFlagDefault),
			as.ExpReadOp(rCell, cellAlive(farm), as.ExpReadFlagDefault),
			as.ExpReadOp(rTTL, as.ExpTTL(), as.ExpReadFlagDefault))
		switch {
		case hasCode(err, types.KEY_NOT_FOUND_ERROR):
			st = latchState{}
			return nil
		case err != nil:
			return err
		}
		st = latchState{exists: true, identity: stringOf(rec.Bins[IdentityBin])}
		st.hasEnds, _ = rec.Bins[rHasEnds].(bool)
		st.ours, _ = rec.Bins[rOurs].(bool)
		st.latchAlive, _ = rec.Bins[rLatch].(bool)
		st.cellAlive, _ = rec.Bins[rCell].(bool)
		st.ttl, _ = intOf(rec.Bins[rTTL])
		return nil
	})
	return st, err
}

// collision is the error for a write to a record that belongs to another latch whose
// Java key is the same.
func collision(op string, k dcsync.Key, other string) error {
	msg := fmt.Sprintf("latch %s (client %q, name %q) has the same Aerospike key as another latch", k, k.Client, k.Name)
	if o, ok := layout.ParseIdentityKey(other); ok {
		msg = fmt.Sprintf("latch %s (client %q, name %q) has the same Aerospike key, %q, as the latch of client %q, name %q, which owns the record",
			k, k.Client, k.Name, layout.AerospikeLatchKey(k.Client, k.Name), o.Client, o.Name)
	}
	return driver.Errorf(dcsync.InvalidArgument, op, "%s; nothing was written (the Java layout joins ids with '#' unescaped)", msg)
}

// write runs one operate with retries. It returns the reply, or, for a result code in
// expect, a nil record and that code.
func (s *Store) write(ctx context.Context, op string, policy func() *as.WritePolicy, key *as.Key,
	ops []*as.Operation, expect ...types.ResultCode) (*as.Record, types.ResultCode, error) {
	var rec *as.Record
	code := types.OK
	err := s.retry(ctx, op, true, func(*attempt) error {
		r, err := s.client.Operate(policy(), key, ops...)
		if err != nil {
			if rc, ok := resultCode(err); ok {
				for _, e := range expect {
					if rc == e {
						rec, code = nil, rc
						return nil
					}
				}
			}
			return err
		}
		rec, code = r, types.OK
		return nil
	})
	return rec, code, err
}

// ---- create ----

// createLatch writes count into k's farm cell unless the latch exists, and reports
// whether it created the latch.
//
// A missing record is created with a create-only write, as the Java library does
// (AerospikeLatchStorage.java:69-78), with the record's TTL. Otherwise a read of the
// record's state picks one conditional write, whose filter re-checks that state on the
// server; if the state changed in between, the record is read again.
//   - Every cell has ended: the record is replaced by a fresh one (dead cells, their
//     counts and ends, and any other latch's identity go with it).
//   - The record belongs to another latch (identity): InvalidArgument.
//   - XDC, or DC with the caller's cell alive: the latch exists.
//   - DC, the caller's cell absent or ended in a live record: the cell is written, with
//     its own end, and the record's TTL is extended to cover it, never shortened: the
//     write sets the TTL only if the record would end sooner (filter on its TTL), and
//     otherwise leaves it (TTL_DONT_UPDATE).
//
// Every write carries the same update id (recordOp): a try that was applied in doubt
// shows in the record (applied), and the latch is then ours.
func (s *Store) createLatch(ctx context.Context, op string, k dcsync.Key, count int64, ttl time.Duration) (bool, error) {
	if err := driver.CheckLatch(k, ttl); err != nil {
		return false, err
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return false, err
	}
	if err := driver.ValidateCount(count); err != nil {
		return false, err
	}
	if err := s.checkKey(k); err != nil {
		return false, err
	}
	key, err := s.latchKey(k)
	if err != nil {
		return false, err
	}
	id := s.writers.acquire()
	defer s.writers.release(id)
	ident := latchIdentity(k)
	secs := recordTTL(ttl)
	// Every create also reads back the latch's incarnation, which AddLatch filters on.
	fresh := append(s.freshRecordOps(k, count, ttl, id), incarnationOp(k))
	for round := 0; round < maxRounds; round++ {
		rec, code, err := s.write(ctx, op, func() *as.WritePolicy {
			wp := s.writePolicy(ctx, secs)
			wp.RecordExistsAction = as.CREATE_ONLY
			return wp
		}, key, fresh, types.KEY_EXISTS_ERROR)
		if err != nil {
			return false, err
		}
		if code == types.OK {
			s.sawIncarnation(k, rec)
			return true, nil
		}
		st, err := s.readState(ctx, op, key, k.Farm, id)
		if err != nil {
			return false, err
		}
		var policy func() *as.WritePolicy
		var ops []*as.Operation
		switch {
		case !st.exists:
			continue
		case st.ours:
			s.log.Debug("aerospike: in-doubt create was applied", "key", k.String())
			return true, nil
		case !st.latchAlive:
			policy = func() *as.WritePolicy {
				wp := s.writePolicy(ctx, secs)
				wp.RecordExistsAction = as.REPLACE_ONLY
				wp.FilterExpression = as.ExpNot(latchAlive())
				return wp
			}
			ops = fresh
		case st.identity != "" && st.identity != ident:
			return false, collision(op, k, st.identity)
		case k.Level == dcsync.XDC || st.cellAlive:
			return false, nil
		default:
			ttlOK, recTTL := as.ExpOr(as.ExpEq(as.ExpTTL(), as.ExpIntVal(-1)), as.ExpGreaterEq(as.ExpTTL(), as.ExpIntVal(int64(secs)))), uint32(as.TTLDontUpdate)
			if st.ttl >= 0 && st.ttl < int64(secs) {
				ttlOK, recTTL = as.ExpAnd(as.ExpGreaterEq(as.ExpTTL(), as.ExpIntVal(0)), as.ExpLess(as.ExpTTL(), as.ExpIntVal(int64(secs)))), secs
			}
			policy = func() *as.WritePolicy {
				wp := s.writePolicy(ctx, recTTL)
				wp.RecordExistsAction = as.UPDATE_ONLY
				wp.FilterExpression = as.ExpAnd(identityOK(ident), latchAlive(), as.ExpNot(cellAlive(k.Farm)),
					as.ExpNot(applied(id)), ttlOK)
				return wp
			}
			ops = append(s.cellOps(k, count, ttl, id), incarnationOp(k))
		}
		rec, code, err = s.write(ctx, op, policy, key, ops, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT)
		if err != nil {
			return false, err
		}
		if code == types.OK {
			s.sawIncarnation(k, rec)
			return true, nil
		}
		// The record changed under us (or an in-doubt try of ours was applied): look again.
	}
	return false, driver.Errorf(dcsync.RetriesExhausted, op, "latch %s: the record changed under %d tries to create it", k, maxRounds)
}

// CreateLatch writes count into the caller's farm cell, ending ttl (rounded up to whole
// ms) from now by the server's clock. If the latch exists (DC: the caller's cell is
// alive; XDC: any cell is) it returns AlreadyExists and changes nothing. If the record
// belongs to another latch with the same Java key, it returns InvalidArgument.
func (s *Store) CreateLatch(ctx context.Context, k dcsync.Key, count int64, ttl time.Duration) error {
	created, err := s.createLatch(ctx, "aerospike.CreateLatch", k, count, ttl)
	if err != nil {
		return err
	}
	if !created {
		return driver.Errorf(dcsync.AlreadyExists, "aerospike.CreateLatch", "latch %s exists", k)
	}
	return nil
}

// EnsureLatch creates the latch with count 0 unless it exists, and reports whether it
// created it. An existing latch is left untouched.
func (s *Store) EnsureLatch(ctx context.Context, k dcsync.Key, ttl time.Duration) (bool, error) {
	return s.createLatch(ctx, "aerospike.EnsureLatch", k, 0, ttl)
}

// ---- update ----

// AddLatch adds delta to the caller's farm cell and returns the count at k's level after
// the update, in one operate that leaves the record's TTL and every cell's end alone
// (TTL_DONT_UPDATE): updates never move a latch's end. Its filter requires the latch to
// exist (DC: the caller's cell alive; XDC: any cell), the record to be this latch's
// (identity), and the update not to be applied already (applied); the operate
// records that id. A retry of an update whose earlier try was applied is then filtered
// out, and the count is read instead. NotFound when the latch does not exist;
// InvalidArgument when the record belongs to another latch with the same Java key, or
// when the caller's cell would leave the int64 range (the server would wrap it), and
// nothing is written then. An XDC sum that would leave the range (the server's check
// cannot name the other cells) is found in the reply and the update taken back by the
// opposite one, also InvalidArgument; readers in between see the sum saturated at the
// bound, never with the wrong sign.
//
// The filter also requires the latch's incarnation (latchIncarnation: the end of the
// caller's cell, DC, or of the latch, XDC) to be the one this Store last saw; it reads
// it first (one more round trip) for a latch it has not seen, and keeps it from each
// XDC reply (a DC update succeeds only on the incarnation it knows, so it keeps it). At
// level DC, knowing the cell's end also makes the liveness check one comparison of that
// constant with the server's clock (dcUpdateAlive). So a try that lands late, after the latch was deleted and created again,
// changes nothing (the new record has no entry of this writer, so applied alone would
// let it through). When the latch has another incarnation by now, the update reads it
// and goes to the new latch, under the same id.
//
// At level XDC the operate also returns the sum: it ends with a read-all op, and every
// other op is a plain or expression write, which return nothing (see the top of this
// file). The caller's cell is added to if it is alive, and otherwise (absent, or its
// own DC end passed) set to delta with the latch's end (latchEnd): XDC cells end
// together. The operate also stores the server's time (AtBin), by which the reply
// judges which cells have ended. So the returned sum is the count right after this
// update, atomically, as a DC update returns its cell.
//
// The alternative, a write and then a read, costs a second round trip, and its sum is
// the count at some later moment, after other writers' updates too. That would do for
// the latch's own use of it (a count <= 0 wakes local waiters, and a count-down latch
// only goes down), as a Redisson count-down returns nothing and leaves the count to a
// separate read, but the CLI prints the count after the update, and one atomic round
// trip costs less.
func (s *Store) AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error) {
	id := s.writers.acquire()
	defer s.writers.release(id)
	return s.addLatch(ctx, k, delta, id)
}

func (s *Store) addLatch(ctx context.Context, k dcsync.Key, delta int64, id opID) (int64, error) {
	const op = "aerospike.AddLatch"
	pk := preparedKey{k: k, delta: delta}
	var prep preparedUpdate
	var key *as.Key
	var err error
	if k.Level == dcsync.DC {
		prep, _ = s.prepared.get(pk)
		key = prep.key // validated when it was prepared
	}
	if key == nil {
		if err := driver.ValidateKey("latch", k); err != nil {
			return 0, err
		}
		if err := s.checkKey(k); err != nil {
			return 0, err
		}
		if key, err = s.latchKey(k); err != nil {
			return 0, err
		}
	}
	bin := layout.AerospikeLatchBin(k.Farm)
	ident := latchIdentity(k)
	var alive *as.Expression
	var ops []*as.Operation
	if k.Level == dcsync.DC {
		// alive: dcUpdateAlive, which needs the incarnation (below). The reply needs no
		// incarnation either: the filter required the one this Store knows.
		ops = []*as.Operation{s.recordOp(id), as.AddOp(as.NewBin(bin, delta)), as.GetBinOp(bin)}
	} else {
		alive = as.ExpAnd(latchAlive(), as.ExpOr(as.ExpNot(cellAlive(k.Farm)), inRange(bin, delta)))
		ownEnd := as.ExpCond(as.ExpNot(hasEnds()), as.ExpUnknown(),
			entryAlive(k.Farm), endsMap(),
			as.ExpMapPut(as.DefaultMapPolicy(), as.ExpStringVal(k.Farm), latchEnd(), endsMap()))
		ops = []*as.Operation{
			s.recordOp(id),
			// The cell first: its liveness is judged on the ends before this update.
			as.ExpWriteOp(bin, as.ExpCond(cellAlive(k.Farm), as.ExpNumAdd(as.ExpIntBin(bin), as.ExpIntVal(delta)), as.ExpIntVal(delta)),
				as.ExpWriteFlagDefault),
			as.ExpWriteOp(EndsBin, ownEnd, as.ExpWriteFlagEvalNoFail),
			as.ExpWriteOp(AtBin, serverNow(), as.ExpWriteFlagDefault),
			as.GetOp(),
		}
	}
	// The update is filtered on the latch's incarnation too (the end this Store last
	// saw, read first when it has seen none), so that a try that lands late, after the
	// latch was deleted and created again, changes nothing (TestLatchLateUpdate). When
	// the latch has another incarnation by now, the update goes to that one: it is read
	// and the update sent again, under the same id.
	ik := incKey(k)
	end, known := s.incs.get(ik)
	var rec *as.Record
	var code types.ResultCode
	for round := 0; ; round++ {
		if !known {
			if end, err = s.readIncarnation(ctx, op, key, k); err != nil {
				return 0, err
			}
			s.incs.put(ik, end)
		}
		var filter *as.Expression
		if k.Level == dcsync.DC {
			if prep.key == nil || prep.end != end {
				prep = preparedUpdate{key: key, end: end,
					checks: prepack(as.ExpAnd(identityOK(ident), dcUpdateAlive(k.Farm, bin, end), inRange(bin, delta)))}
				s.prepared.put(pk, prep)
			}
			filter = as.ExpAnd(prep.checks, as.ExpNot(applied(id)))
		} else {
			filter = as.ExpAnd(identityOK(ident), alive, as.ExpNot(applied(id)), sameIncarnation(k, end))
		}
		rec, code, err = s.write(ctx, op, func() *as.WritePolicy {
			wp := s.writePolicy(ctx, as.TTLDontUpdate)
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.FilterExpression = filter
			return wp
		}, key, ops, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT)
		if err != nil || code != types.FILTERED_OUT || round == maxRounds-1 {
			break
		}
		now, err := s.readIncarnation(ctx, op, key, k)
		if err != nil {
			return 0, err
		}
		if now == end {
			break // filtered for another reason: see below
		}
		end, known = now, true
		s.incs.put(ik, end)
	}
	if code == types.OK && rec != nil && k.Level == dcsync.XDC {
		s.incs.put(ik, xdcIncarnation(rec.Bins))
	}
	switch {
	case err != nil:
		return 0, err
	case code == types.KEY_NOT_FOUND_ERROR:
		return 0, driver.Errorf(dcsync.NotFound, op, "latch %s does not exist", k)
	case code == types.FILTERED_OUT:
		st, err := s.readState(ctx, op, key, k.Farm, id)
		switch {
		case err != nil:
			return 0, err
		case st.ours:
			// An earlier, in-doubt try was applied: read the count instead of adding again.
			s.log.Debug("aerospike: in-doubt update was applied; reading the count", "key", k.String())
			res, err := s.readLatches(ctx, op, []dcsync.Key{k})
			if err != nil {
				return 0, err
			}
			if !res[0].Found {
				return 0, driver.Errorf(dcsync.NotFound, op, "latch %s ended after the update", k)
			}
			return res[0].Count, nil
		case st.exists && st.identity != "" && st.identity != ident:
			return 0, collision(op, k, st.identity)
		case k.Level == dcsync.DC && st.cellAlive || k.Level == dcsync.XDC && st.latchAlive:
			// The latch exists and is ours: the range check refused the update.
			return 0, driver.Errorf(dcsync.InvalidArgument, op,
				"adding %d to %s of latch %s would leave the int64 range; nothing was written", delta, bin, k)
		}
		return 0, driver.Errorf(dcsync.NotFound, op, "latch %s does not exist", k)
	}
	if k.Level == dcsync.DC {
		n, ok := intOf(rec.Bins[bin])
		if !ok {
			return 0, driver.Errorf(dcsync.Internal, op, "reply for %s has no count bin %s: %v", k, bin, rec.Bins)
		}
		return n, nil
	}
	now, ok := intOf(rec.Bins[AtBin])
	if !ok {
		return 0, driver.Errorf(dcsync.Internal, op, "reply for %s has no %s bin: %v", k, AtBin, rec.Bins)
	}
	counts, _ := liveCounts(rec.Bins, now)
	// The server checked the caller's cell, not the sum (it cannot name the other
	// cells). Take back an update that carried the sum out of the int64 range with the
	// opposite update under a fresh id (the counts before it are the ones read back,
	// less delta). Readers in between see the sum saturated at the bound, never a count
	// of the wrong sign.
	if !driver.SumUpdateFits(append(counts, -delta), delta) {
		if _, err := s.addLatch(ctx, k, -delta, s.writers.fresh(id)); err != nil {
			return 0, driver.Errorf(dcsync.Internal, op,
				"latch %s: taking back an update that overflowed its sum failed: %v", k, err)
		}
		return 0, driver.Errorf(dcsync.InvalidArgument, op,
			"adding %d to latch %s would take its sum out of the int64 range; the update was taken back", delta, k)
	}
	n := driver.SumCounts(counts...)
	return n, nil
}

// xdcIncarnation is latchIncarnation of an XDC latch from its record's bins: the
// latest end in EndsBin, or -1 without one.
func xdcIncarnation(bins as.BinMap) int64 {
	m, ok := ends(bins)
	if !ok || len(m) == 0 {
		return -1
	}
	end := int64(math.MinInt64)
	for _, e := range m {
		end = max(end, e)
	}
	return end
}

// ---- read ----

// isCountBin reports whether a bin is a count cell, as the Java library's XDC read
// decides (AerospikeLatchStorage.java:113-114: the name contains "count#").
func isCountBin(name string) bool { return strings.Contains(name, layout.AerospikeLatchBinPrefix) }

// ends returns EndsBin's entries, and whether the record has EndsBin.
func ends(bins as.BinMap) (map[string]int64, bool) {
	out := map[string]int64{}
	switch m := bins[EndsBin].(type) {
	case map[any]any:
		for k, v := range m {
			ks, _ := k.(string)
			out[ks], _ = intOf(v)
		}
	case []as.MapPair:
		for _, p := range m {
			ks, _ := p.Key.(string)
			out[ks], _ = intOf(p.Value)
		}
	default:
		return nil, false
	}
	return out, true
}

// latchSum computes the XDC count of a record's bins at server time now (ms), and
// whether the latch exists: the rule of cellAlive and latchAlive, in Go. A sum past the
// int64 range reads as its bound, never with the wrong sign.
func latchSum(bins as.BinMap, now int64) (int64, bool) {
	counts, alive := liveCounts(bins, now)
	return driver.SumCounts(counts...), alive
}

// liveCounts returns the counts of a record's live cells at server time now (ms), and
// whether the latch exists.
func liveCounts(bins as.BinMap, now int64) ([]int64, bool) {
	e, has := ends(bins)
	var latest int64
	for _, end := range e {
		latest = max(latest, end)
	}
	var counts []int64
	for name, v := range bins {
		if !isCountBin(name) {
			continue
		}
		end := latest
		if farm, ok := layout.ParseAerospikeLatchBin(name); ok {
			if own, ok := e[farm]; ok {
				end = own
			}
		}
		if !has || end > now {
			n, _ := intOf(v)
			counts = append(counts, n)
		}
	}
	return counts, !has || latest > now
}

// rAlive names the value a DC read's expression op returns: whether the cell is alive.
const rAlive = "dcsync_r_alive"

// dcReadOps read farm's cell, the record's identity and whether the cell is alive.
func dcReadOps(farm string) []*as.Operation {
	return []*as.Operation{
		as.GetBinOp(layout.AerospikeLatchBin(farm)),
		as.GetBinOp(IdentityBin),
		as.ExpReadOp(rAlive, cellAlive(farm), as.ExpReadFlagDefault),
	}
}

// dcCount interprets the reply of dcReadOps.
func dcCount(k dcsync.Key, bins as.BinMap) driver.LatchCount {
	if id := stringOf(bins[IdentityBin]); id != "" && id != latchIdentity(k) {
		return driver.LatchCount{}
	}
	if alive, _ := bins[rAlive].(bool); !alive {
		return driver.LatchCount{}
	}
	n, ok := intOf(bins[layout.AerospikeLatchBin(k.Farm)])
	return driver.LatchCount{Found: ok, Count: n}
}

// xdcCount interprets a read-all reply and the server's time of the read.
func xdcCount(k dcsync.Key, bins as.BinMap, now int64) driver.LatchCount {
	if id := stringOf(bins[IdentityBin]); id != "" && id != latchIdentity(k) {
		return driver.LatchCount{}
	}
	n, found := latchSum(bins, now)
	if !found {
		return driver.LatchCount{}
	}
	return driver.LatchCount{Found: true, Count: n}
}

// ReadLatches reads every latch in one batch; result i belongs to keys[i]. A latch is
// Found when it exists at its key's level: DC, the caller's cell is alive; XDC, any
// cell is, and the count is the sum of the alive cells. A record that belongs to
// another latch with the same Java key (identity) holds no latch of k's: Found false.
//
// A DC read is one read of the cell whose expression op tells, by the server's clock,
// whether the cell has ended. An XDC read must see every count bin, also those a Java
// client added, so it is a read-all, which cannot share a command with an expression
// op; it is filtered on no cell having ended (allCellsAlive), and then every count bin
// counts: one record read, as the Java library's. Only a record with an ended cell is
// read again, by a batch of two reads (read-all, and the server's time, by which the
// cells are judged).
func (s *Store) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]driver.LatchCount, error) {
	const op = "aerospike.ReadLatches"
	for _, k := range keys {
		if err := driver.ValidateKey("latch", k); err != nil {
			return nil, err
		}
		if err := s.checkKey(k); err != nil {
			return nil, err
		}
	}
	return s.readLatches(ctx, op, keys)
}

// allCellsAlive is true on a latch record none of whose cells has ended by the server's
// clock: it has no EndsBin (a Java latch: its cells live as long as it does), or the
// earliest end in EndsBin is ahead. Every cell then counts (a cell without an end of its
// own ends with the latch, at the latest end).
func allCellsAlive() *as.Expression { return allCellsAliveExp }

var allCellsAliveExp = prepack(as.ExpOr(as.ExpNot(hasEnds()),
	as.ExpGreater(as.ExpMapGetByRank(as.MapReturnType.VALUE, as.ExpTypeINT, as.ExpIntVal(0), endsMap()), serverNow())))

// prepack returns e packed once: a constant expression costs nothing to build or pack
// per command.
func prepack(e *as.Expression) *as.Expression {
	b64, err := e.Base64()
	if err == nil {
		if p, err := as.ExpFromBase64(b64); err == nil {
			return p
		}
	}
	return e
}

func (s *Store) readLatches(ctx context.Context, op string, keys []dcsync.Key) ([]driver.LatchCount, error) {
	out := make([]driver.LatchCount, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	if len(keys) == 1 && keys[0].Level == dcsync.DC {
		return s.readDC(ctx, op, keys[0])
	}
	lkeys := make([]*as.Key, len(keys))
	for i, k := range keys {
		key, err := s.latchKey(k)
		if err != nil {
			return nil, err
		}
		lkeys[i] = key
	}
	var again []int // XDC latches with a cell that has ended: judged by the server's time
	if len(keys) == 1 {
		done, err := s.readXDC(ctx, op, keys[0], lkeys[0], &out[0])
		if err != nil || done {
			return out, err
		}
		again = []int{0}
	} else {
		alive := as.NewBatchReadPolicy()
		alive.FilterExpression = allCellsAlive()
		reads := make([]as.BatchRecordIfc, len(keys))
		for i, k := range keys {
			if k.Level == dcsync.DC {
				reads[i] = as.NewBatchReadOps(nil, lkeys[i], dcReadOps(k.Farm)...)
			} else {
				reads[i] = as.NewBatchRead(alive, lkeys[i], nil)
			}
		}
		if err := s.runBatch(ctx, op, false, reads, nil, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT); err != nil {
			return nil, err
		}
		again = s.countLatches(keys, reads, out)
	}
	if len(again) == 0 {
		return out, nil
	}
	pairs := make([]as.BatchRecordIfc, 0, 2*len(again))
	for _, i := range again {
		pairs = append(pairs, as.NewBatchRead(nil, lkeys[i], nil),
			as.NewBatchReadOps(nil, lkeys[i], as.ExpReadOp(rNow, serverNow(), as.ExpReadFlagDefault)))
	}
	if err := s.runBatch(ctx, op, false, pairs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return nil, err
	}
	for j, i := range again {
		all, probe := pairs[2*j].BatchRec(), pairs[2*j+1].BatchRec()
		now, ok := int64(0), false
		if probe.ResultCode == types.OK && probe.Record != nil {
			now, ok = intOf(probe.Record.Bins[rNow])
		}
		if all.ResultCode != types.OK || all.Record == nil || !ok {
			out[i] = driver.LatchCount{} // no record, or it vanished between the two reads
			continue
		}
		out[i] = xdcCount(keys[i], all.Record.Bins, now)
	}
	return out, nil
}

// countLatches fills out from the replies of the first batch of readLatches and
// returns the XDC latches filtered out (a cell has ended).
func (s *Store) countLatches(keys []dcsync.Key, reads []as.BatchRecordIfc, out []driver.LatchCount) []int {
	var again []int
	for i, k := range keys {
		br := reads[i].BatchRec()
		switch {
		case br.ResultCode == types.FILTERED_OUT:
			again = append(again, i)
		case br.ResultCode != types.OK || br.Record == nil:
			out[i] = driver.LatchCount{}
		case k.Level == dcsync.DC:
			out[i] = dcCount(k, br.Record.Bins)
		default:
			out[i] = xdcCount(k, br.Record.Bins, math.MinInt64)
		}
	}
	return again
}

// readXDC reads one XDC latch with a single read-all filtered on allCellsAlive, into
// out; done is false when the record has an ended cell (filtered out): the caller reads
// it again with the server's time.
func (s *Store) readXDC(ctx context.Context, op string, k dcsync.Key, key *as.Key, out *driver.LatchCount) (done bool, err error) {
	err = s.retry(ctx, op, false, func(*attempt) error {
		p := s.readPolicy(ctx)
		p.FilterExpression = allCellsAlive()
		rec, err := s.client.Get(p, key)
		switch {
		case hasCode(err, types.KEY_NOT_FOUND_ERROR):
			*out, done = driver.LatchCount{}, true
			return nil
		case hasCode(err, types.FILTERED_OUT):
			done = false
			return nil
		case err != nil:
			return err
		}
		*out, done = xdcCount(k, rec.Bins, math.MinInt64), true
		return nil
	})
	return done, err
}

// readDC reads one DC latch with a single-record read: cheaper than a batch of one.
func (s *Store) readDC(ctx context.Context, op string, k dcsync.Key) ([]driver.LatchCount, error) {
	key, err := s.latchKey(k)
	if err != nil {
		return nil, err
	}
	ops := dcReadOps(k.Farm)
	out := make([]driver.LatchCount, 1)
	err = s.retry(ctx, op, false, func(*attempt) error {
		rec, err := s.client.Operate(s.writePolicy(ctx, 0), key, ops...)
		switch {
		case hasCode(err, types.KEY_NOT_FOUND_ERROR):
			out[0] = driver.LatchCount{}
			return nil
		case err != nil:
			return err
		}
		out[0] = dcCount(k, rec.Bins)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
