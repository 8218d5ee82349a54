package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"math"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.RegisterStore = (*Store)(nil)

// Registers (driver.RegisterStore) live in a table of their own, created by the first
// SwapRegister of a file (in that write's transaction, as the queue tables are created
// by the first CreateQueue): one row per register, keyed as dcsync_locks is (level, the
// farm or "" at level XDC, client, name), with its generation and value. Nothing else
// reads or writes the table; registers are never swept or deleted.
const registerSchema = `CREATE TABLE IF NOT EXISTS dcsync_registers (
	level INTEGER NOT NULL, farm TEXT NOT NULL, client TEXT NOT NULL, name TEXT NOT NULL,
	gen INTEGER NOT NULL, value BLOB NOT NULL,
	PRIMARY KEY (level, farm, client, name)) WITHOUT ROWID;`

const registerTable = "dcsync_registers"

// readRegister reads the register at k in q's transaction (Gen 0: absent).
func readRegister(ctx context.Context, q queryRower, k dcsync.Key) (driver.Register, error) {
	var r driver.Register
	var gen int64
	err := q.QueryRowContext(ctx, `SELECT gen, value FROM dcsync_registers WHERE `+lockWhere, lockArgs(k)...).Scan(&gen, &r.Value)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Register{}, nil
	}
	if err != nil {
		return driver.Register{}, err
	}
	r.Gen = uint64(gen)
	if r.Value == nil {
		r.Value = []byte{}
	}
	return r, nil
}

// SwapRegister implements driver.RegisterStore: one IMMEDIATE transaction reads the
// register and, when its generation is gen, writes generation gen+1. The transaction
// commits or rolls back whole (no write of this store lands late: see the package
// doc), so an error other than Conflict means nothing was written.
func (s *Store) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	const op = "sqlite.SwapRegister"
	if err := driver.ValidateRegister(k, value); err != nil {
		return driver.Register{}, err
	}
	var out driver.Register
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		out = driver.Register{}
		if _, err := tx.ExecContext(ctx, registerSchema); err != nil {
			return driver.Errorf(dcsync.TableCreation, op, "%s: creating the register table: %w", s.path, err)
		}
		cur, err := readRegister(ctx, tx, k)
		if err != nil {
			return err
		}
		if cur.Gen != gen {
			out = cur
			return driver.Errorf(dcsync.Conflict, op, "register %s is at generation %d, not %d", k, cur.Gen, gen)
		}
		if gen >= math.MaxInt64 {
			return driver.Errorf(dcsync.InvalidArgument, op, "register %s: generation %d is this store's last", k, gen)
		}
		v := append([]byte{}, value...) // never nil: a nil []byte is NULL to database/sql
		if _, err := tx.ExecContext(ctx, `INSERT INTO dcsync_registers (level, farm, client, name, gen, value) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (level, farm, client, name) DO UPDATE SET gen = excluded.gen, value = excluded.value`,
			append(lockArgs(k), int64(gen)+1, v)...); err != nil {
			return err
		}
		out = driver.Register{Gen: gen + 1, Value: append([]byte{}, value...)}
		return nil
	})
	if err != nil && dcsync.CodeOf(err) != dcsync.Conflict {
		return driver.Register{}, err
	}
	return out, err
}

// ReadRegisters implements driver.RegisterStore: every register in one read
// transaction (one snapshot). A file without the register table has no registers.
func (s *Store) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	const op = "sqlite.ReadRegisters"
	if err := driver.ValidateRegisterKeys(keys); err != nil {
		return nil, err
	}
	out := make([]driver.RegisterResult, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	err := s.read(ctx, op, func(tx *sql.Tx) error {
		clear(out)
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, registerTable).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		for i, k := range keys {
			r, err := readRegister(ctx, tx, k)
			if err != nil {
				return err
			}
			out[i].Register = r
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
