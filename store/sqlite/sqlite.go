// Package sqlite is dcsync's embedded default store: one SQLite file, correct across
// the processes of one host. It runs in WAL mode with a busy timeout, and every update
// is one IMMEDIATE transaction, so processes that share the file serialise their writes
// and never see half an update. TTLs are enforced on read, by the host's clock, and
// expired rows are swept as they are met and, at most once a minute, all at once.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	sqlite3 "modernc.org/sqlite"
	sqlite3lib "modernc.org/sqlite/lib"
)

// DefaultBusyTimeout is how long a transaction waits for another process's write.
const DefaultBusyTimeout = 10 * time.Second

const sweepEvery = time.Minute

const schema = `
CREATE TABLE IF NOT EXISTS dcsync_locks (
	level INTEGER NOT NULL, farm TEXT NOT NULL, client TEXT NOT NULL, name TEXT NOT NULL,
	owner TEXT NOT NULL, token INTEGER NOT NULL, expires_ms INTEGER NOT NULL,
	PRIMARY KEY (level, farm, client, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dcsync_fences (
	level INTEGER NOT NULL, farm TEXT NOT NULL, client TEXT NOT NULL, name TEXT NOT NULL,
	token INTEGER NOT NULL,
	PRIMARY KEY (level, farm, client, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dcsync_latch_cells (
	client TEXT NOT NULL, name TEXT NOT NULL, farm TEXT NOT NULL,
	count INTEGER NOT NULL, expires_ms INTEGER NOT NULL,
	PRIMARY KEY (client, name, farm)) WITHOUT ROWID;
`

// Store is a dcsync.Store in one SQLite file.
type Store struct {
	db  *sql.DB
	now func() time.Time

	wmu       sync.Mutex // serialises this process's writers; other processes wait on the busy timeout
	lastSweep time.Time  // guarded by wmu
}

var _ dcsync.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*config)

type config struct {
	busy time.Duration
	now  func() time.Time
}

// WithBusyTimeout sets how long a write waits for another process (DefaultBusyTimeout
// if unset). When it runs out the call fails with a Connection error and writes nothing.
func WithBusyTimeout(d time.Duration) Option { return func(c *config) { c.busy = d } }

// WithClock makes the store read time from now instead of time.Now; for tests. Every
// process sharing a file must use the same clock.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// Open opens (creating if needed) the store in the file at path.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	c := config{busy: DefaultBusyTimeout, now: time.Now}
	for _, o := range opts {
		o(&c)
	}
	if path == "" {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "sqlite.Open", "path is empty")
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", c.busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, dcsync.Errorf(dcsync.Connection, "sqlite.Open", "open %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	s := &Store{db: db, now: c.now}
	err = s.write(ctx, "sqlite.Open", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, schema)
		return err
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// classify turns a database error into a dcsync error: busy and I/O troubles are
// Connection (nothing was written: the transaction rolled back), the rest Internal.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *dcsync.Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return dcsync.Errorf(dcsync.Connection, op, "%w", err)
	}
	var se *sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3lib.SQLITE_BUSY, sqlite3lib.SQLITE_LOCKED, sqlite3lib.SQLITE_IOERR, sqlite3lib.SQLITE_CANTOPEN, sqlite3lib.SQLITE_FULL:
			return dcsync.Errorf(dcsync.Connection, op, "%w", err)
		}
	}
	return dcsync.Errorf(dcsync.Internal, op, "%w", err)
}

// write runs fn in one IMMEDIATE transaction and commits it, or rolls it back when fn
// fails.
func (s *Store) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(op, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return classify(op, err)
	}
	if now := s.now(); now.Sub(s.lastSweep) >= sweepEvery {
		if err := sweep(ctx, tx, now); err != nil {
			tx.Rollback()
			return classify(op, err)
		}
		s.lastSweep = now
	}
	return classify(op, tx.Commit())
}

