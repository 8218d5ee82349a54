package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var (
	_ driver.QueueStore       = (*Store)(nil)
	_ driver.QueueTxCommitter = (*Store)(nil)
)

// The queue tables, created by the first CreateQueue of a file. A queue is known in
// the other tables by its integer id (dcsync_queues.id), which keeps their keys short.
// DeleteQueue (queue_delete.go) removes a queue's rows and its id may then be given
// to a queue created later: every call checks the id it cached against the file.
//
// Every partition has consecutive entries from floor to head-1: an append reserves and
// writes its seqs in one transaction, so the store has no holes and never needs
// tombstones (AbortQueueSeq still writes one where no entry is, for completeness).
// An id is remembered for duplicate detection until expires_ms (the append's time plus
// the queue's dedup window); expired ids are swept per queue at most once a minute,
// by appends and trims.
const queueSchema = `
CREATE TABLE IF NOT EXISTS dcsync_queues (
	id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, partitions INTEGER NOT NULL,
	groups TEXT NOT NULL, dedup_ns INTEGER NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS dcsync_queue_entries (
	q INTEGER NOT NULL, p INTEGER NOT NULL, seq INTEGER NOT NULL,
	key TEXT NOT NULL, id TEXT NOT NULL, payload BLOB, at_ms INTEGER NOT NULL, aborted INTEGER NOT NULL,
	PRIMARY KEY (q, p, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dcsync_queue_heads (
	q INTEGER NOT NULL, p INTEGER NOT NULL, head INTEGER NOT NULL, floor INTEGER NOT NULL,
	PRIMARY KEY (q, p)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dcsync_queue_offsets (
	q INTEGER NOT NULL, g TEXT NOT NULL, p INTEGER NOT NULL,
	token INTEGER NOT NULL, next INTEGER NOT NULL, attempts INTEGER NOT NULL, held INTEGER NOT NULL,
	version INTEGER NOT NULL DEFAULT 0, marks BLOB NOT NULL DEFAULT x'',
	PRIMARY KEY (q, g, p)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dcsync_queue_dedup (
	q INTEGER NOT NULL, id TEXT NOT NULL, p INTEGER NOT NULL, seq INTEGER NOT NULL, expires_ms INTEGER NOT NULL,
	PRIMARY KEY (q, id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dcsync_queue_dedup_expiry ON dcsync_queue_dedup (q, expires_ms);
`

// offsetColumns are the columns dcsync_queue_offsets gained after its first release
// (QueueOffset.Version and Marks). A file whose table lacks them (written by an earlier
// release) is read as if they held 0 and no marks, and gets them (ALTER TABLE ADD
// COLUMN, with those defaults) by this release's first CreateQueue, claim or commit on
// it, in a transaction of its own (CommitQueueOffsetTx: in the application's). Processes
// of an earlier release can still open the file, and their inserts take the defaults,
// but their commits ignore the version: do not run both releases' consumers on one
// queue.
const offsetColumns = `ALTER TABLE dcsync_queue_offsets ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dcsync_queue_offsets ADD COLUMN marks BLOB NOT NULL DEFAULT x'';`

// queueState caches what never changes once written: that the queue tables exist, and
// each queue's id and dedup window, and that the offsets table has its later columns.
// It also keeps when each queue's expired ids were last swept.
type queueState struct {
	mu      sync.Mutex
	tables  bool
	offCols bool // dcsync_queue_offsets has offsetColumns (seen committed)
	meta    map[string]queueMeta
	swept   map[int64]time.Time
}

type queueMeta struct {
	id    int64
	dedup time.Duration // the queue's DedupWindow
}

type queryRower interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// DB returns the store's database handle, for an application that writes its own
// tables in the same file and acknowledges queue events in the same transaction
// (CommitQueueOffsetTx). Do not close it or change its settings.
//
// The handle is opened with modernc.org/sqlite's _txlock=immediate, so BeginTx (without
// ReadOnly) issues BEGIN IMMEDIATE: the transaction takes the file's write lock when it
// begins and cannot fail later because another connection wrote first (with a plain,
// deferred BEGIN, a transaction that reads and then writes can fail with SQLITE_BUSY at
// its first write and must then be rolled back and rerun). BeginTx with ReadOnly issues
// a deferred BEGIN: a read snapshot that takes no lock.
//
// SQLite's own busy handler is off on this handle (busy_timeout 0): SQLite's wait for a
// lock cannot be interrupted by a context, so the store waits in Go instead (see the
// package doc). As a consequence BeginTx fails at once with SQLITE_BUSY while any other
// connection holds the write lock, this process's own store calls included: under a
// steady stream of appends nearly every BeginTx fails. Use WriteTx, which waits for the
// lock as the store's calls do, honouring ctx; with BeginTx, retry on SQLITE_BUSY.
func (s *Store) DB() *sql.DB { return s.db }

