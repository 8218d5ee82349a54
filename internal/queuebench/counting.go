package queuebench

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// Counts counts store calls by operation. Its methods are safe for concurrent use.
//
// Operations are named by their driver method; AcquireLock is further split by the kind
// of queue lock ("AcquireLock/member", "AcquireLock/partition") and whether the store
// refused it ("…/unavailable"); the batched calls add "InspectLocks.keys",
// "RefreshLocks.keys", "AcquireLocks.keys", "ReleaseLocks.keys",
// "ClaimQueuePartitions.keys" and "ReadQueues.keys", the locks or partitions they carried (and
// "AcquireLocks/partition.unavailable", those refused), and InspectLocks is split by the kind of
// its first lock ("InspectLocks/member", "InspectLocks/member.keys", …).
type Counts struct {
	mu sync.Mutex
	n  map[string]int64
}

// NewCounts returns an empty Counts.
func NewCounts() *Counts { return &Counts{n: map[string]int64{}} }

func (c *Counts) add(op string, n int64) {
	c.mu.Lock()
	c.n[op] += n
	c.mu.Unlock()
}

// Snapshot returns the counts so far.
func (c *Counts) Snapshot() Calls {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(Calls, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// Calls are store calls by operation.
type Calls map[string]int64

// Sub returns c - before, per operation (operations at zero left out).
func (c Calls) Sub(before Calls) Calls {
	out := Calls{}
	for k, v := range c {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// Total returns the number of store calls (the ".keys" tallies and the sub-counts of
// AcquireLock left out).
func (c Calls) Total() int64 {
	var t int64
	for k, v := range c {
		if !strings.Contains(k, ".") && !strings.Contains(k, "/") {
			t += v
		}
	}
	return t
}

// String lists the operations in name order, "op=n".
func (c Calls) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(c[k], 10))
	}
	return b.String()
}

// lockKind tells a queue's member-slot lock from a partition lock by its name
// ("queue:…m/3", "queue:…p/3"; "…md/3" and "…pd/3" for dead-letter consumers).
func lockKind(name string) string {
	i := strings.LastIndexByte(name, '/')
	if !strings.HasPrefix(name, "queue:") || i < 2 {
		return "other"
	}
	head := strings.TrimSuffix(name[:i], "d")
	switch head[len(head)-1] {
	case 'm':
		return "member"
	case 'p':
		return "partition"
	}
	return "other"
}

// Count wraps s so that every call is counted in counts. The wrapper offers
// driver.LockBatcher exactly when s does; driver.LockMover and driver.QueueClaimer
// when s offers them and LockBatcher (and driver.QueueCommitter beside them, counted
// as "CommitQueueOffsets" and "CommitQueueOffsets.keys"); and driver.QueueTxCommitter with WriteTx
// exactly when s offers both (SQLite: its transactions are counted as "WriteTx", the
// offset commits within them as "WriteTx.commits"), so that the lock and queue
// packages make the same calls through it as on s, on every store of this module;
// driver.QueueBatchReader always, counted as "ReadQueues" and "ReadQueues.keys" (the
// partitions read) when s offers it, else done by driver.ReadQueues' loop and
// counted as the ReadQueue calls it makes; and driver.CloseNotifier.
func Count(s driver.Store, counts *Counts) driver.Store {
	c := &counting{s: s, c: counts}
	c.br, _ = s.(driver.QueueBatchReader)
	txc, ok1 := s.(driver.QueueTxCommitter)
	txs, ok2 := s.(txWriter)
	tx := ok1 && ok2
	b, batching := s.(driver.LockBatcher)
	m, moving := s.(driver.LockMover)
	q, claiming := s.(driver.QueueClaimer)
	qc, committing := s.(driver.QueueCommitter)
	switch {
	case batching && moving && claiming && committing && !tx:
		return &countingCommitter{countingMover: &countingMover{countingBatcher: &countingBatcher{counting: c, b: b}, m: m, q: q}, qc: qc}
	case batching && moving && claiming && tx:
		return &countingMoverTx{countingMover: &countingMover{countingBatcher: &countingBatcher{counting: c, b: b}, m: m, q: q}, tx: countingTx{txc, txs, counts}}
	case batching && moving && claiming:
		return &countingMover{countingBatcher: &countingBatcher{counting: c, b: b}, m: m, q: q}
	case batching && tx:
		return &countingTxBatcher{countingBatcher: &countingBatcher{counting: c, b: b}, tx: countingTx{txc, txs, counts}}
	case batching:
		return &countingBatcher{counting: c, b: b}
	case tx:
		return &countingTxStore{counting: c, tx: countingTx{txc, txs, counts}}
	}
	return c
}

// txWriter is a store whose queue lives in a SQL database (SQLite's WriteTx).
type txWriter interface {
	WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error
}

// countingTx counts the transaction calls of a SQL store.
type countingTx struct {
	txc driver.QueueTxCommitter
	txs txWriter
	c   *Counts
}

func (t *countingTx) WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	t.c.add("WriteTx", 1)
	return t.txs.WriteTx(ctx, fn)
}

