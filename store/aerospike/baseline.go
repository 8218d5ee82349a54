package aerospike

import (
	"context"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/layout"
)

var _ driver.Baseliner = (*Store)(nil)

// Baseline returns the raw operations the Java libraries send, on records of the
// baseline's own in the store's lock and latch sets: the Java lock manager's gen-0 put
// of the data and uat bins and its delete (AerospikeStore.java), and the Java latch's
// operate add and get of a counter record (AerospikeLatchStorage.java). The counter
// record ends in a day; Close deletes it and any lock record.
func (s *Store) Baseline(ctx context.Context, prefix string) (driver.Baseline, error) {
	const op = "aerospike.Baseline"
	if err := driver.ValidateID("baseline prefix", prefix); err != nil {
		return nil, err
	}
	lk, err := as.NewKey(s.cfg.Namespace, layout.AerospikeLockSet(dcsync.XDC, "", s.cfg.LockSetSuffix), "dcsync-bench#"+prefix)
	if err != nil {
		return nil, driver.Wrap(err, dcsync.InvalidArgument, op)
	}
	ck, err := as.NewKey(s.cfg.Namespace, s.latchSet, "dcsync-bench#"+prefix)
	if err != nil {
		return nil, driver.Wrap(err, dcsync.InvalidArgument, op)
	}
	b := &asBaseline{s: s, lock: lk, count: ck, qname: "dcsync-bench#" + prefix}
	if err := s.client.Put(s.writePolicy(ctx, 86_400), ck, as.BinMap{"count#bench": 0}); err != nil {
		return nil, driver.Wrap(err, dcsync.Connection, op)
	}
	return b, nil
}

type asBaseline struct {
	s           *Store
	lock, count *as.Key
	// The queue floor's records: entry records of partition 0 of a queue named for
	// the baseline ("dcsync-bench#" + prefix, which has no spec) in QueueEntrySet, and
	// its offset record in QueueOffsetSet.
	qname string
	rows  uint64 // records written
	pos   uint64 // the next record ReadRows reads
}

func (b *asBaseline) Describe() map[string]string {
	return map[string]string{"lock": "gen-0 put + delete", "add": "operate add (update only)", "get": "get",
		"enqueue": "batch write of the entry records", "receive": "batch get of the entry records + put of an offset record"}
}

func (b *asBaseline) LockPair(ctx context.Context) error {
	wp := b.s.writePolicy(ctx, 60)
	wp.GenerationPolicy, wp.Generation = as.EXPECT_GEN_EQUAL, 0
	if err := b.s.client.Put(wp, b.lock, as.BinMap{"bench##data": 1, "bench##uat": time.Now().UnixMilli()}); err != nil {
		return driver.Wrap(err, dcsync.Connection, "aerospike.Baseline")
	}
	_, err := b.s.client.Delete(b.s.writePolicy(ctx, 0), b.lock)
	return driver.Wrap(err, dcsync.Connection, "aerospike.Baseline")
}

func (b *asBaseline) Add(ctx context.Context, delta int64) error {
	wp := b.s.writePolicy(ctx, 86_400)
	wp.RecordExistsAction = as.UPDATE_ONLY
	_, err := b.s.client.Operate(wp, b.count, as.AddOp(as.NewBin("count#bench", delta)))
	return driver.Wrap(err, dcsync.Connection, "aerospike.Baseline")
}

func (b *asBaseline) Get(ctx context.Context) error {
	_, err := b.s.client.Get(b.s.readPolicy(ctx), b.count)
	return driver.Wrap(err, dcsync.Connection, "aerospike.Baseline")
}

func (b *asBaseline) Close(ctx context.Context) error {
	keys := []*as.Key{b.lock, b.count, b.s.offsetKey(b.qname, "bench", 0)}
	for seq := uint64(0); seq < b.rows; seq++ {
		keys = append(keys, b.s.entryKey(b.qname, 0, seq))
	}
	recs := make([]as.BatchRecordIfc, len(keys))
	for i, k := range keys {
		recs[i] = as.NewBatchDelete(nil, k)
	}
	if err := b.s.runBatch(ctx, "aerospike.Baseline", true, recs, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
		return err
	}
	for _, k := range []*as.Key{b.lock, b.count} {
		if _, err := b.s.client.Delete(b.s.writePolicy(ctx, 0), k); err != nil {
			return driver.Wrap(err, dcsync.Connection, "aerospike.Baseline")
		}
	}
	return nil
}

var _ driver.QueueBaseline = (*asBaseline)(nil)

// WriteRows implements driver.QueueBaseline: one batch of plain writes of entry
// records with an event's bins, as an append writes its events (create-only, after
// the reservation it also makes).
func (b *asBaseline) WriteRows(ctx context.Context, payloads [][]byte) error {
	recs := make([]as.BatchRecordIfc, len(payloads))
	for i, p := range payloads {
		recs[i] = as.NewBatchWrite(nil, b.s.entryKey(b.qname, 0, b.rows+uint64(i)),
			as.PutOp(as.NewBin(qbWriter, int64(1))), as.PutOp(as.NewBin(qbAt, time.Now().UnixMilli())), as.PutOp(as.NewBin(qbPayload, p)))
	}
	b.rows += uint64(len(payloads)) // Close deletes them, also after a failure
	return b.s.runBatch(ctx, "aerospike.Baseline", true, recs, func(i int) int { return len(payloads[i]) })
}

// ReadRows implements driver.QueueBaseline: one batch get of n entry records, as
// ReadQueue gets its entries (with the head record it may read in the same batch).
func (b *asBaseline) ReadRows(ctx context.Context, n int) (int, error) {
	if b.pos+uint64(n) > b.rows {
		b.pos = 0
	}
	from := b.pos
	end := min(from+uint64(n), b.rows)
	b.pos = end
	recs := make([]as.BatchRecordIfc, 0, end-from)
	for seq := from; seq < end; seq++ {
		recs = append(recs, as.NewBatchRead(nil, b.s.entryKey(b.qname, 0, seq), nil))
	}
	if err := b.s.runBatch(ctx, "aerospike.Baseline", false, recs, nil); err != nil {
		return 0, err
	}
	return len(recs), nil
}

// CommitOffset implements driver.QueueBaseline: one put of the offset record.
func (b *asBaseline) CommitOffset(ctx context.Context, next int64) error {
	err := b.s.client.Put(b.s.writePolicy(ctx, 0), b.s.offsetKey(b.qname, "bench", 0), as.BinMap{qbNext: next})
	return driver.Wrap(err, dcsync.Connection, "aerospike.Baseline")
}