// WriteTx runs fn in one IMMEDIATE transaction of the store's database and commits it
// when fn returns nil, or rolls it back and returns fn's error (wrapped: errors.Is and
// errors.As see it). It waits for the write lock like the store's own writes: behind
// this process's other writers, and for other processes' locks while ctx lasts, up to
// the busy timeout. fn may be called again after an attempt that failed because the
// file was busy (that attempt was rolled back), so it must not have effects outside
// tx. fn must not call the store's other writing methods (they would wait for this
// transaction): use CommitQueueOffsetTx to acknowledge queue events within tx.
func (s *Store) WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.write(ctx, "sqlite.WriteTx", fn)
}

// read runs fn in one deferred (read) transaction: its reads share one snapshot.
func (s *Store) read(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	return s.retry(ctx, op, func() error {
		tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer tx.Rollback()
		return fn(tx)
	})
}

// queue returns the id and dedup window of queue name, or NotFound. A cached id is
// checked against the file (one lookup by the name's unique index, in q's snapshot or
// transaction): the queue may have been deleted since, by this store or another
// process (DeleteQueue), and its id given to a queue created later, so a call on the
// deleted name gets NotFound and never writes another queue's rows.
func (s *Store) queue(ctx context.Context, q queryRower, op, name string) (queueMeta, error) {
	st := &s.queues
	st.mu.Lock()
	m, ok := st.meta[name]
	tables := st.tables
	st.mu.Unlock()
	if ok {
		var id int64
		err := q.QueryRowContext(ctx, `SELECT id FROM dcsync_queues WHERE name = ?`, name).Scan(&id)
		switch {
		case err == nil && id == m.id:
			return m, nil
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return m, err
		}
		st.mu.Lock()
		delete(st.meta, name)
		st.mu.Unlock()
		if err != nil {
			return m, driver.Errorf(dcsync.NotFound, op, "queue %q does not exist in %s", name, s.path)
		}
		// Deleted and created again: read the new queue's id and window below.
	}
	if !tables {
		var n int
		if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = 'dcsync_queues'`).Scan(&n); err != nil {
			return m, err
		}
		if n == 0 {
			return m, driver.Errorf(dcsync.NotFound, op, "queue %q does not exist in %s", name, s.path)
		}
	}
	var dedup int64
	err := q.QueryRowContext(ctx, `SELECT id, dedup_ns FROM dcsync_queues WHERE name = ?`, name).Scan(&m.id, &dedup)
	if errors.Is(err, sql.ErrNoRows) {
		return m, driver.Errorf(dcsync.NotFound, op, "queue %q does not exist in %s", name, s.path)
	}
	if err != nil {
		return m, err
	}
	m.dedup = driver.QueueSpec{Dedup: time.Duration(dedup)}.DedupWindow()
	st.mu.Lock()
	st.tables = true
	if st.meta == nil {
		st.meta = make(map[string]queueMeta)
	}
	st.meta[name] = m
	st.mu.Unlock()
	return m, nil
}

// sweepDue reports whether queue id's expired ids are due to be swept at now.
func (s *Store) sweepDue(id int64, now time.Time) bool {
	st := &s.queues
	st.mu.Lock()
	defer st.mu.Unlock()
	return now.Sub(st.swept[id]) >= sweepEvery
}

func (s *Store) markSwept(id int64, now time.Time) {
	st := &s.queues
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.swept == nil {
		st.swept = make(map[int64]time.Time)
	}
	st.swept[id] = now
}

func sweepDedup(ctx context.Context, tx *sql.Tx, id int64, now time.Time) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM dcsync_queue_dedup WHERE q = ? AND expires_ms <= ?`, id, now.UnixMilli())
	return err
}

func checkSeq(op, what string, v uint64) error {
	if v > math.MaxInt64 {
		return driver.Errorf(dcsync.InvalidArgument, op, "%s %d is beyond this store's range (at most %d)", what, v, int64(math.MaxInt64))
	}
	return nil
}

