// Package sqlite is dcsync's embedded default store: one SQLite file, correct across
// the processes of one host. It runs in WAL mode, and every update is one IMMEDIATE
// transaction, so processes that share the file serialise their writes and never see
// half an update. TTLs are enforced on read, by the host's clock, and expired rows are
// swept as they are met and, at most once a minute, all at once.
//
// Every call honours its context, also while it waits for another process's write
// lock: SQLite's own busy handler cannot be interrupted, so the store sets it to zero
// and waits in Go, retrying with a short backoff until the lock is free, the busy
// timeout (WithBusyTimeout) runs out, or ctx ends. A call cut short by ctx returns a
// Connection error that matches ctx's error with errors.Is, and has written nothing.
//
// A file this process may read but not write (permissions, a read-only mount, an
// immutable file) is opened for reading: counts and lock states can be read, and every
// write fails with NotImplemented, naming the file, before any I/O. Opening it needs the
// dcsync tables to be there already (TableCreation otherwise). Every error names the
// file.
//
// No write is retried in doubt. A transaction is run again only after it failed with
// SQLITE_BUSY before its COMMIT, rolled back, having written nothing (in WAL mode the
// COMMIT of a transaction that holds the write lock does not fail busy); an error at
// COMMIT is returned (Connection), not retried. So no attempt of a write can land
// after a later write, as a network store's can. A caller that calls again after an
// error is covered by the queue's conditions all the same: a commit applies only under
// the owner's token and above the stored version (an equal value already stored
// returns nil), a claim only above the stored token, a trim never lowers the floor, an
// abort writes a tombstone only where no event is, and an append with ids is
// deduplicated.
//
// Latch counts are int64. An update that would take a farm's cell, or the count at the
// key's level, past the int64 range is refused with InvalidArgument and writes nothing.
// An XDC sum can still exceed the range when DC-level updates of the same name raise
// several farms' cells near the limit; such a sum reads as math.MaxInt64 or
// math.MinInt64 (its sign, which is what waiting depends on, is exact), and XDC
// updates that bring it back towards zero are accepted.
//
// Registers (driver.RegisterStore: the election's leader record, the semaphore's and
// read-write lock's counts) are rows of table dcsync_registers (level, farm, client,
// name, gen, value), keyed like dcsync_locks (the farm at level DC, the empty string at XDC), created
// by the first SwapRegister; a swap is one IMMEDIATE transaction that compares the
// generation. Rows are never swept.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	sqlite3 "modernc.org/sqlite"
	sqlite3lib "modernc.org/sqlite/lib"
)

// DefaultBusyTimeout is how long a call waits for another process's write lock.
const DefaultBusyTimeout = 10 * time.Second

const sweepEvery = time.Minute

// maxBusySleep caps the pause between two tries for a lock another process holds.
const maxBusySleep = 20 * time.Millisecond

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

// tables are the tables schema creates.
var tables = []string{"dcsync_locks", "dcsync_fences", "dcsync_latch_cells"}

// Store is a driver.Store in one SQLite file.
type Store struct {
	db       *sql.DB
	path     string
	now      func() time.Time
	busy     time.Duration
	readOnly bool

	wgate     writeGate  // one writer of this process at a time; waiting honours ctx
	lastSweep time.Time  // guarded by wgate
	queues    queueState // queue tables' cached ids (queue.go)

	closeOnce sync.Once
	done      chan struct{} // closed by Close
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.CloseNotifier = (*Store)(nil)
)

// Option configures a Store.
type Option func(*config)

type config struct {
	busy time.Duration
	now  func() time.Time
}

// WithBusyTimeout sets how long a call waits for another process's write lock
// (DefaultBusyTimeout if unset); ctx may end the wait sooner. When it runs out the call
// fails with a Connection error and writes nothing.
func WithBusyTimeout(d time.Duration) Option { return func(c *config) { c.busy = d } }