func (t *countingTx) CommitQueueOffsetTx(ctx context.Context, tx any, name, group string, p int, off driver.QueueOffset) error {
	t.c.add("WriteTx.commits", 1)
	return t.txc.CommitQueueOffsetTx(ctx, tx, name, group, p, off)
}

type countingTxStore struct {
	*counting
	tx countingTx
}

func (w *countingTxStore) WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return w.tx.WriteTx(ctx, fn)
}

func (w *countingTxStore) CommitQueueOffsetTx(ctx context.Context, tx any, name, group string, p int, off driver.QueueOffset) error {
	return w.tx.CommitQueueOffsetTx(ctx, tx, name, group, p, off)
}

type countingTxBatcher struct {
	*countingBatcher
	tx countingTx
}

func (w *countingTxBatcher) WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return w.tx.WriteTx(ctx, fn)
}

func (w *countingTxBatcher) CommitQueueOffsetTx(ctx context.Context, tx any, name, group string, p int, off driver.QueueOffset) error {
	return w.tx.CommitQueueOffsetTx(ctx, tx, name, group, p, off)
}

type countingMover struct {
	*countingBatcher
	m driver.LockMover
	q driver.QueueClaimer
}

func (w *countingMover) AcquireLocks(ctx context.Context, reqs []driver.LockAcquire) ([]driver.LockResult, error) {
	w.c.add("AcquireLocks", 1)
	w.c.add("AcquireLocks.keys", int64(len(reqs)))
	res, err := w.m.AcquireLocks(ctx, reqs)
	for i, r := range res {
		if errors.Is(r.Err, dcsync.ErrLockUnavailable) {
			w.c.add("AcquireLocks/"+lockKind(reqs[i].Key.Name)+".unavailable", 1)
		}
	}
	return res, err
}

func (w *countingMover) ReleaseLocks(ctx context.Context, reqs []driver.LockRelease) ([]driver.LockResult, error) {
	w.c.add("ReleaseLocks", 1)
	w.c.add("ReleaseLocks.keys", int64(len(reqs)))
	return w.m.ReleaseLocks(ctx, reqs)
}

func (w *countingMover) ClaimQueuePartitions(ctx context.Context, name, group string, claims []driver.QueueClaim) ([]driver.QueueClaimResult, error) {
	w.c.add("ClaimQueuePartitions", 1)
	w.c.add("ClaimQueuePartitions.keys", int64(len(claims)))
	return w.q.ClaimQueuePartitions(ctx, name, group, claims)
}

// countingCommitter is countingMover with driver.QueueCommitter (HBase, Aerospike).
type countingCommitter struct {
	*countingMover
	qc driver.QueueCommitter
}