func sweep(ctx context.Context, tx *sql.Tx, now time.Time) error {
	ms := now.UnixMilli()
	if _, err := tx.ExecContext(ctx, `DELETE FROM dcsync_locks WHERE expires_ms <= ?`, ms); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM dcsync_latch_cells WHERE expires_ms <= ?`, ms)
	return err
}

func lockFarm(k dcsync.Key) string {
	if k.Level == dcsync.XDC {
		return ""
	}
	return k.Farm
}

func lockArgs(k dcsync.Key) []any { return []any{int(k.Level), lockFarm(k), k.Client, k.Name} }

const lockWhere = `level = ? AND farm = ? AND client = ? AND name = ?`

// liveLock reads the unexpired lock at k.
func liveLock(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, k dcsync.Key, now time.Time) (dcsync.LockState, bool, error) {
	var st dcsync.LockState
	var exp int64
	err := q.QueryRowContext(ctx, `SELECT owner, token, expires_ms FROM dcsync_locks WHERE `+lockWhere+` AND expires_ms > ?`,
		append(lockArgs(k), now.UnixMilli())...).Scan(&st.Owner, &st.Token, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return st, false, nil
	}
	st.Expires = time.UnixMilli(exp)
	return st, err == nil, err
}

// AcquireLock implements dcsync.LockStore.
func (s *Store) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (dcsync.LockState, error) {
	if err := dcsync.CheckLease(k, owner, ttl); err != nil {
		return dcsync.LockState{}, err
	}
	var st dcsync.LockState
	err := s.write(ctx, "sqlite.AcquireLock", func(tx *sql.Tx) error {
		now := s.now()
		held, ok, err := liveLock(ctx, tx, k, now)
		if err != nil {
			return err
		}
		if ok {
			st = held
			return dcsync.Errorf(dcsync.LockUnavailable, "sqlite.AcquireLock", "%s is held by %s", k, held.Owner)
		}
		err = tx.QueryRowContext(ctx, `INSERT INTO dcsync_fences (level, farm, client, name, token) VALUES (?, ?, ?, ?, 1)
			ON CONFLICT (level, farm, client, name) DO UPDATE SET token = token + 1 RETURNING token`, lockArgs(k)...).Scan(&st.Token)
		if err != nil {
			return err
		}
		st.Owner, st.Expires = owner, now.Add(ttl)
		_, err = tx.ExecContext(ctx, `INSERT OR REPLACE INTO dcsync_locks (level, farm, client, name, owner, token, expires_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, append(lockArgs(k), owner, st.Token, st.Expires.UnixMilli())...)
		return err
	})
	return st, err
}

// RefreshLock implements dcsync.LockStore.
func (s *Store) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (dcsync.LockState, error) {
	if err := dcsync.CheckLease(k, owner, ttl); err != nil {
		return dcsync.LockState{}, err
	}
	var st dcsync.LockState
	err := s.write(ctx, "sqlite.RefreshLock", func(tx *sql.Tx) error {
		now := s.now()
		exp := now.Add(ttl).UnixMilli()
		err := tx.QueryRowContext(ctx, `UPDATE dcsync_locks SET expires_ms = ? WHERE `+lockWhere+` AND owner = ? AND expires_ms > ?
			RETURNING owner, token`, append(append([]any{exp}, lockArgs(k)...), owner, now.UnixMilli())...).Scan(&st.Owner, &st.Token)
		if errors.Is(err, sql.ErrNoRows) {
			return dcsync.Errorf(dcsync.LockLost, "sqlite.RefreshLock", "%s is not held by %s", k, owner)
		}
		st.Expires = time.UnixMilli(exp)
		return err
	})
	return st, err
}

// ReleaseLock implements dcsync.LockStore.
func (s *Store) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	if err := dcsync.CheckLock(k, owner, 0); err != nil {
		return err
	}
	return s.write(ctx, "sqlite.ReleaseLock", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM dcsync_locks WHERE `+lockWhere+` AND owner = ? AND expires_ms > ?`,
			append(lockArgs(k), owner, s.now().UnixMilli())...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return dcsync.Errorf(dcsync.LockLost, "sqlite.ReleaseLock", "%s is not held by %s", k, owner)
		}
		return nil
	})
}

// InspectLock implements dcsync.LockStore.
func (s *Store) InspectLock(ctx context.Context, k dcsync.Key) (dcsync.LockState, error) {
	if err := k.Validate("lock"); err != nil {
		return dcsync.LockState{}, err
	}
	st, ok, err := liveLock(ctx, s.db, k, s.now())
	if err != nil {
		return st, classify("sqlite.InspectLock", err)
	}
	if !ok {
		return st, dcsync.Errorf(dcsync.NotFound, "sqlite.InspectLock", "%s is free", k)
	}
	return st, nil
}

type querier interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// latchAt reads a latch's count at k's level, ignoring expired cells.
func latchAt(ctx context.Context, q querier, k dcsync.Key, now time.Time) (dcsync.LatchCount, error) {
	var n int64
	var sum sql.NullInt64
	var err error
	if k.Level == dcsync.XDC {
		err = q.QueryRowContext(ctx, `SELECT COUNT(*), SUM(count) FROM dcsync_latch_cells
			WHERE client = ? AND name = ? AND expires_ms > ?`, k.Client, k.Name, now.UnixMilli()).Scan(&n, &sum)
	} else {
		err = q.QueryRowContext(ctx, `SELECT COUNT(*), SUM(count) FROM dcsync_latch_cells
			WHERE client = ? AND name = ? AND farm = ? AND expires_ms > ?`, k.Client, k.Name, k.Farm, now.UnixMilli()).Scan(&n, &sum)
	}
	return dcsync.LatchCount{Found: n > 0, Count: sum.Int64}, err
}

func putCell(ctx context.Context, tx *sql.Tx, k dcsync.Key, count int64, exp time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO dcsync_latch_cells (client, name, farm, count, expires_ms)
		VALUES (?, ?, ?, ?, ?)`, k.Client, k.Name, k.Farm, count, exp.UnixMilli())
	return err
}

