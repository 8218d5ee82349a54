package aerospike_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/queuebench"
	"github.com/dcsync/dcsync/store/aerospike"
)

// BenchmarkQueueFrontEnd runs the queue's front-end suite (package queue's Enqueue,
// Consumer.Receive and Ack) on the real server, every Open a new client and store on
// it, next to the raw floor in the same namespace: batch writes of records like the
// queue's entries (rawWrites) and batch gets of n of their keys. The queues a case
// creates are trimmed, and the raw records deleted, when it ends (the test namespace
// is in memory).
//
//	DCSYNC_AEROSPIKE=host:port go test -run '^$' -bench QueueFrontEnd -benchtime 20x -count 3 ./store/aerospike/
func BenchmarkQueueFrontEnd(b *testing.B) {
	c := realClient(b)
	raw := &asRaw{c: c, run: unique("front"), written: map[int]int{}, pos: map[int]int{}}
	b.Cleanup(raw.cleanup)
	queuebench.Run(b, queuebench.Config{
		Open: func(b *testing.B) driver.Store {
			// Every queue case comes before its raw case: the raw records of the
			// cases before are no longer read.
			raw.cleanup()
			s := &trimmed{Store: newStore(b, realClient(b), aerospike.Config{})}
			b.Cleanup(s.trim)
			return s
		},
		Raw: raw,
	})
}

// trimmed is a store that trims the queues created through it when the case ends.
type trimmed struct {
	*aerospike.Store
	mu     sync.Mutex
	queues []string
}

func (s *trimmed) CreateQueue(ctx context.Context, spec driver.QueueSpec) error {
	err := s.Store.CreateQueue(ctx, spec)
	if err == nil {
		s.mu.Lock()
		s.queues = append(s.queues, spec.Name)
		s.mu.Unlock()
	}
	return err
}

func (s *trimmed) trim() {
	ctx := context.Background()
	for _, name := range s.queues {
		spec, err := s.ReadQueueSpec(ctx, name)
		if err != nil {
			continue
		}
		ps := make([]int, spec.Partitions+len(spec.Groups))
		for i := range ps {
			ps[i] = i
		}
		bs, err := s.QueueBounds(ctx, name, ps)
		if err != nil {
			continue
		}
		for i, bd := range bs {
			_ = s.TrimQueue(ctx, name, ps[i], bd.Head)
		}
	}
}

// asRaw is the raw floor: writer w's batch i is the records "run|w|i|0".."run|w|i|n-1"
// of the bench set.
type asRaw struct {
	c       *as.Client
	run     string
	mu      sync.Mutex
	written map[int]int // batches written per writer
	pos     map[int]int // next record read per reader (over its batches)
	batch   int
}

func (x *asRaw) prefix(w, i int) string { return fmt.Sprintf("%s|%d|%d", x.run, w, i) }

func (x *asRaw) Write(ctx context.Context, w int, payloads [][]byte) error {
	x.mu.Lock()
	i := x.written[w]
	x.written[w]++
	x.batch = len(payloads)
	x.mu.Unlock()
	events := make([]driver.QueueEvent, len(payloads))
	for k, p := range payloads {
		events[k] = driver.QueueEvent{Key: fmt.Sprint("key-", k), Payload: p}
	}
	recs, err := x.writes(x.prefix(w, i), events)
	if err != nil {
		return err
	}
	return batchErr(x.c.BatchOperate(as.NewBatchPolicy(), recs), recs)
}

// writes is rawWrites without a *testing.B (it runs on the suite's goroutines).
func (x *asRaw) writes(prefix string, events []driver.QueueEvent) (recs []as.BatchRecordIfc, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("raw writes: %v", r)
		}
	}()
	return rawWrites(nil, prefix, events), nil
}

// Commit puts reader r's offset record: one write of one record, as the store's
// offset commit is. The record ends by its TTL (cleanup does not know it).
func (x *asRaw) Commit(ctx context.Context, r int, next int64) error {
	key, err := as.NewKey(namespace, benchSet, fmt.Sprintf("%s|%d|offset", x.run, r))
	if err != nil {
		return err
	}
	return x.c.Put(as.NewWritePolicy(0, 600), key, as.BinMap{"next": next}) // it ends in 10 minutes
}

// Read gets n records of reader r's batches in one batch call, oldest first, wrapping.
func (x *asRaw) Read(ctx context.Context, r, n int) (int, error) {
	x.mu.Lock()
	total := x.written[r] * x.batch
	from := x.pos[r]
	x.pos[r] = (from + n) % max(total, 1)
	batch := x.batch
	x.mu.Unlock()
	if total == 0 {
		return 0, nil
	}
	recs := make([]as.BatchRecordIfc, n)
	for k := range recs {
		j := (from + k) % total
		key, err := as.NewKey(namespace, benchSet, fmt.Sprintf("%s|%d", x.prefix(r, j/batch), j%batch))
		if err != nil {
			return 0, err
		}
		recs[k] = as.NewBatchRead(nil, key, nil)
	}
	if err := batchErr(x.c.BatchOperate(as.NewBatchPolicy(), recs), recs); err != nil {
		return 0, err
	}
	return n, nil
}

// cleanup deletes every raw record (none is being written or read).
func (x *asRaw) cleanup() {
	x.mu.Lock()
	defer x.mu.Unlock()
	bp := as.NewBatchPolicy()
	defer clear(x.written)
	defer clear(x.pos)
	for w, nb := range x.written {
		for i := range nb {
			del := make([]as.BatchRecordIfc, x.batch)
			for k := range del {
				key, _ := as.NewKey(namespace, benchSet, fmt.Sprintf("%s|%d", x.prefix(w, i), k))
				del[k] = as.NewBatchDelete(nil, key)
			}
			_ = x.c.BatchOperate(bp, del)
		}
	}
}
