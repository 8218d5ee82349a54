package aerospike

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"math"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/layout"
)

// # Register layout (driver.RegisterStore)
//
// A register is a record of its own, never expiring, in set R#<lock set> (R#DC#<farm>#
// <suffix> or R#XDC#<suffix>, beside the fence sets F#<lock set>; no Java set name
// starts with "R#"), user key layout.IdentityKey of the register's key (unambiguous; the
// farm only at level DC, so a DC register is its farm's own and an XDC register one for
// every farm). Bins:
//
//	RegisterGenBin    the generation (an integer)
//	RegisterValueBin  a format byte (1) then the value (a blob never empty)
//	RegisterWriteBin  the id of the write that stored this generation (a random integer)
//
// A swap is one write: at generation 0 a create-only put, otherwise an update-only put
// filtered by an expression "RegisterGenBin = gen" (the record's own generation is not
// used: it wraps at 2^16). A write refused (KEY_EXISTS, KEY_NOT_FOUND, FILTERED_OUT) is
// followed by a read of the record: the stored register of a Conflict, or this call's
// own write (RegisterWriteBin) at gen+1 when an earlier try whose outcome was unknown
// landed. A try is retried as every write of this store is (Config.Attempts); a try
// that lands late finds a later generation and is filtered out. When the tries run out
// (each in doubt, say), the register is read once more to resolve the outcome before
// an error is returned. ReadRegisters is one
// batch read (one command per node).
const (
	// RegisterSetPrefix is prepended to a lock set's name to name its register set.
	RegisterSetPrefix = "R#"
	// RegisterGenBin is a register record's generation (an integer).
	RegisterGenBin = "dcsync_gen"
	// RegisterValueBin is a register record's value: a format byte, 1, then the value.
	RegisterValueBin = "dcsync_value"
	// RegisterWriteBin is the id of the write that stored the register's generation.
	RegisterWriteBin = "dcsync_write"
)

// registerFormat is the first byte of RegisterValueBin: the value follows.
const registerFormat = 1

var registerBins = []string{RegisterGenBin, RegisterValueBin, RegisterWriteBin}

var _ driver.RegisterStore = (*Store)(nil)

// registerKey is the key of k's register record; a set name too long for Aerospike is
// InvalidArgument.
func (s *Store) registerKey(k dcsync.Key) (*as.Key, error) {
	set := RegisterSetPrefix + s.lockSet(k)
	if len(set) > layout.MaxSetName {
		return nil, driver.Errorf(dcsync.InvalidArgument, "aerospike.Validate", "register set name %q is longer than %d bytes", set, layout.MaxSetName)
	}
	key, err := as.NewKey(s.cfg.Namespace, set, layout.IdentityKey(k))
	if err != nil {
		return nil, driver.Errorf(dcsync.Internal, "aerospike.Key", "register key: %w", err)
	}
	return key, nil
}

// storedRegister is a register record as read: the register and its write id.
type storedRegister struct {
	reg   driver.Register
	write int64
}

// parseRegister decodes a register record (nil: absent, Gen 0).
func parseRegister(op string, rec *as.Record) (storedRegister, error) {
	var r storedRegister
	if rec == nil {
		return r, nil
	}
	gen, ok := intOf(rec.Bins[RegisterGenBin])
	v, vok := rec.Bins[RegisterValueBin].([]byte)
	if !ok || gen <= 0 || !vok || len(v) == 0 || v[0] != registerFormat {
		return storedRegister{}, driver.Errorf(dcsync.Internal, op, "register record %v: bins %v are not a register", rec.Key, rec.Bins)
	}
	r.reg = driver.Register{Gen: uint64(gen), Value: append([]byte{}, v[1:]...)}
	r.write, _ = intOf(rec.Bins[RegisterWriteBin])
	return r, nil
}

