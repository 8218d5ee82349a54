package hbase

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// # Register layout (driver.RegisterStore)
//
// Registers live in the lock table (created by the first lock or register call, as
// the lock table is), family D, in rows of their own: Salt("R#" + layout.IdentityKey(k)),
// next to the earlier layout's fencing counters (Salt("F#" + ...)). A Java lock row is
// Salt("DC#...") or Salt("XDC#..."): no Java client reads or writes a register row, and
// ListLocks skips it (layout.ParseHBaseLockRow does not parse it). The identity key is
// unambiguous and holds the farm only at level DC, so a DC register is its farm's own
// and an XDC register one for every farm. Cells, without TTL (a register never
// expires and is never deleted):
//
//	D:G  the generation, 8-byte big-endian
//	D:V  the value (possibly empty)
//	D:W  the id of the write that stored this generation (8 random bytes)
//
// A swap is one CheckAndMutateRead: "D:G absent" (generation 0) or "D:G holds gen",
// then Put G = gen+1, V, W, and the row read back in the same call (the stored
// register of a Conflict). A try that lands late finds another generation and changes
// nothing. An outcome that is unknown is resolved by reading the row: this write's W at
// generation gen+1 is success, another generation is Conflict, and the generation gen
// still there means the try was not applied (yet): it is sent again (with the same W;
// the earlier try, should it land later, finds gen+1).

var (
	qualRegGen   = []byte("G")
	qualRegValue = []byte("V")
	qualRegWrite = []byte("W")
	registerCols = []hbaserpc.Column{{Family: famLock, Qualifier: qualRegGen}, {Family: famLock, Qualifier: qualRegValue}, {Family: famLock, Qualifier: qualRegWrite}}
)

var _ driver.RegisterStore = (*Store)(nil)

// registerRow is the row of k's register in the lock table.
func registerRow(k dcsync.Key) []byte { return layout.Salt("R#" + layout.IdentityKey(k)) }

// storedRegister is a register row as read: the register and its write id.
type storedRegister struct {
	reg   driver.Register
	write []byte
}

// parseRegister decodes a register row's cells (none: absent, Gen 0).
func parseRegister(op string, cells []hbaserpc.Cell) (storedRegister, error) {
	var r storedRegister
	var value []byte
	for _, c := range cells {
		if !bytes.Equal(c.Family, famLock) {
			continue
		}
		switch {
		case bytes.Equal(c.Qualifier, qualRegGen):
			if len(c.Value) != 8 {
				return storedRegister{}, driver.Errorf(dcsync.Internal, op, "register row %q: generation cell of %d bytes", c.Row, len(c.Value))
			}
			r.reg.Gen = binary.BigEndian.Uint64(c.Value)
		case bytes.Equal(c.Qualifier, qualRegValue):
			value = c.Value
		case bytes.Equal(c.Qualifier, qualRegWrite):
			r.write = c.Value
		}
	}
	if r.reg.Gen > 0 {
		r.reg.Value = append([]byte{}, value...)
	}
	return r, nil
}

