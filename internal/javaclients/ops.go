package javaclients

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// HBaseLock names a DLM lock in an HBase table. Level is "DC" or "XDC"; the lock id the
// library writes is Client + "#" + Lock.
type HBaseLock struct {
	Table, Level, Farm, Client, Lock string
}

func (l HBaseLock) fields() map[string]any {
	return map[string]any{"table": l.Table, "level": l.Level, "farm": l.Farm, "client": l.Client, "lock": l.Lock}
}

// AerospikeLock names a DLM lock in Aerospike: set DC#<farm>#<SetSuffix> or
// XDC#<SetSuffix>, key Client#Lock. NS "" is the tool's default namespace.
type AerospikeLock struct {
	NS, SetSuffix, Level, Farm, Client, Lock string
}

func (l AerospikeLock) fields() map[string]any {
	m := map[string]any{"setSuffix": l.SetSuffix, "level": l.Level, "farm": l.Farm, "client": l.Client, "lock": l.Lock}
	if l.NS != "" {
		m["ns"] = l.NS
	}
	return m
}

// HBaseLatch names a DistributedLatch latch in table D_LTCH_<Suffix>, written by a
// service of farm Farm.
type HBaseLatch struct {
	Suffix, Client, Latch, Farm string
}

func (l HBaseLatch) fields() map[string]any {
	return map[string]any{"suffix": l.Suffix, "client": l.Client, "latch": l.Latch, "farm": l.Farm}
}

// AerospikeLatch names a DistributedLatch latch in set D_LTCH#<SetSuffix>, written by a
// service of farm Farm whose storage context has TTL seconds (the library applies it to
// the create AND to every update).
type AerospikeLatch struct {
	NS, SetSuffix, Client, Latch, Farm string
	TTL                                int
}

func (l AerospikeLatch) fields() map[string]any {
	m := map[string]any{"setSuffix": l.SetSuffix, "client": l.Client, "latch": l.Latch, "farm": l.Farm, "ttl": l.TTL}
	if l.NS != "" {
		m["ns"] = l.NS
	}
	return m
}