func (w *countingCommitter) CommitQueueOffsets(ctx context.Context, name, group string, commits []driver.QueueCommit) ([]error, error) {
	w.c.add("CommitQueueOffsets", 1)
	w.c.add("CommitQueueOffsets.keys", int64(len(commits)))
	return w.qc.CommitQueueOffsets(ctx, name, group, commits)
}

type countingMoverTx struct {
	*countingMover
	tx countingTx
}

func (w *countingMoverTx) WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return w.tx.WriteTx(ctx, fn)
}

func (w *countingMoverTx) CommitQueueOffsetTx(ctx context.Context, tx any, name, group string, p int, off driver.QueueOffset) error {
	return w.tx.CommitQueueOffsetTx(ctx, tx, name, group, p, off)
}

// EmulateBatches returns s with driver.LockBatcher added when s lacks it, done one lock
// at a time in the process: wrapped in Count, it shows the calls a batching store would
// receive (one per batch), whatever s is.
func EmulateBatches(s driver.Store) driver.Store {
	if _, ok := s.(driver.LockBatcher); ok {
		return s
	}
	return &emulated{Store: s}
}

type emulated struct{ driver.Store }

func (e *emulated) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	return driver.RefreshLocks(ctx, e.Store, reqs)
}

func (e *emulated) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	return driver.InspectLocks(ctx, e.Store, keys)
}

func (e *emulated) Done() <-chan struct{} { return done(e.Store) }

func done(s driver.Store) <-chan struct{} {
	if n, ok := s.(driver.CloseNotifier); ok {
		return n.Done()
	}
	return nil
}

type counting struct {
	s  driver.Store
	c  *Counts
	br driver.QueueBatchReader // nil when s lacks it
}

// ReadQueues implements driver.QueueBatchReader: one call when s offers it, else
// driver.ReadQueues' loop of ReadQueue calls, each counted.
func (w *counting) ReadQueues(ctx context.Context, name string, reads []driver.QueueReadReq) ([]driver.QueueReadResult, error) {
	if w.br == nil {
		return driver.ReadQueues(ctx, singleReads{w}, name, reads)
	}
	w.c.add("ReadQueues", 1)
	w.c.add("ReadQueues.keys", int64(len(reads)))
	res, err := w.br.ReadQueues(ctx, name, reads)
	n := 0
	for _, r := range res {
		n += len(r.Entries)
	}
	w.c.add("ReadQueues.entries", int64(n))
	return res, err
}

// singleReads is a counting store seen without its ReadQueues.
type singleReads struct{ driver.QueueStore }

type countingBatcher struct {
	*counting
	b driver.LockBatcher
}

func (w *countingBatcher) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	w.c.add("RefreshLocks", 1)
	w.c.add("RefreshLocks.keys", int64(len(reqs)))
	return w.b.RefreshLocks(ctx, reqs)
}

func (w *countingBatcher) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	w.c.add("InspectLocks", 1)
	w.c.add("InspectLocks.keys", int64(len(keys)))
	if len(keys) > 0 {
		kind := lockKind(keys[0].Name)
		w.c.add("InspectLocks/"+kind, 1)
		w.c.add("InspectLocks/"+kind+".keys", int64(len(keys)))
	}
	return w.b.InspectLocks(ctx, keys)
}

func (w *counting) Done() <-chan struct{} { return done(w.s) }

func (w *counting) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	w.c.add("SwapRegister", 1)
	return w.s.SwapRegister(ctx, k, gen, value)
}

func (w *counting) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	w.c.add("ReadRegisters", 1)
	w.c.add("ReadRegisters.keys", int64(len(keys)))
	return w.s.ReadRegisters(ctx, keys)
}

func (w *counting) Close() error { return nil } // the wrapped store is closed by its opener

func (w *counting) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	st, err := w.s.AcquireLock(ctx, k, owner, ttl)
	w.c.add("AcquireLock", 1)
	sub := "AcquireLock/" + lockKind(k.Name)
	w.c.add(sub, 1)
	if errors.Is(err, dcsync.ErrLockUnavailable) {
		w.c.add(sub+"/unavailable", 1)
	}
	return st, err
}

