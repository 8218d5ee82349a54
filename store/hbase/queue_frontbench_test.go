package hbase

import (
	"context"
	"fmt"
	"github.com/dcsync/dcsync/driver"
	"sync"
	"testing"

	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/internal/queuebench"
)

// BenchmarkQueueFrontEnd runs the queue's front-end suite (package queue's Enqueue,
// Consumer.Receive and Ack) on the real cluster, every Open a new store on the run's
// client and queue table, next to the raw floor in the same table: hbaserpc
// MultiMutate of plain Puts of the same 1 KB rows, with the keys of queue entries
// (writer w's rows are those of a queue "raw-…-w", spread over 16 partitions, so over
// the same salts as the queue's), and Scans of n rows of one such partition.
//
//	DCSYNC_HBASE_ZK=127.0.0.1:21818 go test -run '^$' -bench QueueFrontEnd -benchtime 20x -count 3 ./store/hbase/
func BenchmarkQueueFrontEnd(b *testing.B) {
	s := openQueueStore(b)
	b.Cleanup(func() { s.Close() })
	raw := &hbRaw{c: s.client, table: s.QueueTable(), run: "raw-" + randHex(5), seqs: map[[2]int]uint64{}, pos: map[int]*hbPos{}}
	queuebench.Run(b, queuebench.Config{
		Open: func(b *testing.B) driver.Store {
			s := openQueueStore(b)
			b.Cleanup(func() { s.Close() })
			return s
		},
		Raw:        raw,
		Partitions: benchParts,
	})
}

type hbPos struct{ p, next int }

// hbRaw is the raw floor.
type hbRaw struct {
	c     *hbaserpc.Client
	table string
	run   string
	mu    sync.Mutex
	seqs  map[[2]int]uint64 // rows written per (writer, partition)
	pos   map[int]*hbPos    // reader's partition and next seq in it
}

func (x *hbRaw) prefix(w, p int) []byte { return partPrefix(fmt.Sprint(x.run, "-", w), p) }

// Write puts row k of the batch in partition k%16, as an append of events without
// keys spreads them.
func (x *hbRaw) Write(ctx context.Context, w int, payloads [][]byte) error {
	x.mu.Lock()
	base := make([]uint64, benchParts)
	for p := range base {
		base[p] = x.seqs[[2]int{w, p}]
	}
	for k := range payloads {
		x.seqs[[2]int{w, k % benchParts}]++
	}
	x.mu.Unlock()
	acts := make([]hbaserpc.Action, len(payloads))
	for k, v := range payloads {
		p := k % benchParts
		acts[k] = hbaserpc.Action{Mutation: &hbaserpc.Put{Row: entryRow(x.prefix(w, p), base[p]+uint64(k/benchParts)),
			Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualEntry, Value: v}}}}
	}
	_, err := x.c.MultiMutate(ctx, x.table, acts)
	return err
}

// Commit puts reader r's offset: one cell of one row, as the store's offset commit is
// one write of one row.
func (x *hbRaw) Commit(ctx context.Context, r int, next int64) error {
	return x.c.Put(ctx, x.table, &hbaserpc.Put{Row: []byte(fmt.Sprint(string(x.prefix(r, 0)), "o")),
		Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualEntry, Value: be64(uint64(next))}}})
}

// Read scans n rows of one of reader r's partitions, from where its last read there
// ended, in one Scan when the partition holds n rows (it moves to the next partition
// when what is left is shorter; a reader with fewer rows per partition than n, as in
// b.N = 1 runs, scans several).
func (x *hbRaw) Read(ctx context.Context, r, n int) (int, error) {
	got := 0
	for tries := 0; got < n && tries < 4*benchParts; tries++ {
		x.mu.Lock()
		pos := x.pos[r]
		if pos == nil {
			pos = &hbPos{}
			x.pos[r] = pos
		}
		have := int(x.seqs[[2]int{r, pos.p}])
		want := n - got
		if pos.next+want > have {
			if have >= want || pos.next >= have {
				pos.p, pos.next = (pos.p+1)%benchParts, 0
				x.mu.Unlock()
				continue
			}
			want = have - pos.next
		}
		p, from := pos.p, uint64(pos.next)
		pos.next += want
		x.mu.Unlock()
		prefix := x.prefix(r, p)
		rows, err := x.c.Scan(ctx, x.table, hbaserpc.Scan{StartRow: entryRow(prefix, from), StopRow: entryRow(prefix, from+uint64(want)),
			Limit: want, Caching: want})
		if err != nil {
			return got, err
		}
		got += len(rows)
	}
	return got, nil
}
