// Package queuebench holds the queue's benchmarks, run by each store's tests against
// the same store's raw operations in the same run: enqueue throughput against raw
// batched writes of the same rows, receive+ack against a raw read of the same rows,
// produce and consume at once, enqueue-to-receive latency, and how each scales with
// 1, 2, 4 and 8 producers or consumers.
//
// Why it exists: every store runs the same queue benchmarks, each beside the store's own
// raw operations (docs/benchmarks-queue.md). It is internal because only this
// repository's store tests call it, each with baselines only that store's tests can
// write; only tests and the other test harnesses may import it (internal/archtest
// enforces that).
package queuebench

import (
	"context"
	"crypto/rand"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/queue"
)

// Raw is a store's raw floor: the plain store operations a queue is built from, on
// rows of the same size, in the same table or namespace.
type Raw interface {
	// Write writes len(payloads) rows for writer w in one batched call (HBase: a multi
	// Put; SQLite: INSERTs in one transaction; Aerospike: a batch write). Rows of
	// different calls never collide.
	Write(ctx context.Context, w int, payloads [][]byte) error
	// Read reads n rows that Write wrote for reader r's share, in one call where the
	// store allows (a Scan, a SELECT, a batch get), and returns how many it read.
	// Rows written before with Write(ctx, r, ...) are what it reads, oldest first;
	// reading past the end wraps to the start.
	Read(ctx context.Context, r int, n int) (int, error)
	// Commit writes reader r's offset (next) in one plain write of one row or record,
	// durably as the store writes anything: with Read, the floor of a durable ack,
	// one offset write per batch read.
	Commit(ctx context.Context, r int, next int64) error
}

// Config of a run.
type Config struct {
	// Open opens the store (each call its own handle on the same data).
	Open func(b *testing.B) driver.Store
	Raw  Raw
	// Batch is the events per Enqueue and per Receive (default 500); Payload the size
	// of each (default 1024).
	Batch, Payload int
	// Partitions of the queue (default 16).
	Partitions int
	// Scales are the producer/consumer counts (default 1, 2, 4, 8).
	Scales []int
	// QueueOptions are passed to every queue handle.
	QueueOptions []queue.Option
}

// open opens a store handle wrapped in Count: the ReceiveAck and ProduceConsume cases
// report the store calls they made per batch (counts noise cannot change).
func (c *Config) open(b *testing.B, counts *Counts) driver.Store {
	return Count(c.Open(b), counts)
}

// reportCalls reports the store calls made since before, per batch of the case: the
// total ("calls/batch"), the writes among them ("writes/batch": offset commits, trims,
// claims, lock writes, SQL write transactions; the offset commits inside a
// transaction are not round trips and count in neither) and, in the log, each
// operation's count.
func reportCalls(b *testing.B, counts *Counts, before Calls, batches int) {
	d := counts.Snapshot().Sub(before)
	var writes int64
	for op, n := range d {
		switch op {
		case "CommitQueueOffset", "TrimQueue", "ClaimQueuePartition", "AbortQueueSeq",
			"AcquireLock", "RefreshLock", "ReleaseLock", "RefreshLocks", "WriteTx",
			"CommitQueueOffsets", "ClaimQueuePartitions", "AcquireLocks", "ReleaseLocks":
			writes += n
		}
	}
	b.ReportMetric(float64(d.Total())/float64(batches), "calls/batch")
	b.ReportMetric(float64(writes)/float64(batches), "writes/batch")
	b.Logf("store calls in %d batches: %v", batches, d)
}

func (c *Config) defaults() {
	if c.Batch == 0 {
		c.Batch = 500
	}
	if c.Payload == 0 {
		c.Payload = 1024
	}
	if c.Partitions == 0 {
		c.Partitions = 16
	}
	if len(c.Scales) == 0 {
		c.Scales = []int{1, 2, 4, 8}
	}
	c.QueueOptions = append([]queue.Option{queue.WithPollInterval(10 * time.Millisecond), queue.WithLease(10 * time.Second)}, c.QueueOptions...)
}

func name(b *testing.B) string {
	var r [6]byte
	rand.Read(r[:])
	return fmt.Sprintf("bench-%x", r)
}

func payloads(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
		rand.Read(out[i])
	}
	return out
}