// CreateQueue implements driver.QueueStore. The first call on a file creates the queue
// tables. spec.Created is set by the store's clock.
func (s *Store) CreateQueue(ctx context.Context, spec driver.QueueSpec) error {
	const op = "sqlite.CreateQueue"
	if err := driver.ValidateQueueSpec(spec); err != nil {
		return err
	}
	groups, err := json.Marshal(spec.Groups)
	if err != nil {
		return driver.Errorf(dcsync.Internal, op, "encoding groups: %w", err)
	}
	err = s.write(ctx, op, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, queueSchema); err != nil {
			return driver.Errorf(dcsync.TableCreation, op, "%s: creating the queue tables: %w", s.path, err)
		}
		if err := s.addOffsetColumns(ctx, tx); err != nil {
			return driver.Errorf(dcsync.TableCreation, op, "%s: adding the offsets' version and marks: %w", s.path, err)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO dcsync_queues (name, partitions, groups, dedup_ns, created_ms)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`,
			spec.Name, spec.Partitions, string(groups), int64(spec.Dedup), s.now().UnixMilli())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return driver.Errorf(dcsync.AlreadyExists, op, "queue %q exists", spec.Name)
		}
		return nil
	})
	if err == nil {
		s.queues.mu.Lock()
		s.queues.tables = true
		s.queues.offCols = true
		s.queues.mu.Unlock()
	}
	return err
}

func (s *Store) readSpec(ctx context.Context, q queryRower, op, name string) (driver.QueueSpec, error) {
	if _, err := s.queue(ctx, q, op, name); err != nil {
		return driver.QueueSpec{}, err
	}
	spec := driver.QueueSpec{Name: name}
	var groups string
	var dedup, created int64
	err := q.QueryRowContext(ctx, `SELECT partitions, groups, dedup_ns, created_ms FROM dcsync_queues WHERE name = ?`, name).
		Scan(&spec.Partitions, &groups, &dedup, &created)
	if err != nil {
		return spec, err
	}
	if err := json.Unmarshal([]byte(groups), &spec.Groups); err != nil {
		return spec, driver.Errorf(dcsync.Internal, op, "%s: queue %q: malformed groups %q: %w", s.path, name, groups, err)
	}
	spec.Dedup = time.Duration(dedup)
	spec.Created = time.UnixMilli(created)
	return spec, nil
}

// ReadQueueSpec implements driver.QueueStore.
func (s *Store) ReadQueueSpec(ctx context.Context, name string) (driver.QueueSpec, error) {
	const op = "sqlite.ReadQueueSpec"
	if err := driver.ValidateID("queue", name); err != nil {
		return driver.QueueSpec{}, err
	}
	var spec driver.QueueSpec
	err := s.retry(ctx, op, func() (err error) {
		spec, err = s.readSpec(ctx, s.db, op, name)
		return err
	})
	if err != nil {
		return driver.QueueSpec{}, err
	}
	return spec, nil
}

// AddQueueGroup implements driver.QueueStore.
func (s *Store) AddQueueGroup(ctx context.Context, name, group string) (driver.QueueSpec, error) {
	const op = "sqlite.AddQueueGroup"
	if err := driver.ValidateID("queue", name); err != nil {
		return driver.QueueSpec{}, err
	}
	if err := driver.ValidateID("group", group); err != nil {
		return driver.QueueSpec{}, err
	}
	var spec driver.QueueSpec
	err := s.write(ctx, op, func(tx *sql.Tx) (err error) {
		spec, err = s.readSpec(ctx, tx, op, name)
		if err != nil {
			return err
		}
		if spec.GroupIndex(group) >= 0 {
			return driver.Errorf(dcsync.AlreadyExists, op, "queue %q already has group %q", name, group)
		}
		if len(spec.Groups) >= driver.MaxQueueGroups {
			return driver.Errorf(dcsync.InvalidArgument, op, "queue %q has %d groups, the most allowed", name, len(spec.Groups))
		}
		groups, err := json.Marshal(append(spec.Groups[:len(spec.Groups):len(spec.Groups)], group))
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE dcsync_queues SET groups = ? WHERE name = ?`, string(groups), name); err != nil {
			return err
		}
		spec.Groups = append(spec.Groups, group)
		return nil
	})
	if err != nil && !errors.Is(err, dcsync.ErrAlreadyExists) {
		return driver.QueueSpec{}, err
	}
	return spec, err
}

