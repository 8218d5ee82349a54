package hbase

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// Queue benchmarks on the real HBase, each next to the raw client operation it is
// built from, in the same run (compare the events/s metrics):
//
//	Enqueue/Queue/g=G   AppendQueue of 500 1 KB events (16 partitions) from G goroutines
//	Enqueue/Raw/g=G     MultiMutate of 500 plain Puts of 1 KB rows, same goroutines
//	Consume/Queue       ReadQueue(500) + CommitQueueOffset, one partition
//	Consume/Raw         a Scan of the same 500 rows
//	ProduceConsume      4 producers (batches of 500) and 16 consumers (one per partition)
//	                    at once: events/s consumed
//	Latency             single-event appends read by a polling consumer: p50/p99 of
//	                    append start to read
const (
	benchBatch   = 500
	benchPayload = 1024
	benchParts   = 16
)

func benchEvents(n, parts int, payload []byte) []driver.QueueEvent {
	evs := make([]driver.QueueEvent, n)
	for i := range evs {
		evs[i] = driver.QueueEvent{Partition: i % parts, Payload: payload}
	}
	return evs
}

// parallelOps runs b.N calls of op over g goroutines and reports events/s.
func parallelOps(b *testing.B, g, perOp int, op func(w, i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	t0 := time.Now()
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := op(w, i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*perOp)/el.Seconds(), "events/s")
}

func BenchmarkQueue(b *testing.B) {
	s := openQueueStore(b)
	defer s.Close()
	c := s.client
	ctx := context.Background()
	table := s.QueueTable()
	payload := make([]byte, benchPayload)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	newQueue := func(b *testing.B, parts int) string {
		name := qname(b)
		if err := s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: parts, Groups: []string{"g"}}); err != nil {
			b.Fatal(err)
		}
		return name
	}

	for _, g := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("Enqueue/Queue/g=%d", g), func(b *testing.B) {
			name := newQueue(b, benchParts)
			evs := benchEvents(benchBatch, benchParts, payload)
			parallelOps(b, g, benchBatch, func(_, _ int) error {
				_, err := s.AppendQueue(ctx, name, evs)
				return err
			})
		})
		b.Run(fmt.Sprintf("Enqueue/Raw/g=%d", g), func(b *testing.B) {
			// The same rows an append writes: entry keys of 16 partitions.
			name := "raw-" + randHex(5)
			var seq atomic.Uint64
			parallelOps(b, g, benchBatch, func(_, _ int) error {
				base := seq.Add(benchBatch) - benchBatch
				acts := make([]hbaserpc.Action, benchBatch)
				for k := range acts {
					p := k % benchParts
					acts[k] = hbaserpc.Action{Mutation: &hbaserpc.Put{Row: entryRow(partPrefix(name, p), base+uint64(k)),
						Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualEntry, Value: payload}}}}
				}
				_, err := c.MultiMutate(ctx, table, acts)
				return err
			})
		})
	}

	// Consume: one partition pre-filled with enough events for the run.
	b.Run("Consume/Queue", func(b *testing.B) {
		name := newQueue(b, 1)
		fill(b, s, name, b.N*benchBatch, payload)
		off, err := s.ClaimQueuePartition(ctx, name, "g", 0, 1)
		if err != nil {
			b.Fatal(err)
		}
		parallelOps(b, 1, benchBatch, func(_, _ int) error {
			r, err := s.ReadQueue(ctx, name, 0, off.Next, benchBatch)
			if err != nil {
				return err
			}
			if len(r.Entries) != benchBatch {
				return fmt.Errorf("read %d entries", len(r.Entries))
			}
			off.Next += benchBatch
			off.Version++
			return s.CommitQueueOffset(ctx, name, "g", 0, off)
		})
	})
	b.Run("Consume/Raw", func(b *testing.B) {
		name := newQueue(b, 1)
		fill(b, s, name, b.N*benchBatch, payload)
		prefix := partPrefix(name, 0)
		var from uint64
		parallelOps(b, 1, benchBatch, func(_, _ int) error {
			rows, err := c.Scan(ctx, table, hbaserpc.Scan{StartRow: entryRow(prefix, from), StopRow: entryRow(prefix, from+benchBatch),
				Limit: benchBatch, Caching: benchBatch})
			if err != nil {
				return err
			}
			if len(rows) != benchBatch {
				return fmt.Errorf("scanned %d rows", len(rows))
			}
			from += benchBatch
			return nil
		})
	})

	b.Run("ProduceConsume", func(b *testing.B) {
		name := newQueue(b, benchParts)
		evs := benchEvents(benchBatch, benchParts, payload)
		total := b.N * benchBatch
		var consumed atomic.Int64
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, benchParts+8)
		b.ResetTimer()
		t0 := time.Now()
		for p := 0; p < benchParts; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				off, err := s.ClaimQueuePartition(ctx, name, "g", p, 1)
				if err != nil {
					errs <- err
					return
				}
				for consumed.Load() < int64(total) {
					r, err := s.ReadQueue(ctx, name, p, off.Next, benchBatch)
					if err != nil {
						if ctx.Err() == nil {
							errs <- err
						}
						return
					}
					if len(r.Entries) == 0 {
						time.Sleep(2 * time.Millisecond)
						continue
					}
					off.Next += uint64(len(r.Entries))
					off.Version++
					if err := s.CommitQueueOffset(ctx, name, "g", p, off); err != nil {
						errs <- err
						return
					}
					consumed.Add(int64(len(r.Entries)))
				}
			}()
		}
		var next atomic.Int64
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for int(next.Add(1)) <= b.N {
					if _, err := s.AppendQueue(ctx, name, evs); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case err := <-errs:
			cancel()
			<-done
			b.Fatal(err)
		}
		el := time.Since(t0)
		b.StopTimer()
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		b.ReportMetric(float64(total)/el.Seconds(), "events/s")
	})

	b.Run("Latency", func(b *testing.B) {
		name := newQueue(b, 1)
		var mu sync.Mutex
		sent := map[uint64]time.Time{}
		lat := make([]time.Duration, 0, b.N)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		got := make(chan struct{})
		go func() {
			defer close(got)
			var next uint64
			for next < uint64(b.N) {
				r, err := s.ReadQueue(ctx, name, 0, next, 100)
				if err != nil {
					return
				}
				now := time.Now()
				mu.Lock()
				for _, e := range r.Entries {
					lat = append(lat, now.Sub(sent[e.Seq]))
				}
				mu.Unlock()
				next += uint64(len(r.Entries))
			}
		}()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			mu.Lock()
			sent[uint64(i)] = t0 // seqs are assigned in order: one producer
			mu.Unlock()
			if _, err := s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, Payload: payload}}); err != nil {
				b.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		select {
		case <-got:
		case <-time.After(time.Minute):
			b.Fatal("consumer did not read every event")
		}
		b.StopTimer()
		mu.Lock()
		defer mu.Unlock()
		if len(lat) < b.N {
			b.Fatalf("read %d of %d events", len(lat), b.N)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	})
}

// fill appends n events to partition 0 of queue name, in batches, from 8 goroutines.
func fill(b *testing.B, s *Store, name string, n int, payload []byte) {
	b.Helper()
	ctx := context.Background()
	evs := benchEvents(benchBatch, 1, payload)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for int(next.Add(benchBatch)) <= n+benchBatch-1 {
				if _, err := s.AppendQueue(ctx, name, evs); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}
