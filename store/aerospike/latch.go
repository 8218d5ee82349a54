package aerospike

import (
	"context"
	"strings"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/layout"
)

var opsPolicy = as.NewMapPolicyWithFlags(as.MapOrder.KEY_ORDERED, as.MapWriteFlagsCreateOnly)

// opOps returns the ops that record update id in the latch record: trim the map to the
// newest OpIDsKept-1 ids (before the put, so the new id always survives its own write),
// then put id create-only, so that a repeated update fails whole with ELEMENT_EXISTS.
func (s *Store) opOps(id string) []*as.Operation {
	trim := as.MapClearOp(OpsBin)
	if keep := s.cfg.OpIDsKept - 1; keep > 0 {
		trim = as.MapRemoveByIndexRangeOp(OpsBin, -keep, as.MapReturnType.NONE|as.MapReturnType.INVERTED)
	}
	return []*as.Operation{trim, as.MapPutOp(opsPolicy, OpsBin, id, 1)}
}

// latchCount computes the count at k's level from a record's bins, and whether the
// latch exists in it.
func latchCount(k dcsync.Key, bins as.BinMap) (int64, bool) {
	if k.Level == dcsync.DC {
		return intOf(bins[layout.AerospikeLatchBin(k.Farm)])
	}
	var sum int64
	for name, v := range bins {
		if strings.HasPrefix(name, layout.AerospikeLatchBinPrefix) {
			n, _ := intOf(v)
			sum += n
		}
	}
	return sum, true
}