// AppendQueue implements driver.QueueStore: one IMMEDIATE transaction reads the heads
// of the events' partitions, inserts the events at the next seqs, advances the heads
// and records the events' ids, so an append is all or nothing and leaves no holes.
func (s *Store) AppendQueue(ctx context.Context, name string, events []driver.QueueEvent) ([]driver.QueueAppend, error) {
	const op = "sqlite.AppendQueue"
	if err := driver.ValidateID("queue", name); err != nil {
		return nil, err
	}
	if err := driver.ValidateQueueEvents(events); err != nil {
		return nil, err
	}
	out := make([]driver.QueueAppend, len(events))
	var swept time.Time
	var qid int64
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		swept = time.Time{}
		m, err := s.queue(ctx, tx, op, name)
		if err != nil {
			return err
		}
		qid = m.id
		now := s.now()
		nowMS := now.UnixMilli()
		heads := make(map[int]int64)
		first := make(map[string]int) // id -> its first event in this batch
		ins, err := tx.PrepareContext(ctx, `INSERT INTO dcsync_queue_entries (q, p, seq, key, id, payload, at_ms, aborted)
			VALUES (?, ?, ?, ?, ?, ?, ?, 0)`)
		if err != nil {
			return err
		}
		defer ins.Close()
		var claim *sql.Stmt
		for i, e := range events {
			if e.ID != "" {
				if j, ok := first[e.ID]; ok {
					out[i] = driver.QueueAppend{Partition: out[j].Partition, Seq: out[j].Seq, Duplicate: true}
					continue
				}
				first[e.ID] = i
			}
			head, ok := heads[e.Partition]
			if !ok {
				err := tx.QueryRowContext(ctx, `SELECT head FROM dcsync_queue_heads WHERE q = ? AND p = ?`, m.id, e.Partition).Scan(&head)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
			}
			if e.ID != "" {
				// Claim the id for (p, head) unless a live claim exists: one statement
				// in the usual case, where the id is new.
				if claim == nil {
					if claim, err = tx.PrepareContext(ctx, `INSERT INTO dcsync_queue_dedup (q, id, p, seq, expires_ms) VALUES (?, ?, ?, ?, ?)
						ON CONFLICT (q, id) DO UPDATE SET p = excluded.p, seq = excluded.seq, expires_ms = excluded.expires_ms
						WHERE expires_ms <= ?`); err != nil {
						return err
					}
					defer claim.Close()
				}
				res, err := claim.ExecContext(ctx, m.id, e.ID, e.Partition, head, now.Add(m.dedup).UnixMilli(), nowMS)
				if err != nil {
					return err
				}
				if n, err := res.RowsAffected(); err != nil {
					return err
				} else if n == 0 {
					var p int
					var seq int64
					if err := tx.QueryRowContext(ctx, `SELECT p, seq FROM dcsync_queue_dedup WHERE q = ? AND id = ?`, m.id, e.ID).Scan(&p, &seq); err != nil {
						return err
					}
					out[i] = driver.QueueAppend{Partition: p, Seq: uint64(seq), Duplicate: true}
					continue
				}
			}
			payload := e.Payload
			if payload == nil {
				payload = []byte{}
			}
			if _, err := ins.ExecContext(ctx, m.id, e.Partition, head, e.Key, e.ID, payload, nowMS); err != nil {
				return err
			}
			out[i] = driver.QueueAppend{Partition: e.Partition, Seq: uint64(head)}
			heads[e.Partition] = head + 1
		}
		for p, head := range heads {
			if _, err := tx.ExecContext(ctx, `INSERT INTO dcsync_queue_heads (q, p, head, floor) VALUES (?, ?, ?, 0)
				ON CONFLICT (q, p) DO UPDATE SET head = excluded.head`, m.id, p, head); err != nil {
				return err
			}
		}
		if s.sweepDue(m.id, now) {
			if err := sweepDedup(ctx, tx, m.id, now); err != nil {
				return err
			}
			swept = now
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !swept.IsZero() {
		s.markSwept(qid, swept)
	}
	return out, nil
}

// bounds reads partition p's head and floor (zero for a partition never written).
func bounds(ctx context.Context, q queryRower, id int64, p int) (driver.QueueBounds, error) {
	var head, floor int64
	err := q.QueryRowContext(ctx, `SELECT head, floor FROM dcsync_queue_heads WHERE q = ? AND p = ?`, id, p).Scan(&head, &floor)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	return driver.QueueBounds{Head: uint64(head), Floor: uint64(floor)}, err
}

// ReadQueue implements driver.QueueStore. The entries and bounds are read in one
// snapshot.
func (s *Store) ReadQueue(ctx context.Context, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	const op = "sqlite.ReadQueue"
	if err := driver.ValidateQueueRead(name, p, max); err != nil {
		return driver.QueueRead{}, err
	}
	var r driver.QueueRead
	err := s.read(ctx, op, func(tx *sql.Tx) error {
		r = driver.QueueRead{}
		m, err := s.queue(ctx, tx, op, name)
		if err != nil {
			return err
		}
		r, err = readPart(ctx, tx, m.id, p, from, max)
		return err
	})
	if err != nil {
		return driver.QueueRead{}, err
	}
	return r, nil
}

// readPart reads partition p of queue id from seq from, as ReadQueue does, in q's
// transaction.
func readPart(ctx context.Context, q rowsQuerier, id int64, p int, from uint64, max int) (driver.QueueRead, error) {
	var r driver.QueueRead
	var err error
	if r.QueueBounds, err = bounds(ctx, q, id, p); err != nil {
		return r, err
	}
	start := max2(from, r.Floor)
	if start >= r.Head {
		return r, nil
	}
	rows, err := q.QueryContext(ctx, `SELECT seq, key, id, payload, at_ms, aborted FROM dcsync_queue_entries
		WHERE q = ? AND p = ? AND seq >= ? AND seq < ? ORDER BY seq LIMIT ?`, id, p, int64(start), int64(r.Head), max)
	if err != nil {
		return r, err
	}
	defer rows.Close()
	r.Entries = make([]driver.QueueEntry, 0, min(uint64(max), r.Head-start))
	for rows.Next() {
		var e driver.QueueEntry
		var seq, at int64
		if err := rows.Scan(&seq, &e.Key, &e.ID, &e.Payload, &at, &e.Aborted); err != nil {
			return r, err
		}
		if uint64(seq) != start+uint64(len(r.Entries)) {
			break // not reachable: the store has no holes
		}
		e.Seq, e.At = uint64(seq), time.UnixMilli(at)
		r.Entries = append(r.Entries, e)
	}
	return r, rows.Err()
}

func max2(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// AbortQueueSeq implements driver.QueueStore. The store writes every reserved seq in
// the transaction that reserves it, so there is nothing to abort: it reports whether
// the entry at seq is a tombstone (false for a trimmed seq), writing one only where an
// entry is missing, which does not happen in a file written by this store.
func (s *Store) AbortQueueSeq(ctx context.Context, name string, p int, seq uint64) (bool, error) {
	const op = "sqlite.AbortQueueSeq"
	if err := driver.ValidateQueueRead(name, p, 1); err != nil {
		return false, err
	}
	if err := checkSeq(op, "seq", seq); err != nil {
		return false, err
	}
	var aborted bool
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		aborted = false
		m, err := s.queue(ctx, tx, op, name)
		if err != nil {
			return err
		}
		b, err := bounds(ctx, tx, m.id, p)
		if err != nil {
			return err
		}
		if seq >= b.Head {
			return driver.Errorf(dcsync.InvalidArgument, op, "queue %q partition %d: seq %d is not below the head %d", name, p, seq, b.Head)
		}
		if seq < b.Floor {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO dcsync_queue_entries (q, p, seq, key, id, payload, at_ms, aborted)
			VALUES (?, ?, ?, '', '', NULL, ?, 1) ON CONFLICT (q, p, seq) DO NOTHING`, m.id, p, int64(seq), s.now().UnixMilli()); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT aborted FROM dcsync_queue_entries WHERE q = ? AND p = ? AND seq = ?`, m.id, p, int64(seq)).Scan(&aborted)
	})
	return aborted && err == nil, err
}