// SwapRegister implements driver.RegisterStore: one conditional write (see the
// register layout above).
func (s *Store) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	const op = "aerospike.SwapRegister"
	if err := driver.ValidateRegister(k, value); err != nil {
		return driver.Register{}, err
	}
	key, err := s.registerKey(k)
	if err != nil {
		return driver.Register{}, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := int64(binary.BigEndian.Uint64(b[:]) >> 1)
	ops := []*as.Operation{
		as.PutOp(as.NewBin(RegisterGenBin, int64(gen+1))),
		as.PutOp(as.NewBin(RegisterValueBin, append([]byte{registerFormat}, value...))),
		as.PutOp(as.NewBin(RegisterWriteBin, id)),
	}
	policy := func() *as.WritePolicy {
		wp := s.writePolicy(ctx, as.TTLDontExpire)
		if gen == 0 {
			wp.RecordExistsAction = as.CREATE_ONLY
		} else {
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.FilterExpression = as.ExpEq(as.ExpIntBin(RegisterGenBin), as.ExpIntVal(int64(gen)))
		}
		return wp
	}
	next := driver.Register{Gen: gen + 1, Value: append([]byte{}, value...)}
	var out driver.Register
	var conflict error
	err = s.retry(ctx, op, true, func(*attempt) error {
		out, conflict = driver.Register{}, nil
		if gen < math.MaxInt64 {
			_, werr := s.client.Operate(policy(), key, ops...)
			if werr == nil {
				out = next
				return nil
			}
			if !hasCode(werr, types.KEY_EXISTS_ERROR, types.KEY_NOT_FOUND_ERROR, types.FILTERED_OUT) {
				return werr
			}
		} // else no register gets to gen: it is a Conflict
		rec, gerr := s.client.Get(s.readPolicy(ctx), key, registerBins...)
		if gerr != nil && !hasCode(gerr, types.KEY_NOT_FOUND_ERROR) {
			return gerr
		}
		cur, perr := parseRegister(op, rec)
		if perr != nil {
			return perr
		}
		if cur.reg.Gen == gen+1 && cur.write == id {
			out = next // an earlier try of this call landed
			return nil
		}
		out = cur.reg
		conflict = driver.Errorf(dcsync.Conflict, op, "register %s is at generation %d, not %d", k, cur.reg.Gen, gen)
		return nil
	})
	if err != nil {
		return s.resolveRegister(ctx, op, key, k, gen, id, next, err)
	}
	return out, conflict
}

// resolveRegister settles a swap whose tries ran out (err: RetriesExhausted or
// Connection, a try possibly applied) by reading the register, as
// driver.RegisterStore says: this call's own write at gen+1 is success, another
// generation Conflict; the register still at gen (or no read getting through) leaves
// the outcome unknown, and err is returned.
func (s *Store) resolveRegister(ctx context.Context, op string, key *as.Key, k dcsync.Key, gen uint64, id int64, next driver.Register, err error) (driver.Register, error) {
	if c := dcsync.CodeOf(err); c != dcsync.RetriesExhausted && c != dcsync.Connection {
		return driver.Register{}, err
	}
	var cur storedRegister
	rerr := s.retry(ctx, op, false, func(*attempt) error {
		rec, gerr := s.client.Get(s.readPolicy(ctx), key, registerBins...)
		if gerr != nil && !hasCode(gerr, types.KEY_NOT_FOUND_ERROR) {
			return gerr
		}
		var perr error
		cur, perr = parseRegister(op, rec)
		return perr
	})
	switch {
	case rerr != nil || cur.reg.Gen == gen:
		return driver.Register{}, err
	case cur.reg.Gen == gen+1 && cur.write == id:
		return next, nil
	}
	return cur.reg, driver.Errorf(dcsync.Conflict, op, "register %s is at generation %d, not %d", k, cur.reg.Gen, gen)
}

// ReadRegisters implements driver.RegisterStore: one batch read of every register
// record (one command per node). When the read fails, each register's result carries
// its error.
func (s *Store) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	const op = "aerospike.ReadRegisters"
	if err := driver.ValidateRegisterKeys(keys); err != nil {
		return nil, err
	}
	recs := make([]as.BatchRecordIfc, len(keys))
	for i, k := range keys {
		key, err := s.registerKey(k)
		if err != nil {
			return nil, err
		}
		recs[i] = as.NewBatchRead(nil, key, registerBins)
	}
	out := make([]driver.RegisterResult, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	err := s.runBatchUpTo(ctx, op, false, recs, 0, nil, types.KEY_NOT_FOUND_ERROR)
	for i := range keys {
		br := recs[i].BatchRec()
		switch {
		case br.ResultCode == types.KEY_NOT_FOUND_ERROR:
		case br.ResultCode == types.OK && br.Record != nil:
			cur, perr := parseRegister(op, br.Record)
			out[i] = driver.RegisterResult{Register: cur.reg, Err: perr}
		default:
			out[i].Err = failed(op, err)
		}
	}
	return out, nil
}