// split runs f(w, k) in workers goroutines for k = 0..total-1, each k once.
func split(workers, total int, f func(w, k int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= total {
					return
				}
				if err := f(w, k); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// each runs f(w) for w = 0..workers-1, each in its own goroutine.
func each(workers int, f func(w int) error) error {
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = f(w)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func events(ps [][]byte, keyed bool, k int) []queue.Event {
	evs := make([]queue.Event, len(ps))
	for i, p := range ps {
		evs[i] = queue.Event{Payload: p}
		if keyed {
			evs[i].Key = fmt.Sprint("k", k, "-", i)
		}
	}
	return evs
}

func report(b *testing.B, events int) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

// Run runs every benchmark of the suite as sub-benchmarks of b. Each b.N iteration is
// one batch (Batch events) per producer or consumer count.
func Run(b *testing.B, cfg Config) {
	cfg.defaults()
	ctx := context.Background()
	ps := payloads(cfg.Batch, cfg.Payload)
	for _, n := range cfg.Scales {
		b.Run(fmt.Sprintf("Enqueue/producers=%d/queue", n), func(b *testing.B) {
			s := cfg.Open(b)
			q, err := queue.Create(ctx, s, queue.Spec{Name: name(b), Partitions: cfg.Partitions, Groups: []string{"g"}}, cfg.QueueOptions...)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := split(n, b.N, func(w, k int) error { _, err := q.Enqueue(ctx, events(ps, false, k)...); return err }); err != nil {
				b.Fatal(err)
			}
			report(b, b.N*cfg.Batch)
		})
		b.Run(fmt.Sprintf("Enqueue/producers=%d/raw", n), func(b *testing.B) {
			b.ResetTimer()
			if err := split(n, b.N, func(w, k int) error { return cfg.Raw.Write(ctx, w, ps) }); err != nil {
				b.Fatal(err)
			}
			report(b, b.N*cfg.Batch)
		})
	}
	for _, n := range cfg.Scales {
		b.Run(fmt.Sprintf("ReceiveAck/consumers=%d/queue", n), func(b *testing.B) {
			counts := NewCounts()
			s := cfg.open(b, counts)
			q, err := queue.Create(ctx, s, queue.Spec{Name: name(b), Partitions: cfg.Partitions, Groups: []string{"g"}}, cfg.QueueOptions...)
			if err != nil {
				b.Fatal(err)
			}
			total := b.N * cfg.Batch
			if err := split(4, b.N, func(w, k int) error { _, err := q.Enqueue(ctx, events(ps, true, k)...); return err }); err != nil {
				b.Fatal(err)
			}
			cs := make([]*queue.Consumer, n)
			for i := range cs {
				if cs[i], err = q.Consumer(ctx, "g"); err != nil {
					b.Fatal(err)
				}
			}
			defer func() {
				for _, c := range cs {
					c.Close(ctx)
				}
			}()
			// Wait until the partitions are spread (every consumer owns some).
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				owned := 0
				spread := true
				for _, c := range cs {
					k := len(c.Partitions())
					owned += k
					spread = spread && (k > 0 || n > cfg.Partitions)
				}
				if owned == cfg.Partitions && spread {
					break
				}
			}
			before := counts.Snapshot()
			b.ResetTimer()
			var got atomic.Int64
			var wg sync.WaitGroup
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			for _, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for got.Load() < int64(total) {
						msgs, err := c.Receive(rctx, cfg.Batch)
						if err != nil {
							return
						}
						if err := c.Ack(rctx, msgs...); err != nil {
							b.Error(err)
							return
						}
						if got.Add(int64(len(msgs))) >= int64(total) {
							cancel()
						}
					}
				}()
			}
			wg.Wait()
			if got.Load() != int64(total) {
				b.Fatalf("received %d of %d", got.Load(), total)
			}
			report(b, total)
			reportCalls(b, counts, before, b.N)
		})
		b.Run(fmt.Sprintf("ReceiveAck/consumers=%d/raw", n), func(b *testing.B) {
			// The rows read are the ones Write wrote for the same reader before: b.N
			// batches per reader, as many as the queue case holds, so that a store
			// that reads one partition's range (HBase) reads it in one call as the
			// queue's consumer does, not a short range over and over.
			b.StopTimer()
			rawPrefill(ctx, b, cfg.Raw, n, ps)
			b.StartTimer()
			if err := split(n, b.N, func(w, k int) error {
				return rawReadBatch(ctx, cfg.Raw, w, cfg.Batch)
			}); err != nil {
				b.Fatal(err)
			}
			report(b, b.N*cfg.Batch)
		})
		b.Run(fmt.Sprintf("ReceiveAck/consumers=%d/floor", n), func(b *testing.B) {
			// The floor of a durable receive+ack: the raw read of a batch and one raw
			// offset write for it.
			b.StopTimer()
			rawPrefill(ctx, b, cfg.Raw, n, ps)
			var next [64]atomic.Int64
			b.StartTimer()
			if err := split(n, b.N, func(w, k int) error {
				if err := rawReadBatch(ctx, cfg.Raw, w, cfg.Batch); err != nil {
					return err
				}
				return cfg.Raw.Commit(ctx, w, next[w%len(next)].Add(int64(cfg.Batch)))
			}); err != nil {
				b.Fatal(err)
			}
			report(b, b.N*cfg.Batch)
		})
	}
	b.Run("ProduceConsume/queue", func(b *testing.B) {
		counts := NewCounts()
		s := cfg.open(b, counts)
		q, err := queue.Create(ctx, s, queue.Spec{Name: name(b), Partitions: cfg.Partitions, Groups: []string{"g"}}, cfg.QueueOptions...)
		if err != nil {
			b.Fatal(err)
		}
		c, err := q.Consumer(ctx, "g")
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		for len(c.Partitions()) < cfg.Partitions {
			time.Sleep(10 * time.Millisecond)
		}
		total := b.N * cfg.Batch
		before := counts.Snapshot()
		b.ResetTimer()
		done := make(chan error, 1)
		go func() {
			got := 0
			for got < total {
				msgs, err := c.Receive(ctx, cfg.Batch)
				if err == nil {
					err = c.Ack(ctx, msgs...)
				}
				if err != nil {
					done <- err
					return
				}
				got += len(msgs)
			}
			done <- nil
		}()
		if err := split(2, b.N, func(w, k int) error { _, err := q.Enqueue(ctx, events(ps, true, k)...); return err }); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		report(b, total)
		reportCalls(b, counts, before, b.N)
	})
	b.Run("ProduceConsume/raw-write", func(b *testing.B) {
		if err := split(2, b.N, func(w, k int) error { return cfg.Raw.Write(ctx, w, ps) }); err != nil {
			b.Fatal(err)
		}
		report(b, b.N*cfg.Batch)
	})
	b.Run("ProduceConsume/floor", func(b *testing.B) {
		// The floor of produce+consume: every row written is also read back and its
		// batch's offset written, the least a durable queue's producer and consumer
		// ask of the store together (two writers, each writing a batch, reading it
		// back and committing, as ProduceConsume/queue's two producers and consumer
		// share the machine).
		var next [64]atomic.Int64
		if err := split(2, b.N, func(w, k int) error {
			if err := cfg.Raw.Write(ctx, w, ps); err != nil {
				return err
			}
			if err := rawReadBatch(ctx, cfg.Raw, w, cfg.Batch); err != nil {
				return err
			}
			return cfg.Raw.Commit(ctx, w, next[w%len(next)].Add(int64(cfg.Batch)))
		}); err != nil {
			b.Fatal(err)
		}
		report(b, b.N*cfg.Batch)
	})
	b.Run("Latency", func(b *testing.B) {
		// Producer and consumer on different store handles: the consumer learns of
		// events by its poll, as one in another process would.
		name := name(b)
		qp, err := queue.Create(ctx, cfg.Open(b), queue.Spec{Name: name, Partitions: cfg.Partitions, Groups: []string{"g"}}, cfg.QueueOptions...)
		if err != nil {
			b.Fatal(err)
		}
		qc, err := queue.Open(ctx, cfg.Open(b), name, cfg.QueueOptions...)
		if err != nil {
			b.Fatal(err)
		}
		c, err := qc.Consumer(ctx, "g")
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		for len(c.Partitions()) < cfg.Partitions {
			time.Sleep(10 * time.Millisecond)
		}
		// The consumer waits in Receive when each event is enqueued (a Receive
		// begun after the Enqueue returned would find the event at once, measuring
		// a read rather than how soon a waiting consumer learns of it).
		recv := make(chan time.Time)
		rerr := make(chan error, 1)
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			for {
				msgs, err := c.Receive(rctx, 1)
				if err != nil {
					if rctx.Err() == nil {
						rerr <- err
					}
					return
				}
				at := time.Now()
				if err := c.Ack(rctx, msgs...); err != nil {
					if rctx.Err() == nil {
						rerr <- err
					}
					return
				}
				select {
				case recv <- at:
				case <-rctx.Done():
					return
				}
			}
		}()
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			time.Sleep(3 * time.Millisecond) // the consumer is back in Receive
			start := time.Now()
			if _, err := qp.Enqueue(ctx, queue.Event{Key: fmt.Sprint(i), Payload: ps[0]}); err != nil {
				b.Fatal(err)
			}
			select {
			case at := <-recv:
				lat = append(lat, at.Sub(start))
			case err := <-rerr:
				b.Fatal(err)
			case <-time.After(time.Minute):
				b.Fatal("event not received within a minute")
			}
		}
		b.StopTimer()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	})
}

// rawPrefill writes b.N batches of ps for each of n raw readers (the rows the raw
// ReceiveAck cases read).
func rawPrefill(ctx context.Context, b *testing.B, raw Raw, n int, ps [][]byte) {
	if err := each(n, func(r int) error {
		for range b.N {
			if err := raw.Write(ctx, r, ps); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
}

// rawReadBatch reads one batch of reader r's rows and fails unless it got all of them.
func rawReadBatch(ctx context.Context, raw Raw, r, batch int) error {
	got, err := raw.Read(ctx, r, batch)
	if err == nil && got != batch {
		err = fmt.Errorf("raw read %d of %d rows", got, batch)
	}
	return err
}