// inChunks calls fn with the distinct values of ps, at most 500 at a time, as a list of
// "?" placeholders and the values.
func inChunks(ps []int, fn func(marks string, args []any) error) error {
	seen := make(map[int]bool, len(ps))
	var args []any
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		marks := strings.TrimSuffix(strings.Repeat("?,", len(args)), ",")
		err := fn(marks, args)
		args = args[:0]
		return err
	}
	for _, p := range ps {
		if seen[p] {
			continue
		}
		seen[p] = true
		args = append(args, p)
		if len(args) == 500 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// byPartition runs query (whose "%s" takes the placeholders of a chunk of ps) after
// args, for every chunk of ps, and returns what scan makes of each row, in the order
// of ps (the zero value for a partition with no row).
func byPartition[T any](ctx context.Context, tx *sql.Tx, ps []int, query string, args []any, scan func(*sql.Rows) (int, T, error)) ([]T, error) {
	got := make(map[int]T, len(ps))
	err := inChunks(ps, func(marks string, chunk []any) error {
		rows, err := tx.QueryContext(ctx, fmt.Sprintf(query, marks), append(append([]any(nil), args...), chunk...)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			p, v, err := scan(rows)
			if err != nil {
				return err
			}
			got[p] = v
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	out := make([]T, len(ps))
	for i, p := range ps {
		out[i] = got[p]
	}
	return out, nil
}

// QueueBounds implements driver.QueueStore: one snapshot.
func (s *Store) QueueBounds(ctx context.Context, name string, ps []int) ([]driver.QueueBounds, error) {
	const op = "sqlite.QueueBounds"
	if err := driver.ValidateQueuePartitions(name, ps); err != nil {
		return nil, err
	}
	var out []driver.QueueBounds
	err := s.read(ctx, op, func(tx *sql.Tx) error {
		m, err := s.queue(ctx, tx, op, name)
		if err != nil {
			return err
		}
		out, err = byPartition(ctx, tx, ps, `SELECT p, head, floor FROM dcsync_queue_heads WHERE q = ? AND p IN (%s)`,
			[]any{m.id}, func(rows *sql.Rows) (int, driver.QueueBounds, error) {
				var p int
				var head, floor int64
				err := rows.Scan(&p, &head, &floor)
				return p, driver.QueueBounds{Head: uint64(head), Floor: uint64(floor)}, err
			})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func validateOffsetArgs(name, group string, p int) error {
	if err := driver.ValidateID("queue", name); err != nil {
		return err
	}
	if err := driver.ValidateID("group", group); err != nil {
		return err
	}
	return driver.ValidateQueuePartition(p)
}

// offsetColumnsState reports whether dcsync_queue_offsets exists and whether it has
// offsetColumns, as q sees it.
func (s *Store) offsetColumnsState(ctx context.Context, q queryRower) (table, cols bool, err error) {
	s.queues.mu.Lock()
	cached := s.queues.offCols
	s.queues.mu.Unlock()
	if cached {
		return true, true, nil
	}
	var n, k int
	err = q.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(CASE WHEN name IN ('version', 'marks') THEN 1 END)
		FROM pragma_table_info('dcsync_queue_offsets')`).Scan(&n, &k)
	return n > 0, k == 2, err
}

// sawOffsetColumns remembers that the offsets table has offsetColumns; only called
// once they are committed (the columns are never dropped).
func (s *Store) sawOffsetColumns() {
	s.queues.mu.Lock()
	s.queues.offCols = true
	s.queues.mu.Unlock()
}

// offsetSelect returns the offset columns to select (see scanOffset): version and
// marks, or their defaults in a file that lacks them.
func (s *Store) offsetSelect(ctx context.Context, q queryRower) (string, error) {
	_, ok, err := s.offsetColumnsState(ctx, q)
	if err != nil {
		return "", err
	}
	if ok {
		return "token, next, attempts, held, version, marks", nil
	}
	return "token, next, attempts, held, 0, x''", nil
}

// addOffsetColumns adds offsetColumns in tx (a write) when the table lacks them.
func (s *Store) addOffsetColumns(ctx context.Context, tx *sql.Tx) error {
	table, ok, err := s.offsetColumnsState(ctx, tx)
	if err != nil || ok || !table {
		return err
	}
	_, err = tx.ExecContext(ctx, offsetColumns)
	return err
}

// ensureOffsetColumns gives the offsets table offsetColumns, in a transaction of its
// own, unless the store has seen them already (the first claim or commit of a file
// written by an earlier release).
func (s *Store) ensureOffsetColumns(ctx context.Context, op string) error {
	s.queues.mu.Lock()
	cached := s.queues.offCols
	s.queues.mu.Unlock()
	if cached {
		return nil
	}
	var seen bool
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		table, _, err := s.offsetColumnsState(ctx, tx)
		if err != nil || !table {
			return err // no queue tables: the call reports NotFound
		}
		seen = true
		return s.addOffsetColumns(ctx, tx)
	})
	if err == nil && seen {
		s.sawOffsetColumns()
	}
	return err
}

// scanOffset scans the columns of offsetSelect.
func scanOffset(scan func(...any) error, pre ...any) (driver.QueueOffset, error) {
	var token, next, version int64
	var marks []byte
	var off driver.QueueOffset
	err := scan(append(pre, &token, &next, &off.Attempts, &off.Held, &version, &marks)...)
	off.Token, off.Next, off.Version, off.Marks = uint64(token), uint64(next), uint64(version), driver.QueueMarks(marks)
	return off, err
}

// readOffset reads group's offset in p (the zero offset when none is stored).
func (s *Store) readOffset(ctx context.Context, q queryRower, id int64, group string, p int) (driver.QueueOffset, bool, error) {
	cols, err := s.offsetSelect(ctx, q)
	if err != nil {
		return driver.QueueOffset{}, false, err
	}
	off, err := scanOffset(q.QueryRowContext(ctx, `SELECT `+cols+` FROM dcsync_queue_offsets WHERE q = ? AND g = ? AND p = ?`,
		id, group, p).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.QueueOffset{}, false, nil
	}
	return off, err == nil, err
}

// ClaimQueuePartition implements driver.QueueStore: in one transaction, it reads the
// offset and, when token is above the stored one, writes token (and nothing else).
func (s *Store) ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (driver.QueueOffset, error) {
	const op = "sqlite.ClaimQueuePartition"
	if err := validateOffsetArgs(name, group, p); err != nil {
		return driver.QueueOffset{}, err
	}
	if err := checkSeq(op, "token", token); err != nil {
		return driver.QueueOffset{}, err
	}
	if err := s.ensureOffsetColumns(ctx, op); err != nil {
		return driver.QueueOffset{}, err
	}
	var off driver.QueueOffset
	err := s.write(ctx, op, func(tx *sql.Tx) (err error) {
		m, err := s.queue(ctx, tx, op, name)
		if err != nil {
			return err
		}
		if off, _, err = s.readOffset(ctx, tx, m.id, group, p); err != nil {
			return err
		}
		if token < off.Token {
			return driver.Errorf(dcsync.LockLost, op, "queue %q group %q partition %d is owned by token %d, above %d", name, group, p, off.Token, token)
		}
		if token == off.Token {
			return nil // a retried claim: nothing to write
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO dcsync_queue_offsets (q, g, p, token, next, attempts, held, version, marks)
			VALUES (?, ?, ?, ?, 0, 0, 0, 0, x'') ON CONFLICT (q, g, p) DO UPDATE SET token = excluded.token WHERE token < excluded.token`,
			m.id, group, p, int64(token))
		return err
	})
	if err != nil {
		if errors.Is(err, dcsync.ErrLockLost) {
			return off, err
		}
		return driver.QueueOffset{}, err
	}
	off.Token = token
	return off, nil
}

func validateCommit(op, name, group string, p int, off driver.QueueOffset) error {
	if err := validateOffsetArgs(name, group, p); err != nil {
		return err
	}
	if err := checkSeq(op, "token", off.Token); err != nil {
		return err
	}
	if err := checkSeq(op, "next", off.Next); err != nil {
		return err
	}
	if err := checkSeq(op, "version", off.Version); err != nil {
		return err
	}
	if off.Attempts < 0 || off.Attempts > math.MaxInt32 {
		return driver.Errorf(dcsync.InvalidArgument, op, "attempts %d is outside [0, %d]", off.Attempts, math.MaxInt32)
	}
	return driver.ValidateQueueMarks(op, off)
}

// commitOffset is CommitQueueOffset in tx: one UPDATE conditioned on the owner's token
// and a stored version below off's; when it changes no row, the stored offset decides
// (equal to off: nil; no record and off.Token 0: inserted; otherwise LockLost).
func (s *Store) commitOffset(ctx context.Context, tx *sql.Tx, op, name, group string, p int, off driver.QueueOffset) error {
	m, err := s.queue(ctx, tx, op, name)
	if err != nil {
		return err
	}
	if err := s.addOffsetColumns(ctx, tx); err != nil {
		return err
	}
	marks := []byte(off.Marks)
	if marks == nil {
		marks = []byte{}
	}
	// A rewind (next moved back) must not go below the floor.
	res, err := tx.ExecContext(ctx, `UPDATE dcsync_queue_offsets SET next = ?, attempts = ?, held = ?, version = ?, marks = ?
		WHERE q = ? AND g = ? AND p = ? AND token = ? AND version < ?
		AND (next <= ? OR ? >= COALESCE((SELECT floor FROM dcsync_queue_heads WHERE q = ? AND p = ?), 0))`,
		int64(off.Next), off.Attempts, off.Held, int64(off.Version), marks, m.id, group, p, int64(off.Token), int64(off.Version),
		int64(off.Next), int64(off.Next), m.id, p)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 1 {
		return err
	}
	stored, found, err := s.readOffset(ctx, tx, m.id, group, p)
	switch {
	case err != nil:
		return err
	case stored == off:
		return nil // already stored: the same commit again
	case stored.Token != off.Token:
		return driver.Errorf(dcsync.LockLost, op, "queue %q group %q partition %d is owned by token %d, not %d", name, group, p, stored.Token, off.Token)
	case stored.Version >= off.Version:
		return driver.Errorf(dcsync.LockLost, op, "queue %q group %q partition %d: token %d stored version %d, not below %d (a later write of the owner)", name, group, p, stored.Token, stored.Version, off.Version)
	case found && off.Next < stored.Next:
		b, err := bounds(ctx, tx, m.id, p)
		if err != nil {
			return err
		}
		if off.Next < b.Floor {
			return driver.Errorf(dcsync.InvalidArgument, op, "queue %q partition %d: the events below seq %d were trimmed; group %q cannot move back to %d", name, p, b.Floor, group, off.Next)
		}
	case !found:
		// No record is the zero offset, whose token 0 matches.
		_, err := tx.ExecContext(ctx, `INSERT INTO dcsync_queue_offsets (q, g, p, token, next, attempts, held, version, marks) VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?)`,
			m.id, group, p, int64(off.Next), off.Attempts, off.Held, int64(off.Version), marks)
		return err
	}
	return driver.Errorf(dcsync.Internal, op, "queue %q group %q partition %d: offset %+v neither updated nor refused by %+v", name, group, p, stored, off)
}

// CommitQueueOffset implements driver.QueueStore.
func (s *Store) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	const op = "sqlite.CommitQueueOffset"
	if err := validateCommit(op, name, group, p, off); err != nil {
		return err
	}
	if err := s.ensureOffsetColumns(ctx, op); err != nil {
		return err
	}
	return s.write(ctx, op, func(tx *sql.Tx) error {
		return s.commitOffset(ctx, tx, op, name, group, p, off)
	})
}

// CommitQueueOffsetTx implements driver.QueueTxCommitter: CommitQueueOffset inside
// the application's transaction tx, which must be a *sql.Tx on this store's file (from
// WriteTx, or from DB().BeginTx; anything else is InvalidArgument). The offset is
// written, or LockLost returned, inside tx: it commits or rolls back with the
// application's writes, and on any error the application should roll tx back. The
// write is not retried: when tx does not hold the file's write lock (a deferred
// transaction) and another connection holds it, the call fails with a Connection
// error; WriteTx and DB().BeginTx begin IMMEDIATE transactions, which hold it.
func (s *Store) CommitQueueOffsetTx(ctx context.Context, tx any, name, group string, p int, off driver.QueueOffset) error {
	const op = "sqlite.CommitQueueOffsetTx"
	if err := validateCommit(op, name, group, p, off); err != nil {
		return err
	}
	sqlTx, ok := tx.(*sql.Tx)
	if !ok || sqlTx == nil {
		return driver.Errorf(dcsync.InvalidArgument, op, "tx is a %T, not a *sql.Tx of the store's database", tx)
	}
	if s.readOnly {
		return driver.Errorf(dcsync.NotImplemented, op, "%s is opened read-only (this process cannot write the file): writes are refused", s.path)
	}
	if isClosed(s.done) {
		return s.closedErr(op)
	}
	if err := s.sameFile(ctx, sqlTx, op); err != nil {
		return err
	}
	return s.classify(op, s.commitOffset(ctx, sqlTx, op, name, group, p, off))
}

// sameFile checks that tx's main database is the store's file.
func (s *Store) sameFile(ctx context.Context, tx *sql.Tx, op string) error {
	var file string
	if err := tx.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file); err != nil {
		return driver.Errorf(dcsync.InvalidArgument, op, "tx is not a usable SQLite transaction of %s: %w", s.path, err)
	}
	ours, err := os.Stat(s.path)
	if err != nil {
		return s.classify(op, err)
	}
	theirs, err := os.Stat(file)
	if file == "" || err != nil || !os.SameFile(ours, theirs) {
		return driver.Errorf(dcsync.InvalidArgument, op, "tx is a transaction of %q, not of the store's file %s", file, s.path)
	}
	return nil
}

// ReadQueueOffsets implements driver.QueueStore: one snapshot.
func (s *Store) ReadQueueOffsets(ctx context.Context, name, group string, ps []int) ([]driver.QueueOffset, error) {
	const op = "sqlite.ReadQueueOffsets"
	if err := driver.ValidateID("queue", name); err != nil {
		return nil, err
	}
	if err := driver.ValidateID("group", group); err != nil {
		return nil, err
	}
	if err := driver.ValidateQueuePartitions(name, ps); err != nil {
		return nil, err
	}
	var out []driver.QueueOffset
	err := s.read(ctx, op, func(tx *sql.Tx) error {
		m, err := s.queue(ctx, tx, op, name)
		if err != nil {
			return err
		}
		cols, err := s.offsetSelect(ctx, tx)
		if err != nil {
			return err
		}
		out, err = byPartition(ctx, tx, ps, `SELECT p, `+cols+` FROM dcsync_queue_offsets WHERE q = ? AND g = ? AND p IN (%s)`,
			[]any{m.id, group}, func(rows *sql.Rows) (int, driver.QueueOffset, error) {
				var p int
				off, err := scanOffset(rows.Scan, &p)
				return p, off, err
			})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// trimLimit returns the lowest next of the offsets that read partition p of queue
// name (every group's of an event partition, the owning group's of a dead-letter
// partition; 0 for a group with no offset stored), read in q.
func (s *Store) trimLimit(ctx context.Context, q *sql.Tx, op, name string, id int64, p int) (uint64, error) {
	spec, err := s.readSpec(ctx, q, op, name)
	if err != nil {
		return 0, err
	}
	rows, err := q.QueryContext(ctx, `SELECT g, next FROM dcsync_queue_offsets WHERE q = ? AND p = ?`, id, p)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	nexts := map[string]uint64{}
	for rows.Next() {
		var g string
		var next int64
		if err := rows.Scan(&g, &next); err != nil {
			return 0, err
		}
		nexts[g] = uint64(next)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	limit := uint64(math.MaxUint64)
	for i, g := range spec.Groups {
		if p < spec.Partitions || p == spec.Partitions+i {
			limit = min(limit, nexts[g]) // no row: 0
		}
	}
	return limit, nil
}

// TrimQueue implements driver.QueueStore: in one transaction, it reads the offsets
// of the groups that read the partition and deletes below the lowest of them and
// below. It also sweeps the queue's expired ids when
// they are due.
func (s *Store) TrimQueue(ctx context.Context, name string, p int, below uint64) error {
	const op = "sqlite.TrimQueue"
	if err := driver.ValidateQueueRead(name, p, 1); err != nil {
		return err
	}
	if err := checkSeq(op, "below", below); err != nil {
		return err
	}
	var swept time.Time
	var qid int64
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		swept = time.Time{}
		m, err := s.queue(ctx, tx, op, name)
		if err != nil {
			return err
		}
		qid = m.id
		b, err := bounds(ctx, tx, m.id, p)
		if err != nil {
			return err
		}
		if below > b.Head {
			return driver.Errorf(dcsync.InvalidArgument, op, "queue %q partition %d: trim below %d is above the head %d", name, p, below, b.Head)
		}
		if below > b.Floor {
			// In the same transaction: no offset moves back between this read and
			// the delete.
			limit, err := s.trimLimit(ctx, tx, op, name, m.id, p)
			if err != nil {
				return err
			}
			below = min(below, limit)
		}
		if below > b.Floor {
			if _, err := tx.ExecContext(ctx, `DELETE FROM dcsync_queue_entries WHERE q = ? AND p = ? AND seq >= ? AND seq < ?`,
				m.id, p, int64(b.Floor), int64(below)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE dcsync_queue_heads SET floor = ? WHERE q = ? AND p = ?`, int64(below), m.id, p); err != nil {
				return err
			}
		}
		now := s.now()
		if s.sweepDue(m.id, now) {
			if err := sweepDedup(ctx, tx, m.id, now); err != nil {
				return err
			}
			swept = now
		}
		return nil
	})
	if err == nil && !swept.IsZero() {
		s.markSwept(qid, swept)
	}
	return err
}