// SwapRegister implements driver.RegisterStore: one CheckAndMutateRead conditioned on
// the generation cell (see the register layout above).
func (s *Store) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	const op = "hbase.SwapRegister"
	if err := driver.ValidateRegister(k, value); err != nil {
		return driver.Register{}, err
	}
	if err := s.check(op); err != nil {
		return driver.Register{}, err
	}
	if err := s.ready(ctx, op, &s.locks); err != nil {
		return driver.Register{}, err
	}
	if gen == ^uint64(0) {
		// No register gets there; the put below would wrap around.
		return s.registerConflict(ctx, op, k, gen)
	}
	row := registerRow(k)
	cond := hbaserpc.IfEquals(famLock, qualRegGen, be64(gen))
	if gen == 0 {
		cond = hbaserpc.IfAbsent(famLock, qualRegGen)
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	put := &hbaserpc.Put{Row: row, Values: []hbaserpc.Value{
		{Family: famLock, Qualifier: qualRegGen, Value: be64(gen + 1)},
		{Family: famLock, Qualifier: qualRegValue, Value: append([]byte{}, value...)},
		{Family: famLock, Qualifier: qualRegWrite, Value: id},
	}}
	next := driver.Register{Gen: gen + 1, Value: append([]byte{}, value...)}
	var last error
	for try := 0; try < maxTries; try++ {
		applied, _, read, err := s.db.CheckAndMutateRead(ctx, s.lockTable, row, cond, []hbaserpc.Mutation{put}, registerCols...)
		if err == nil {
			if applied {
				return next, nil
			}
			cur, err := parseRegister(op, read)
			if err != nil {
				return driver.Register{}, err
			}
			if cur.reg.Gen == gen+1 && bytes.Equal(cur.write, id) {
				return next, nil // an earlier try of this call landed
			}
			return cur.reg, conflict(op, k, cur.reg.Gen, gen)
		}
		if !inDoubt(err) {
			return driver.Register{}, wrap(err, op)
		}
		last = err
		s.log.Debug("hbase: register swap in doubt; reading it back", "key", k.String(), "gen", gen, "err", err)
		cells, rerr := s.db.Get(ctx, s.lockTable, row, registerCols...)
		if rerr != nil {
			return driver.Register{}, driver.Errorf(dcsync.Connection, op, "register %s: the swap's outcome is unknown (%v), and reading it back failed: %w", k, err, rerr)
		}
		cur, perr := parseRegister(op, cells)
		if perr != nil {
			return driver.Register{}, perr
		}
		switch {
		case cur.reg.Gen == gen+1 && bytes.Equal(cur.write, id):
			return next, nil
		case cur.reg.Gen != gen:
			return cur.reg, conflict(op, k, cur.reg.Gen, gen)
		}
		// Still at gen: this try was not applied, or not yet. Send it again; the
		// earlier one, should it land later, finds gen+1 and changes nothing.
	}
	return driver.Register{}, driver.Errorf(dcsync.Connection, op, "register %s: the swap's outcome is unknown after %d tries, each in doubt with the register still at generation %d: %w", k, maxTries, gen, last)
}

// registerConflict reads k's register and returns it with a Conflict (gen is not its
// generation).
func (s *Store) registerConflict(ctx context.Context, op string, k dcsync.Key, gen uint64) (driver.Register, error) {
	cells, err := s.db.Get(ctx, s.lockTable, registerRow(k), registerCols...)
	if err != nil {
		return driver.Register{}, wrap(err, op)
	}
	cur, err := parseRegister(op, cells)
	if err != nil {
		return driver.Register{}, err
	}
	return cur.reg, conflict(op, k, cur.reg.Gen, gen)
}

func conflict(op string, k dcsync.Key, stored, gen uint64) error {
	return driver.Errorf(dcsync.Conflict, op, "register %s is at generation %d, not %d", k, stored, gen)
}

// ReadRegisters implements driver.RegisterStore: one MultiGet (one Multi RPC per region
// server; a single key is one Get). When the read fails, each register's result
// carries its error.
func (s *Store) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	const op = "hbase.ReadRegisters"
	if err := driver.ValidateRegisterKeys(keys); err != nil {
		return nil, err
	}
	if err := s.check(op); err != nil {
		return nil, err
	}
	out := make([]driver.RegisterResult, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	if err := s.ready(ctx, op, &s.locks); err != nil {
		return nil, err
	}
	var rows [][]hbaserpc.Cell
	var err error
	if len(keys) == 1 {
		var cells []hbaserpc.Cell
		cells, err = s.db.Get(ctx, s.lockTable, registerRow(keys[0]), registerCols...)
		rows = [][]hbaserpc.Cell{cells}
	} else {
		gets := make([]hbaserpc.Get, len(keys))
		for i, k := range keys {
			gets[i] = hbaserpc.Get{Row: registerRow(k), Columns: registerCols}
		}
		rows, err = s.db.MultiGet(ctx, s.lockTable, gets)
	}
	if err == nil && len(rows) != len(keys) {
		err = driver.Errorf(dcsync.Internal, op, "%d results for %d keys", len(rows), len(keys))
	}
	for i := range keys {
		if err != nil {
			out[i].Err = wrap(err, op)
			continue
		}
		cur, perr := parseRegister(op, rows[i])
		out[i] = driver.RegisterResult{Register: cur.reg, Err: perr}
	}
	return out, nil
}