func (w *counting) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	w.c.add("RefreshLock", 1)
	return w.s.RefreshLock(ctx, k, owner, ttl)
}

func (w *counting) ReleaseLock(ctx context.Context, k dcsync.Key, owner string) error {
	w.c.add("ReleaseLock", 1)
	return w.s.ReleaseLock(ctx, k, owner)
}

func (w *counting) InspectLock(ctx context.Context, k dcsync.Key) (driver.LockState, error) {
	w.c.add("InspectLock", 1)
	return w.s.InspectLock(ctx, k)
}

func (w *counting) CreateLatch(ctx context.Context, k dcsync.Key, count int64, ttl time.Duration) error {
	w.c.add("CreateLatch", 1)
	return w.s.CreateLatch(ctx, k, count, ttl)
}

func (w *counting) EnsureLatch(ctx context.Context, k dcsync.Key, ttl time.Duration) (bool, error) {
	w.c.add("EnsureLatch", 1)
	return w.s.EnsureLatch(ctx, k, ttl)
}

func (w *counting) AddLatch(ctx context.Context, k dcsync.Key, delta int64) (int64, error) {
	w.c.add("AddLatch", 1)
	return w.s.AddLatch(ctx, k, delta)
}

func (w *counting) ReadLatches(ctx context.Context, keys []dcsync.Key) ([]driver.LatchCount, error) {
	w.c.add("ReadLatches", 1)
	return w.s.ReadLatches(ctx, keys)
}

func (w *counting) CreateQueue(ctx context.Context, spec driver.QueueSpec) error {
	w.c.add("CreateQueue", 1)
	return w.s.CreateQueue(ctx, spec)
}

func (w *counting) ReadQueueSpec(ctx context.Context, name string) (driver.QueueSpec, error) {
	w.c.add("ReadQueueSpec", 1)
	return w.s.ReadQueueSpec(ctx, name)
}

func (w *counting) AddQueueGroup(ctx context.Context, name, group string) (driver.QueueSpec, error) {
	w.c.add("AddQueueGroup", 1)
	return w.s.AddQueueGroup(ctx, name, group)
}

func (w *counting) AppendQueue(ctx context.Context, name string, events []driver.QueueEvent) ([]driver.QueueAppend, error) {
	w.c.add("AppendQueue", 1)
	return w.s.AppendQueue(ctx, name, events)
}

func (w *counting) ReadQueue(ctx context.Context, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	w.c.add("ReadQueue", 1)
	r, err := w.s.ReadQueue(ctx, name, p, from, max)
	w.c.add("ReadQueue.entries", int64(len(r.Entries)))
	return r, err
}

func (w *counting) AbortQueueSeq(ctx context.Context, name string, p int, seq uint64) (bool, error) {
	w.c.add("AbortQueueSeq", 1)
	return w.s.AbortQueueSeq(ctx, name, p, seq)
}

func (w *counting) QueueBounds(ctx context.Context, name string, ps []int) ([]driver.QueueBounds, error) {
	w.c.add("QueueBounds", 1)
	return w.s.QueueBounds(ctx, name, ps)
}

func (w *counting) ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (driver.QueueOffset, error) {
	w.c.add("ClaimQueuePartition", 1)
	return w.s.ClaimQueuePartition(ctx, name, group, p, token)
}

func (w *counting) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	w.c.add("CommitQueueOffset", 1)
	return w.s.CommitQueueOffset(ctx, name, group, p, off)
}

func (w *counting) ReadQueueOffsets(ctx context.Context, name, group string, ps []int) ([]driver.QueueOffset, error) {
	w.c.add("ReadQueueOffsets", 1)
	return w.s.ReadQueueOffsets(ctx, name, group, ps)
}

func (w *counting) TrimQueue(ctx context.Context, name string, p int, below uint64) error {
	w.c.add("TrimQueue", 1)
	return w.s.TrimQueue(ctx, name, p, below)
}