// WithClock makes the store read time from now instead of time.Now; for tests. Every
// process sharing a file must use the same clock.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// Open opens the store in the file at path, creating the file and the dcsync tables if
// needed. A file this process cannot write is opened for reading only (see the package
// doc). Errors name the file.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	const op = "sqlite.Open"
	c := config{busy: DefaultBusyTimeout, now: time.Now}
	for _, o := range opts {
		o(&c)
	}
	if path == "" {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "path is empty")
	}
	if c.busy < 0 {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "busy timeout %v is negative", c.busy)
	}
	readOnly, err := probe(path)
	if err != nil {
		return nil, driver.Errorf(dcsync.Connection, op, "%s: %w", path, err)
	}
	// SQLite's busy handler is off (busy_timeout 0): waits for a lock happen in retry,
	// where ctx can end them. WAL mode is set once, in init: it is kept in the file.
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(0)")
	if readOnly {
		q.Add("mode", "ro")
	} else {
		q.Add("_pragma", "synchronous(FULL)")
		q.Add("_txlock", "immediate")
	}
	db, err := sql.Open("sqlite", fileURI(path)+"?"+q.Encode())
	if err != nil {
		return nil, driver.Errorf(dcsync.Connection, op, "%s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	s := &Store{db: db, path: path, now: c.now, busy: c.busy, readOnly: readOnly,
		done: make(chan struct{})}
	if err := s.init(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// probe reports whether the file at path exists and cannot be opened for writing by
// this process. A missing file is created by Open; its directory must exist.
func probe(path string) (readOnly bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	switch {
	case err == nil:
		return false, f.Close()
	case errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS):
		if f, err := os.Open(path); err != nil {
			return false, err
		} else {
			f.Close()
		}
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(path)
		if st, err := os.Stat(dir); err != nil {
			return false, fmt.Errorf("cannot create the file: %w", err)
		} else if !st.IsDir() {
			return false, fmt.Errorf("cannot create the file: %s is not a directory", dir)
		}
		return false, nil
	}
	return false, err
}

// fileURI returns path as an SQLite "file:" URI, every special character escaped (a
// '?' or '#' in a file name is part of the name).
func fileURI(path string) string {
	p := (&url.URL{Path: filepath.ToSlash(path)}).EscapedPath()
	if filepath.IsAbs(path) {
		return "file://" + p // empty authority: the path may begin with "//"
	}
	return "file:" + p
}

// init checks for the dcsync tables and, when the file is writable, creates them and
// puts the file in WAL mode. It writes nothing when both are already there.
func (s *Store) init(ctx context.Context) error {
	const op = "sqlite.Open"
	var n int
	var mode string
	err := s.retry(ctx, op, func() error {
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name IN (?, ?, ?)`,
			tables[0], tables[1], tables[2]).Scan(&n); err != nil {
			return err
		}
		return s.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode)
	})
	if err != nil {
		return err
	}
	if n == len(tables) && (mode == "wal" || s.readOnly) {
		return nil
	}
	if s.readOnly {
		return driver.Errorf(dcsync.TableCreation, op, "%s is read-only for this process and has no dcsync tables (%d of %d)", s.path, n, len(tables))
	}
	if mode != "wal" {
		// Not inside a transaction: SQLite refuses to change the mode there.
		if err := s.retry(ctx, op, func() error {
			_, err := s.db.ExecContext(ctx, `PRAGMA journal_mode = WAL`)
			return err
		}); err != nil {
			return err
		}
	}
	if n == len(tables) {
		return nil
	}
	return s.write(ctx, op, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, schema)
		return err
	})
}

// Close closes the database. Calls after Close fail with a Connection error; calls in
// progress end with one. Close is idempotent.
func (s *Store) Close() error {
	err := error(nil)
	s.closeOnce.Do(func() {
		close(s.done)
		err = s.db.Close()
	})
	return err
}

// Done returns a channel that Close closes, so that waiters (the latch watcher) end
// at once when the store closes.
func (s *Store) Done() <-chan struct{} { return s.done }

func (s *Store) closedErr(op string) error {
	return driver.Errorf(dcsync.Connection, op, "%s: the store is closed", s.path)
}

// Path returns the file the store is in.
func (s *Store) Path() string { return s.path }

// ReadOnly reports whether the file was opened for reading only.
func (s *Store) ReadOnly() bool { return s.readOnly }

func sqliteCode(err error) int {
	var se *sqlite3.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

func isClosed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func isBusy(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3lib.SQLITE_BUSY || c == sqlite3lib.SQLITE_LOCKED
}

// classify turns a database error into a dcsync error naming the file: a context that
// ended, busy and I/O troubles are Connection (nothing was written: the transaction
// rolled back), a read-only file NotImplemented, the rest Internal. dcsync errors pass.
func (s *Store) classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *dcsync.Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return driver.Errorf(dcsync.Connection, op, "%s: %w", s.path, err)
	}
	switch sqliteCode(err) {
	case sqlite3lib.SQLITE_READONLY:
		return driver.Errorf(dcsync.NotImplemented, op, "%s cannot be written by this process: %w", s.path, err)
	case sqlite3lib.SQLITE_BUSY, sqlite3lib.SQLITE_LOCKED, sqlite3lib.SQLITE_IOERR, sqlite3lib.SQLITE_CANTOPEN, sqlite3lib.SQLITE_FULL, sqlite3lib.SQLITE_PERM:
		return driver.Errorf(dcsync.Connection, op, "%s: %w", s.path, err)
	}
	return driver.Errorf(dcsync.Internal, op, "%s: %w", s.path, err)
}

// ctxErr reports that ctx ended while the call waited, with the store's last error.
func (s *Store) ctxErr(ctx context.Context, op string, last error) error {
	if last != nil {
		return driver.Errorf(dcsync.Connection, op, "%s: gave up waiting for another connection's lock on the file (%v): %w", s.path, last, context.Cause(ctx))
	}
	return driver.Errorf(dcsync.Connection, op, "%s: %w", s.path, context.Cause(ctx))
}

// retry runs fn until it returns anything but "busy" (another process holds a lock
// fn needs), pausing between tries, for at most the busy timeout and while ctx lasts.
// fn must have no effect when it fails busy: a transaction that rolled back.
func (s *Store) retry(ctx context.Context, op string, fn func() error) error {
	var giveUp time.Time
	pause := time.Millisecond
	for {
		select {
		case <-s.done:
			return s.closedErr(op)
		default:
		}
		if ctx.Err() != nil {
			return s.ctxErr(ctx, op, nil)
		}
		err := fn()
		if err != nil && isClosed(s.done) {
			return s.closedErr(op) // the database was closed under the call
		}
		if !isBusy(err) {
			var de *dcsync.Error
			if err != nil && ctx.Err() != nil && !errors.As(err, &de) {
				return s.ctxErr(ctx, op, err)
			}
			return s.classify(op, err)
		}
		now := time.Now()
		if giveUp.IsZero() {
			giveUp = now.Add(s.busy)
		}
		left := giveUp.Sub(now)
		if left <= 0 {
			return driver.Errorf(dcsync.Connection, op, "%s: another connection to the file (another process, or another Store) held its lock for the whole busy timeout (%v): %w", s.path, s.busy, err)
		}
		t := time.NewTimer(min(pause/2+rand.N(pause/2+1), left))
		select {
		case <-ctx.Done():
			t.Stop()
			return s.ctxErr(ctx, op, err)
		case <-s.done:
			t.Stop()
			return s.closedErr(op)
		case <-t.C:
		}
		pause = min(2*pause, maxBusySleep)
	}
}

// write runs fn in one IMMEDIATE transaction and commits it, or rolls it back when fn
// fails. It waits for this process's other writers and for other processes' write
// locks only while ctx lasts.
func (s *Store) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	return s.writeAs(ctx, op, false, fn)
}

// writeUrgent is write for a lease renewal: it goes before every writer of this
// process still waiting that is not urgent (writeGate).
func (s *Store) writeUrgent(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	return s.writeAs(ctx, op, true, fn)
}

func (s *Store) writeAs(ctx context.Context, op string, urgent bool, fn func(tx *sql.Tx) error) error {
	if s.readOnly {
		return driver.Errorf(dcsync.NotImplemented, op, "%s is opened read-only (this process cannot write the file): writes are refused", s.path)
	}
	if !s.wgate.acquire(ctx.Done(), s.done, urgent) {
		if isClosed(s.done) {
			return s.closedErr(op)
		}
		return s.ctxErr(ctx, op, nil)
	}
	defer s.wgate.release()
	return s.retry(ctx, op, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		now := s.now()
		swept := now.Sub(s.lastSweep) >= sweepEvery
		if swept {
			if err := sweep(ctx, tx, now); err != nil {
				tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if swept {
			s.lastSweep = now
		}
		return nil
	})
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
}, k dcsync.Key, now time.Time) (driver.LockState, bool, error) {
	var st driver.LockState
	var exp int64
	err := q.QueryRowContext(ctx, `SELECT owner, token, expires_ms FROM dcsync_locks WHERE `+lockWhere+` AND expires_ms > ?`,
		append(lockArgs(k), now.UnixMilli())...).Scan(&st.Owner, &st.Token, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return st, false, nil
	}
	st.Expires = time.UnixMilli(exp)
	return st, err == nil, err
}

// AcquireLock implements driver.LockStore.
func (s *Store) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	if err := driver.CheckLease(k, owner, ttl); err != nil {
		return driver.LockState{}, err
	}
	var st driver.LockState
	err := s.write(ctx, "sqlite.AcquireLock", func(tx *sql.Tx) (err error) {
		st, err = acquireTx(ctx, tx, k, owner, ttl, s.now())
		return err
	})
	return st, err
}

// acquireTx takes k for owner in tx at now if it is free: the next fencing token and
// the lock row. A held lock gets its holder's state and LockUnavailable, written
// nothing; any other error is the database's.
func acquireTx(ctx context.Context, tx txQuerier, k dcsync.Key, owner string, ttl time.Duration, now time.Time) (driver.LockState, error) {
	held, ok, err := liveLock(ctx, tx, k, now)
	if err != nil {
		return driver.LockState{}, err
	}
	if ok {
		return held, driver.Errorf(dcsync.LockUnavailable, "sqlite.AcquireLock", "%s is held by %s", k, held.Owner)
	}
	var st driver.LockState
	err = tx.QueryRowContext(ctx, `INSERT INTO dcsync_fences (level, farm, client, name, token) VALUES (?, ?, ?, ?, 1)
		ON CONFLICT (level, farm, client, name) DO UPDATE SET token = token + 1 RETURNING token`, lockArgs(k)...).Scan(&st.Token)
	if err != nil {
		return driver.LockState{}, err
	}
	st.Owner, st.Expires = owner, now.Add(ttl)
	_, err = tx.ExecContext(ctx, `INSERT OR REPLACE INTO dcsync_locks (level, farm, client, name, owner, token, expires_ms)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, append(lockArgs(k), owner, st.Token, st.Expires.UnixMilli())...)
	if err != nil {
		return driver.LockState{}, err
	}
	return st, nil
}

// RefreshLock implements driver.LockStore.
func (s *Store) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	if err := driver.CheckLease(k, owner, ttl); err != nil {
		return driver.LockState{}, err
	}
	var st driver.LockState
	err := s.writeUrgent(ctx, "sqlite.RefreshLock", func(tx *sql.Tx) error {
		now := s.now()
		var err error
		st, err = refreshed(tx.QueryRowContext(ctx, refreshSQL, refreshArgs(k, owner, ttl, now)...), k, owner, ttl, now)
		return err
	})
	return st, err
}

// refreshSQL extends a lease its owner holds and has not let lapse (refreshArgs).
const refreshSQL = `UPDATE dcsync_locks SET expires_ms = ? WHERE ` + lockWhere + ` AND owner = ? AND expires_ms > ?
	RETURNING owner, token`

func refreshArgs(k dcsync.Key, owner string, ttl time.Duration, now time.Time) []any {
	return append(append([]any{now.Add(ttl).UnixMilli()}, lockArgs(k)...), owner, now.UnixMilli())
}

// refreshed reads the outcome of refreshSQL: the new state, LockLost when owner does not
// hold k (nothing changed), or the database's error.
func refreshed(row *sql.Row, k dcsync.Key, owner string, ttl time.Duration, now time.Time) (driver.LockState, error) {
	var st driver.LockState
	err := row.Scan(&st.Owner, &st.Token)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.LockState{}, driver.Errorf(dcsync.LockLost, "sqlite.RefreshLock", "%s is not held by %s", k, owner)
	}
	st.Expires = time.UnixMilli(now.Add(ttl).UnixMilli())
	return st, err
}