// CreateLatch implements dcsync.LatchStore.
func (s *Store) CreateLatch(ctx context.Context, k dcsync.Key, count int64, ttl time.Duration) error {
	if err := dcsync.CheckLatch(k, ttl); err != nil {
		return err
	}
	if err := dcsync.ValidateCount(count); err != nil {
		return err
	}
	return s.write(ctx, "sqlite.CreateLatch", func(tx *sql.Tx) error {
		now := s.now()
		c, err := latchAt(ctx, tx, k, now)
		if err != nil {
			return err
		}
		if c.Found {
			return dcsync.Errorf(dcsync.AlreadyExists, "sqlite.CreateLatch", "latch %s exists", k)
		}
		return putCell(ctx, tx, k, count, now.Add(ttl))
	})
}

// EnsureLatch implements dcsync.LatchStore.
func (s *Store) EnsureLatch(ctx context.Context, k dcsync.Key, ttl time.Duration) (bool, error) {
	if err := dcsync.CheckLatch(k, ttl); err != nil {
		return false, err
	}
	created := false
	err := s.write(ctx, "sqlite.EnsureLatch", func(tx *sql.Tx) error {
		now := s.now()
		c, err := latchAt(ctx, tx, k, now)
		if err != nil || c.Found {
			return err
		}
		created = true
		return putCell(ctx, tx, k, 0, now.Add(ttl))
	})
	return created && err == nil, err
}

// AddLatch implements dcsync.LatchStore.
func (s *Store) AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error) {
	if err := dcsync.CheckLatch(k, 0); err != nil {
		return 0, err
	}
	var after int64
	err := s.write(ctx, "sqlite.AddLatch", func(tx *sql.Tx) error {
		now := s.now()
		c, err := latchAt(ctx, tx, k, now)
		if err != nil {
			return err
		}
		if !c.Found {
			return dcsync.Errorf(dcsync.NotFound, "sqlite.AddLatch", "latch %s does not exist", k)
		}
		// The caller's cell may be absent (XDC, first update from this farm) or expired:
		// either way it starts from zero, and ends with the latch (the latest end of its
		// live cells). An update never changes when a latch ends.
		var own, expiresMS int64
		err = tx.QueryRowContext(ctx, `SELECT count, expires_ms FROM dcsync_latch_cells WHERE client = ? AND name = ? AND farm = ? AND expires_ms > ?`,
			k.Client, k.Name, k.Farm, now.UnixMilli()).Scan(&own, &expiresMS)
		if errors.Is(err, sql.ErrNoRows) {
			err = tx.QueryRowContext(ctx, `SELECT MAX(expires_ms) FROM dcsync_latch_cells WHERE client = ? AND name = ? AND expires_ms > ?`,
				k.Client, k.Name, now.UnixMilli()).Scan(&expiresMS)
		}
		if err != nil {
			return err
		}
		after = c.Count + delta
		return putCell(ctx, tx, k, own+delta, time.UnixMilli(expiresMS))
	})
	return after, err
}

// ReadLatches implements dcsync.LatchStore. The reads share one snapshot.
func (s *Store) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]dcsync.LatchCount, error) {
	for _, k := range keys {
		if err := dcsync.CheckLatch(k, 0); err != nil {
			return nil, err
		}
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, classify("sqlite.ReadLatches", err)
	}
	defer conn.Close()
	// A deferred transaction gives every read one snapshot without taking the write lock.
	if _, err := conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		return nil, classify("sqlite.ReadLatches", err)
	}
	defer conn.ExecContext(context.Background(), "ROLLBACK")
	now := s.now()
	out := make([]dcsync.LatchCount, len(keys))
	for i, k := range keys {
		if out[i], err = latchAt(ctx, conn, k, now); err != nil {
			return nil, classify("sqlite.ReadLatches", err)
		}
	}
	return out, nil
}