func with(m map[string]any, kv ...any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func secs(d time.Duration) int64 { return int64(d / time.Second) }

func (t *Tool) do(ctx context.Context, op string, f map[string]any) error {
	_, err := t.Call(ctx, op, f)
	return err
}

func (t *Tool) count(ctx context.Context, op string, f map[string]any) (int64, error) {
	res, err := t.Call(ctx, op, f)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := json.Unmarshal(res, &n); err != nil {
		return 0, fmt.Errorf("javaclients %s: result %s: %w", op, res, err)
	}
	return n, nil
}

// HBaseLockInit is HBaseStore.initialize: the lock table with its schema, if absent.
func (t *Tool) HBaseLockInit(ctx context.Context, table string) error {
	return t.do(ctx, "hbase.lock.init", map[string]any{"table": table})
}

// HBaseLockTryAcquire is LockBase.tryAcquireLock on HBaseStore: an *Error with
// Unavailable() when someone holds the lock.
func (t *Tool) HBaseLockTryAcquire(ctx context.Context, l HBaseLock, ttl time.Duration) error {
	return t.do(ctx, "hbase.lock.tryAcquire", with(l.fields(), "ttl", secs(ttl)))
}

// HBaseLockAcquire is LockBase.acquireLock on HBaseStore: it tries, sleeping sleep
// between tries, until timeout (whole seconds) has passed.
func (t *Tool) HBaseLockAcquire(ctx context.Context, l HBaseLock, ttl, timeout, sleep time.Duration) error {
	return t.do(ctx, "hbase.lock.acquire", with(l.fields(), "ttl", secs(ttl), "timeout", secs(timeout), "sleepMs", sleep.Milliseconds()))
}

// HBaseLockRelease is HBaseStore.remove: an unconditional row delete.
func (t *Tool) HBaseLockRelease(ctx context.Context, l HBaseLock) error {
	return t.do(ctx, "hbase.lock.release", l.fields())
}

// AerospikeLockTryAcquire is LockBase.tryAcquireLock on AerospikeStore.
func (t *Tool) AerospikeLockTryAcquire(ctx context.Context, l AerospikeLock, ttl time.Duration) error {
	return t.do(ctx, "as.lock.tryAcquire", with(l.fields(), "ttl", secs(ttl)))
}

// AerospikeLockAcquire is LockBase.acquireLock on AerospikeStore (see HBaseLockAcquire).
func (t *Tool) AerospikeLockAcquire(ctx context.Context, l AerospikeLock, ttl, timeout, sleep time.Duration) error {
	return t.do(ctx, "as.lock.acquire", with(l.fields(), "ttl", secs(ttl), "timeout", secs(timeout), "sleepMs", sleep.Milliseconds()))
}

// AerospikeLockRelease is AerospikeStore.remove: an unconditional delete.
func (t *Tool) AerospikeLockRelease(ctx context.Context, l AerospikeLock) error {
	return t.do(ctx, "as.lock.release", l.fields())
}

// HBaseLatchCreate is HBaseLatchStorage.initialize: an Increment by count with the TTL
// (creating an existing latch adds count to it).
func (t *Tool) HBaseLatchCreate(ctx context.Context, l HBaseLatch, count int64, ttl time.Duration) error {
	return t.do(ctx, "hbase.latch.create", with(l.fields(), "count", count, "ttl", secs(ttl)))
}

// HBaseLatchCountDown is HBaseLatchStorage.decrementCount: Increment -1 without a TTL.
func (t *Tool) HBaseLatchCountDown(ctx context.Context, l HBaseLatch) error {
	return t.do(ctx, "hbase.latch.countDown", l.fields())
}

// HBaseLatchCountUp is HBaseLatchStorage.incrementCount: Increment +1 without a TTL.
func (t *Tool) HBaseLatchCountUp(ctx context.Context, l HBaseLatch) error {
	return t.do(ctx, "hbase.latch.countUp", l.fields())
}

// HBaseLatchCount is HBaseLatchStorage.getCount at level "DC" or "XDC". A missing latch
// is an *Error with Missing().
func (t *Tool) HBaseLatchCount(ctx context.Context, l HBaseLatch, level string) (int64, error) {
	return t.count(ctx, "hbase.latch.count", with(l.fields(), "level", level))
}

// AerospikeLatchCreate is AerospikeLatchStorage.initialize: a CREATE_ONLY put with the
// TTL.
func (t *Tool) AerospikeLatchCreate(ctx context.Context, l AerospikeLatch, count int64) error {
	return t.do(ctx, "as.latch.create", with(l.fields(), "count", count))
}

// AerospikeLatchGetOrCreate is DistributedLatchFactory.getOrCreateCountUpDownLatch.
func (t *Tool) AerospikeLatchGetOrCreate(ctx context.Context, l AerospikeLatch) error {
	return t.do(ctx, "as.latch.getOrCreate", l.fields())
}

// AerospikeLatchCountDown is AerospikeLatchStorage.decrementCount: operate add -1,
// UPDATE_ONLY, expiration = l.TTL.
func (t *Tool) AerospikeLatchCountDown(ctx context.Context, l AerospikeLatch) error {
	return t.do(ctx, "as.latch.countDown", l.fields())
}

// AerospikeLatchCountUp is AerospikeLatchStorage.incrementCount.
func (t *Tool) AerospikeLatchCountUp(ctx context.Context, l AerospikeLatch) error {
	return t.do(ctx, "as.latch.countUp", l.fields())
}

// AerospikeLatchCount is AerospikeLatchStorage.getCount at level "DC" or "XDC".
func (t *Tool) AerospikeLatchCount(ctx context.Context, l AerospikeLatch, level string) (int64, error) {
	return t.count(ctx, "as.latch.count", with(l.fields(), "level", level))
}

// HBaseCell is one cell version as read by raw.hbase.row.
type HBaseCell struct {
	Family    string `json:"family"`
	Qualifier string `json:"qualifier"`
	ValueHex  string `json:"valueHex"`
	TS        int64  `json:"ts"`
}

// HBaseRow reads every cell version of the row Salt(logicalKey) (an inspection, not a
// library operation), and returns the row key in hex too.
func (t *Tool) HBaseRow(ctx context.Context, table, logicalKey string) (rowHex string, cells []HBaseCell, err error) {
	res, err := t.Call(ctx, "raw.hbase.row", map[string]any{"table": table, "key": logicalKey})
	if err != nil {
		return "", nil, err
	}
	var out struct {
		RowHex string      `json:"rowHex"`
		Cells  []HBaseCell `json:"cells"`
	}
	if err := json.Unmarshal(res, &out); err != nil {
		return "", nil, err
	}
	return out.RowHex, out.Cells, nil
}

// AerospikeRecord is a record as read by raw.as.record.
type AerospikeRecord struct {
	Found      bool           `json:"found"`
	Bins       map[string]any `json:"bins"`
	Generation int            `json:"generation"`
	TTL        int            `json:"ttl"` // seconds left, as the server reports
}

// AerospikeGet reads a record (an inspection, not a library operation). ns "" is the
// tool's default namespace.
func (t *Tool) AerospikeGet(ctx context.Context, ns, set, key string) (AerospikeRecord, error) {
	f := map[string]any{"set": set, "key": key}
	if ns != "" {
		f["ns"] = ns
	}
	res, err := t.Call(ctx, "raw.as.record", f)
	if err != nil {
		return AerospikeRecord{}, err
	}
	var r AerospikeRecord
	err = json.Unmarshal(res, &r)
	return r, err
}

// Contention configures Java lock workers: Threads threads, each with its own lock
// instance, loop for Duration: LockBase.acquireLock (waiting at most Timeout, whole
// seconds, sleeping SleepBetweenRetries between tries), hold for Hold, release, pause for
// Pause.
type Contention struct {
	Threads             int
	Duration            time.Duration
	Hold                time.Duration
	Pause               time.Duration
	SleepBetweenRetries time.Duration
	Timeout             time.Duration
	TTL                 time.Duration
	Worker              string // worker name prefix
}

// ContentionResult is what the Java workers did.
type ContentionResult struct {
	Intervals    []Interval `json:"intervals"`
	WaitTimeouts int        `json:"waitTimeouts"`
	Errors       int        `json:"errors"`
	FirstErrors  []string   `json:"firstErrors"`
}

func (c Contention) fields(m map[string]any) map[string]any {
	return with(m, "threads", c.Threads, "durationMs", c.Duration.Milliseconds(), "holdMs", c.Hold.Milliseconds(), "pauseMs", c.Pause.Milliseconds(),
		"sleepMs", c.SleepBetweenRetries.Milliseconds(), "timeout", secs(c.Timeout), "ttl", secs(c.TTL), "worker", c.Worker)
}

func (t *Tool) contend(ctx context.Context, op string, f map[string]any) (ContentionResult, error) {
	res, err := t.Call(ctx, op, f)
	if err != nil {
		return ContentionResult{}, err
	}
	var out ContentionResult
	if err := json.Unmarshal(res, &out); err != nil {
		return ContentionResult{}, err
	}
	for i := range out.Intervals {
		out.Intervals[i].Kind = KindJava
	}
	if len(out.Intervals) == 0 && out.Errors > 0 {
		return out, errors.New("javaclients: no Java worker acquired the lock: " + fmt.Sprint(out.FirstErrors))
	}
	return out, nil
}

// HBaseLockContend runs Java lock workers on l (see Contention).
func (t *Tool) HBaseLockContend(ctx context.Context, l HBaseLock, c Contention) (ContentionResult, error) {
	return t.contend(ctx, "hbase.lock.contend", c.fields(l.fields()))
}

// AerospikeLockContend runs Java lock workers on l (see Contention).
func (t *Tool) AerospikeLockContend(ctx context.Context, l AerospikeLock, c Contention) (ContentionResult, error) {
	return t.contend(ctx, "as.lock.contend", c.fields(l.fields()))
}