// ReleaseLock implements driver.LockStore.
func (s *Store) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	if err := driver.CheckLock(k, owner, 0); err != nil {
		return err
	}
	return s.write(ctx, "sqlite.ReleaseLock", func(tx *sql.Tx) error {
		return releaseTx(ctx, tx, k, owner, s.now())
	})
}

// releaseTx frees k in tx at now if owner holds it; LockLost, writing nothing, if not.
func releaseTx(ctx context.Context, tx txQuerier, k dcsync.Key, owner string, now time.Time) error {
	res, err := tx.ExecContext(ctx, `DELETE FROM dcsync_locks WHERE `+lockWhere+` AND owner = ? AND expires_ms > ?`,
		append(lockArgs(k), owner, now.UnixMilli())...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return driver.Errorf(dcsync.LockLost, "sqlite.ReleaseLock", "%s is not held by %s", k, owner)
	}
	return nil
}

// InspectLock implements driver.LockStore.
func (s *Store) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	const op = "sqlite.InspectLock"
	if err := driver.ValidateKey("lock", k); err != nil {
		return driver.LockState{}, err
	}
	var st driver.LockState
	var ok bool
	err := s.retry(ctx, op, func() (err error) {
		st, ok, err = liveLock(ctx, s.db, k, s.now())
		return err
	})
	if err != nil {
		return st, err
	}
	if !ok {
		return st, driver.Errorf(dcsync.NotFound, op, "%s is free", k)
	}
	return st, nil
}

