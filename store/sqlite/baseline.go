package sqlite

import (
	"context"
	"database/sql"
	mrand "math/rand/v2"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.Baseliner = (*Store)(nil)

// Baseline returns raw statements on the store's own tables, each one autocommitted
// statement as a plain SQL client would send it: the lock floor inserts a row of
// dcsync_locks if absent and deletes it, the counter is a row of dcsync_latch_cells
// (client prefix, name "baseline"), updated in place. Close deletes both rows.
func (s *Store) Baseline(ctx context.Context, prefix string) (driver.Baseline, error) {
	const op = "sqlite.Baseline"
	if err := driver.ValidateID("baseline prefix", prefix); err != nil {
		return nil, err
	}
	if s.readOnly {
		return nil, driver.Errorf(dcsync.NotImplemented, op, "%s is opened read-only: a baseline writes", s.path)
	}
	b := &sqlBaseline{s: s, client: "dcsync-bench:" + prefix, q: -1 - mrand.Int64N(1<<62)}
	// The counter ends in a day, as a latch would; Close removes it before then.
	if _, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO dcsync_latch_cells (client, name, farm, count, expires_ms) VALUES (?, 'baseline', 'bench', 0, ?)`,
		b.client, s.now().UnixMilli()+86_400_000); err != nil {
		return nil, driver.Wrap(err, dcsync.Connection, op)
	}
	return b, nil
}

type sqlBaseline struct {
	s      *Store
	client string
	// The queue floor's rows: dcsync_queue_entries and dcsync_queue_offsets rows of
	// queue id q (negative: no queue has it), partition 0.
	q       int64
	qtables bool  // the queue tables exist (created by the first queue call)
	rows    int64 // rows written
	pos     int64 // the next row ReadRows reads
}

func (b *sqlBaseline) Describe() map[string]string {
	return map[string]string{
		"lock":    "INSERT OR IGNORE + DELETE (autocommit)",
		"add":     "UPDATE count = count + ? (autocommit)",
		"get":     "SELECT count",
		"enqueue": "INSERTs of the rows into dcsync_queue_entries (one IMMEDIATE transaction)",
		"receive": "SELECT of the rows by key range + INSERT OR REPLACE of an offset row (its own transaction)",
	}
}

func (b *sqlBaseline) LockPair(ctx context.Context) error {
	const op = "sqlite.Baseline"
	res, err := b.s.db.ExecContext(ctx, `INSERT OR IGNORE INTO dcsync_locks (level, farm, client, name, owner, token, expires_ms) VALUES (0, 'bench', ?, 'baseline', 'bench', 0, 0)`, b.client)
	if err != nil {
		return driver.Wrap(err, dcsync.Connection, op)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return driver.Errorf(dcsync.Internal, op, "baseline lock row exists")
	}
	if _, err := b.s.db.ExecContext(ctx, `DELETE FROM dcsync_locks WHERE level = 0 AND farm = 'bench' AND client = ? AND name = 'baseline'`, b.client); err != nil {
		return driver.Wrap(err, dcsync.Connection, op)
	}
	return nil
}

func (b *sqlBaseline) Add(ctx context.Context, delta int64) error {
	_, err := b.s.db.ExecContext(ctx, `UPDATE dcsync_latch_cells SET count = count + ? WHERE client = ? AND name = 'baseline' AND farm = 'bench'`, delta, b.client)
	return driver.Wrap(err, dcsync.Connection, "sqlite.Baseline")
}

func (b *sqlBaseline) Get(ctx context.Context) error {
	var n int64
	err := b.s.db.QueryRowContext(ctx, `SELECT count FROM dcsync_latch_cells WHERE client = ? AND name = 'baseline' AND farm = 'bench'`, b.client).Scan(&n)
	return driver.Wrap(err, dcsync.Connection, "sqlite.Baseline")
}

func (b *sqlBaseline) Close(ctx context.Context) error {
	if b.qtables {
		err := b.s.write(ctx, "sqlite.Baseline", func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `DELETE FROM dcsync_queue_entries WHERE q = ?`, b.q); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `DELETE FROM dcsync_queue_offsets WHERE q = ?`, b.q)
			return err
		})
		if err != nil {
			return err
		}
	}
	if _, err := b.s.db.ExecContext(ctx, `DELETE FROM dcsync_latch_cells WHERE client = ?`, b.client); err != nil {
		return driver.Wrap(err, dcsync.Connection, "sqlite.Baseline")
	}
	_, err := b.s.db.ExecContext(ctx, `DELETE FROM dcsync_locks WHERE client = ?`, b.client)
	return driver.Wrap(err, dcsync.Connection, "sqlite.Baseline")
}

var _ driver.QueueBaseline = (*sqlBaseline)(nil)

// queueTables creates the queue tables in tx unless the baseline has seen them.
func (b *sqlBaseline) queueTables(ctx context.Context, tx *sql.Tx) error {
	if b.qtables {
		return nil
	}
	_, err := tx.ExecContext(ctx, queueSchema)
	return err
}

// WriteRows implements driver.QueueBaseline: the rows' INSERTs into
// dcsync_queue_entries in one IMMEDIATE transaction, as an append writes its events
// (without the heads and ids it also writes).
func (b *sqlBaseline) WriteRows(ctx context.Context, payloads [][]byte) error {
	seq := b.rows
	err := b.s.write(ctx, "sqlite.Baseline", func(tx *sql.Tx) error {
		if err := b.queueTables(ctx, tx); err != nil {
			return err
		}
		st, err := tx.PrepareContext(ctx, `INSERT INTO dcsync_queue_entries (q, p, seq, key, id, payload, at_ms, aborted) VALUES (?, 0, ?, '', '', ?, ?, 0)`)
		if err != nil {
			return err
		}
		defer st.Close()
		now := time.Now().UnixMilli()
		for i, p := range payloads {
			if _, err := st.ExecContext(ctx, b.q, seq+int64(i), p, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		b.qtables = true
		b.rows += int64(len(payloads))
	}
	return err
}

// ReadRows implements driver.QueueBaseline: one SELECT of the rows by key range in a
// read transaction, as ReadQueue reads its entries (without the head it also reads).
func (b *sqlBaseline) ReadRows(ctx context.Context, n int) (int, error) {
	if b.pos+int64(n) > b.rows {
		b.pos = 0
	}
	from := b.pos
	b.pos = min(from+int64(n), b.rows)
	got := 0
	err := b.s.read(ctx, "sqlite.Baseline", func(tx *sql.Tx) error {
		got = 0
		rows, err := tx.QueryContext(ctx, `SELECT seq, key, id, payload, at_ms, aborted FROM dcsync_queue_entries
			WHERE q = ? AND p = 0 AND seq >= ? AND seq < ? ORDER BY seq`, b.q, from, from+int64(n))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seq, at int64
			var key, id string
			var payload []byte
			var aborted bool
			if err := rows.Scan(&seq, &key, &id, &payload, &at, &aborted); err != nil {
				return err
			}
			got++
		}
		return rows.Err()
	})
	return got, err
}

// CommitOffset implements driver.QueueBaseline: one INSERT OR REPLACE of an offset row
// in a transaction of its own, as an offset commit is one.
func (b *sqlBaseline) CommitOffset(ctx context.Context, next int64) error {
	err := b.s.write(ctx, "sqlite.Baseline", func(tx *sql.Tx) error {
		if err := b.queueTables(ctx, tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO dcsync_queue_offsets (q, g, p, token, next, attempts, held) VALUES (?, 'bench', 0, 0, ?, 0, 0)`, b.q, next)
		return err
	})
	if err == nil {
		b.qtables = true
	}
	return err
}