// hasOpID reports whether the latch record holds update id: then an earlier, in-doubt
// try of this very update was applied.
func (s *Store) hasOpID(ctx context.Context, key *as.Key, id string) (bool, error) {
	var found bool
	err := s.retry(ctx, "aerospike.ReadLatch", false, func(*attempt) error {
		rec, err := s.client.Get(s.readPolicy(ctx), key, OpsBin)
		if hasCode(err, types.KEY_NOT_FOUND_ERROR) {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		found = mapHasKey(rec.Bins[OpsBin], id)
		return nil
	})
	return found, err
}

// mapHasKey reports whether a map bin's value has key k. The client returns a
// key-ordered map as []MapPair, an unordered one as map[any]any.
func mapHasKey(v any, k string) bool {
	switch m := v.(type) {
	case map[any]any:
		_, ok := m[k]
		return ok
	case []as.MapPair:
		for _, p := range m {
			if p.Key == k {
				return true
			}
		}
	}
	return false
}

// createLatch writes count into k's farm cell unless the latch exists; it reports
// whether it created the latch.
func (s *Store) createLatch(ctx context.Context, op string, k dcsync.Key, count int64, ttl time.Duration) (bool, error) {
	if err := dcsync.CheckLatch(k, ttl); err != nil {
		return false, err
	}
	if err := dcsync.ValidateTTL(ttl); err != nil {
		return false, err
	}
	if err := dcsync.ValidateCount(count); err != nil {
		return false, err
	}
	if err := s.checkKey(k); err != nil {
		return false, err
	}
	key, err := s.latchKey(k)
	if err != nil {
		return false, err
	}
	bin := layout.AerospikeLatchBin(k.Farm)
	id := newOpID()
	secs := ttlSeconds(ttl)
	var created, exists bool
	err = s.retry(ctx, op, true, func(a *attempt) error {
		// First a create-only write: what the Java library does, and right at both
		// levels when the record is missing.
		wp := s.writePolicy(ctx, secs)
		wp.RecordExistsAction = as.CREATE_ONLY
		ops := append(s.opOps(id), as.PutOp(as.NewBin(bin, count)))
		_, err := s.client.Operate(wp, key, ops...)
		switch {
		case err == nil:
			created = true
			return nil
		case !hasCode(err, types.KEY_EXISTS_ERROR):
			return err
		case k.Level == dcsync.XDC:
			exists = true
			return nil
		}
		// DC: the record exists; add our farm's cell only if it is absent.
		wp = s.writePolicy(ctx, secs)
		wp.FilterExpression = as.ExpNot(as.ExpBinExists(bin))
		_, err = s.client.Operate(wp, key, ops...)
		switch {
		case err == nil:
			created = true
			return nil
		case hasCode(err, types.FILTERED_OUT):
			exists = true
			return nil
		case hasCode(err, types.FAIL_ELEMENT_EXISTS):
			// Our id is in the record: an in-doubt try created the cell.
			created = true
			return nil
		}
		return err
	})
	if err != nil {
		return false, err
	}
	if exists && !created {
		// An earlier try may have been applied in doubt; then the latch is ours.
		if ours, err := s.hasOpID(ctx, key, id); err != nil {
			return false, err
		} else if ours {
			s.log.Debug("aerospike: in-doubt create was applied", "key", k.String())
			return true, nil
		}
		return false, nil
	}
	return created, nil
}

// CreateLatch writes count into the caller's farm cell with the TTL (rounded up to
// whole seconds). If the latch exists (DC: the record has the caller's count#<farm>
// bin; XDC: the record exists) it returns AlreadyExists and changes nothing.
func (s *Store) CreateLatch(ctx context.Context, k dcsync.Key, count int64, ttl time.Duration) error {
	created, err := s.createLatch(ctx, "aerospike.CreateLatch", k, count, ttl)
	if err != nil {
		return err
	}
	if !created {
		return dcsync.Errorf(dcsync.AlreadyExists, "aerospike.CreateLatch", "latch %s exists", k)
	}
	return nil
}

// EnsureLatch creates the latch with count 0 unless it exists, and reports whether it
// created it. An existing latch is left untouched.
func (s *Store) EnsureLatch(ctx context.Context, k dcsync.Key, ttl time.Duration) (bool, error) {
	return s.createLatch(ctx, "aerospike.EnsureLatch", k, 0, ttl)
}

// AddLatch adds delta to the caller's farm cell in one operate that also renews the
// record's TTL and records a fresh update id, and returns the count at k's level after
// the update. A retry of an update whose earlier try was applied fails with
// ELEMENT_EXISTS on the id and changes nothing; the count is then read back. NotFound
// when the latch does not exist.
func (s *Store) AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error) {
	ttl := time.Hour // placeholder until the latch lifetime rule lands (issue 7)
	const op = "aerospike.AddLatch"
	if err := dcsync.CheckLatch(k, ttl); err != nil {
		return 0, err
	}
	if err := dcsync.ValidateTTL(ttl); err != nil {
		return 0, err
	}
	if err := s.checkKey(k); err != nil {
		return 0, err
	}
	key, err := s.latchKey(k)
	if err != nil {
		return 0, err
	}
	bin := layout.AerospikeLatchBin(k.Farm)
	id := newOpID()
	ops := append(s.opOps(id), as.AddOp(as.NewBin(bin, delta)))
	if k.Level == dcsync.DC {
		ops = append(ops, as.GetBinOp(bin))
	} else {
		ops = append(ops, as.GetOp())
	}
	secs := ttlSeconds(ttl)
	var count int64
	notFound, applied := false, false
	err = s.retry(ctx, op, true, func(*attempt) error {
		wp := s.writePolicy(ctx, secs)
		wp.RecordExistsAction = as.UPDATE_ONLY
		if k.Level == dcsync.DC {
			wp.FilterExpression = as.ExpBinExists(bin)
		}
		rec, err := s.client.Operate(wp, key, ops...)
		switch {
		case err == nil:
			n, ok := latchCount(k, rec.Bins)
			if !ok {
				return dcsync.Errorf(dcsync.Internal, op, "reply for %s has no count bin %s: %v", k, bin, rec.Bins)
			}
			count = n
			return nil
		case hasCode(err, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT):
			notFound = true
			return nil
		case hasCode(err, types.FAIL_ELEMENT_EXISTS):
			applied = true
			return nil
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	if notFound {
		return 0, dcsync.Errorf(dcsync.NotFound, op, "latch %s does not exist", k)
	}
	if applied {
		// An earlier, in-doubt try was applied: read the count instead of adding again.
		s.log.Debug("aerospike: in-doubt update was applied; reading the count", "key", k.String())
		res, err := s.readLatches(ctx, op, []dcsync.Key{k})
		if err != nil {
			return 0, err
		}
		if !res[0].Found {
			return 0, dcsync.Errorf(dcsync.NotFound, op, "latch %s expired after the update", k)
		}
		return res[0].Count, nil
	}
	return count, nil
}

// ReadLatches reads every latch in one batch read; result i belongs to keys[i]. A
// missing record, or at level DC a record without the caller's count bin, is
// Found false.
func (s *Store) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]dcsync.LatchCount, error) {
	const op = "aerospike.ReadLatches"
	for _, k := range keys {
		if err := dcsync.CheckLatch(k, 0); err != nil {
			return nil, err
		}
		if err := s.checkKey(k); err != nil {
			return nil, err
		}
	}
	return s.readLatches(ctx, op, keys)
}

func (s *Store) readLatches(ctx context.Context, op string, keys []dcsync.Key) ([]dcsync.LatchCount, error) {
	out := make([]dcsync.LatchCount, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	if len(keys) == 1 {
		return s.readLatch(ctx, op, keys[0])
	}
	reads := make([]as.BatchRecordIfc, len(keys))
	for i, k := range keys {
		key, err := s.latchKey(k)
		if err != nil {
			return nil, err
		}
		if k.Level == dcsync.DC {
			reads[i] = as.NewBatchRead(nil, key, []string{layout.AerospikeLatchBin(k.Farm)})
		} else {
			reads[i] = as.NewBatchRead(nil, key, nil)
		}
	}
	err := s.retry(ctx, op, false, func(*attempt) error {
		for _, r := range reads {
			r.BatchRec().Record, r.BatchRec().Err, r.BatchRec().ResultCode = nil, nil, types.NO_RESPONSE
		}
		if err := s.client.BatchOperate(s.batchPolicy(ctx), reads); err != nil {
			return err
		}
		for i, r := range reads {
			br := r.BatchRec()
			switch {
			case br.ResultCode == types.KEY_NOT_FOUND_ERROR:
				out[i] = dcsync.LatchCount{}
			case br.ResultCode != types.OK:
				if br.Err != nil {
					return br.Err
				}
				return &as.AerospikeError{ResultCode: br.ResultCode}
			case br.Record == nil:
				out[i] = dcsync.LatchCount{}
			default:
				n, ok := latchCount(keys[i], br.Record.Bins)
				out[i] = dcsync.LatchCount{Found: ok, Count: n}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readLatch reads one latch with a plain get: cheaper than a batch of one.
func (s *Store) readLatch(ctx context.Context, op string, k dcsync.Key) ([]dcsync.LatchCount, error) {
	key, err := s.latchKey(k)
	if err != nil {
		return nil, err
	}
	var bins []string
	if k.Level == dcsync.DC {
		bins = []string{layout.AerospikeLatchBin(k.Farm)}
	}
	out := make([]dcsync.LatchCount, 1)
	err = s.retry(ctx, op, false, func(*attempt) error {
		rec, err := s.client.Get(s.readPolicy(ctx), key, bins...)
		switch {
		case hasCode(err, types.KEY_NOT_FOUND_ERROR):
			out[0] = dcsync.LatchCount{}
			return nil
		case err != nil:
			return err
		}
		n, ok := latchCount(k, rec.Bins)
		out[0] = dcsync.LatchCount{Found: ok, Count: n}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