type querier interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}

// latchSum reads a latch's counts at k's level, ignoring expired cells: the farm's
// cell (DC) or the sum of every farm's cell (XDC), added in Go, not by SQL's SUM, which
// fails on an int64 overflow and would make the latch unreadable.
func latchSum(ctx context.Context, q querier, k dcsync.Key, now time.Time) (bool, []int64, error) {
	var rows *sql.Rows
	var err error
	if k.Level == dcsync.XDC {
		rows, err = q.QueryContext(ctx, `SELECT count FROM dcsync_latch_cells
			WHERE client = ? AND name = ? AND expires_ms > ?`, k.Client, k.Name, now.UnixMilli())
	} else {
		rows, err = q.QueryContext(ctx, `SELECT count FROM dcsync_latch_cells
			WHERE client = ? AND name = ? AND farm = ? AND expires_ms > ?`, k.Client, k.Name, k.Farm, now.UnixMilli())
	}
	if err != nil {
		return false, nil, err
	}
	defer rows.Close()
	var counts []int64
	for rows.Next() {
		var c int64
		if err := rows.Scan(&c); err != nil {
			return false, nil, err
		}
		counts = append(counts, c)
	}
	return len(counts) > 0, counts, rows.Err()
}

// latchAt reads a latch's count at k's level (saturated at the int64 bounds).
func latchAt(ctx context.Context, q querier, k dcsync.Key, now time.Time) (driver.LatchCount, error) {
	found, counts, err := latchSum(ctx, q, k, now)
	return driver.LatchCount{Found: found, Count: driver.SumCounts(counts...)}, err
}

