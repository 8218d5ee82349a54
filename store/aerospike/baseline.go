package aerospike

import (
	"context"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

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
	b := &asBaseline{s: s, lock: lk, count: ck}
	if err := s.client.Put(s.writePolicy(ctx, 86_400), ck, as.BinMap{"count#bench": 0}); err != nil {
		return nil, driver.Wrap(err, dcsync.Connection, op)
	}
	return b, nil
}

type asBaseline struct {
	s           *Store
	lock, count *as.Key
}

func (b *asBaseline) Describe() map[string]string {
	return map[string]string{"lock": "gen-0 put + delete", "add": "operate add (update only)", "get": "get"}
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
	for _, k := range []*as.Key{b.lock, b.count} {
		if _, err := b.s.client.Delete(b.s.writePolicy(ctx, 0), k); err != nil {
			return driver.Wrap(err, dcsync.Connection, "aerospike.Baseline")
		}
	}
	return nil
}