func putCell(ctx context.Context, tx *sql.Tx, k dcsync.Key, count int64, exp time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO dcsync_latch_cells (client, name, farm, count, expires_ms)
		VALUES (?, ?, ?, ?, ?)`, k.Client, k.Name, k.Farm, count, exp.UnixMilli())
	return err
}

// CreateLatch implements driver.LatchStore.
func (s *Store) CreateLatch(ctx context.Context, k dcsync.Key, count int64, ttl time.Duration) error {
	if err := driver.CheckLatch(k, ttl); err != nil {
		return err
	}
	if err := driver.ValidateCount(count); err != nil {
		return err
	}
	return s.write(ctx, "sqlite.CreateLatch", func(tx *sql.Tx) error {
		now := s.now()
		c, err := latchAt(ctx, tx, k, now)
		if err != nil {
			return err
		}
		if c.Found {
			return driver.Errorf(dcsync.AlreadyExists, "sqlite.CreateLatch", "latch %s exists", k)
		}
		return putCell(ctx, tx, k, count, now.Add(ttl))
	})
}

// EnsureLatch implements driver.LatchStore.
func (s *Store) EnsureLatch(ctx context.Context, k dcsync.Key, ttl time.Duration) (bool, error) {
	if err := driver.CheckLatch(k, ttl); err != nil {
		return false, err
	}
	created := false
	err := s.write(ctx, "sqlite.EnsureLatch", func(tx *sql.Tx) error {
		created = false
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

// AddLatch implements driver.LatchStore. It refuses, with InvalidArgument and writing
// nothing, an update that would take the caller's cell or the count at k's level past
// the int64 range (at XDC, an update that brings an out-of-range sum towards zero is
// accepted; see the package doc).
func (s *Store) AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error) {
	const op = "sqlite.AddLatch"
	if err := driver.CheckLatch(k, 0); err != nil {
		return 0, err
	}
	var after int64
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		now := s.now()
		found, counts, err := latchSum(ctx, tx, k, now)
		if err != nil {
			return err
		}
		if !found {
			return driver.Errorf(dcsync.NotFound, op, "latch %s does not exist", k)
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
		cell, err := driver.AddCount(op, own, delta)
		if err != nil {
			return driver.Errorf(dcsync.InvalidArgument, op, "latch %s: adding %d to farm %s's count %d would overflow int64; nothing was written", k, delta, k.Farm, own)
		}
		if !driver.SumUpdateFits(counts, delta) {
			return driver.Errorf(dcsync.InvalidArgument, op, "latch %s: adding %d to count %d would overflow int64; nothing was written", k, delta, driver.SumCounts(counts...))
		}
		after = driver.SumCounts(append(counts, delta)...)
		return putCell(ctx, tx, k, cell, time.UnixMilli(expiresMS))
	})
	return after, err
}

// ReadLatches implements driver.LatchStore. The reads share one snapshot.
func (s *Store) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]driver.LatchCount, error) {
	const op = "sqlite.ReadLatches"
	for _, k := range keys {
		if err := driver.CheckLatch(k, 0); err != nil {
			return nil, err
		}
	}
	out := make([]driver.LatchCount, len(keys))
	err := s.retry(ctx, op, func() error {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		// A deferred transaction gives every read one snapshot without taking the
		// write lock.
		if _, err := conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
			return err
		}
		defer conn.ExecContext(context.Background(), "ROLLBACK")
		now := s.now()
		for i, k := range keys {
			if out[i], err = latchAt(ctx, conn, k, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
