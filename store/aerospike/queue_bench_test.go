package aerospike_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// Queue benchmarks on the real server. Each iteration runs the queue operation and the
// raw Aerospike operation it rests on, one after the other on the same client, so the
// reported ratio compares them under the same (noisy) conditions:
//
//   - enqueue: AppendQueue of 500 events of 1 KiB (plain, no ids: one reservation
//     operate, then one batch of 500 create-only writes; ids: each event with a new id,
//     one batch more before and after the reservation) vs one batch of 500 plain
//     writes of records with the same bins to a set of their own;
//   - receive: ReadQueue(500) and CommitQueueOffset (a head read, a batch get of 500
//     keys, an offset write) vs a batch get of the same 500 entry records.
//
// Records are deleted as the benchmark goes, keeping the in-memory namespace small.

const (
	benchBatch   = 500
	benchPayload = 1 << 10
	// benchBench is the set of the raw records.
	benchSet = "dcsync_qbench"
)

func benchStore(b *testing.B) (*aerospike.Store, *as.Client) {
	c := realClient(b)
	return newStore(b, c, aerospike.Config{}), c
}

func benchEvents(n int) []driver.QueueEvent {
	events := make([]driver.QueueEvent, n)
	for i := range events {
		p := make([]byte, benchPayload)
		for j := range p {
			p[j] = byte(i + j)
		}
		events[i] = driver.QueueEvent{Key: fmt.Sprint("key-", i), Payload: p}
	}
	return events
}

// rawWrites returns a batch of plain writes of records like the queue's entries.
func rawWrites(b *testing.B, prefix string, events []driver.QueueEvent) []as.BatchRecordIfc {
	recs := make([]as.BatchRecordIfc, len(events))
	for i, e := range events {
		k, err := as.NewKey(namespace, benchSet, fmt.Sprintf("%s|%d", prefix, i))
		if err != nil {
			b.Fatal(err)
		}
		recs[i] = as.NewBatchWrite(nil, k, as.PutOp(as.NewBin("w", int64(1))), as.PutOp(as.NewBin("at", time.Now().UnixMilli())),
			as.PutOp(as.NewBin("k", e.Key)), as.PutOp(as.NewBin("v", e.Payload)))
	}
	return recs
}

func batchErr(err error, recs []as.BatchRecordIfc) error {
	if err != nil {
		return err
	}
	for _, r := range recs {
		if br := r.BatchRec(); br.ResultCode != 0 {
			return fmt.Errorf("record %v: %v", br.Key, br.ResultCode)
		}
	}
	return nil
}

func reportRatio(b *testing.B, queue, raw time.Duration, events int) {
	b.ReportMetric(float64(events)/queue.Seconds(), "queue-events/s")
	b.ReportMetric(float64(events)/raw.Seconds(), "raw-events/s")
	b.ReportMetric(queue.Seconds()/raw.Seconds(), "queue/raw")
	b.ReportMetric(0, "ns/op")
}

func BenchmarkQueueEnqueue(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchEnqueue(b, false) })
	b.Run("ids", func(b *testing.B) { benchEnqueue(b, true) })
}

// benchEnqueue: with ids, every event has a new id (the append claims and points its
// id record: two more batches of 500 writes than without).
func benchEnqueue(b *testing.B, ids bool) {
	s, c := benchStore(b)
	ctx := context.Background()
	spec := driver.QueueSpec{Name: unique("bench-enqueue"), Partitions: 1, Groups: []string{"g"}, Dedup: time.Minute}
	if err := s.CreateQueue(ctx, spec); err != nil {
		b.Fatal(err)
	}
	events := benchEvents(benchBatch)
	bp := as.NewBatchPolicy()
	var queueT, rawT time.Duration
	var appended, version uint64
	if _, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 1); err != nil {
		b.Fatal(err)
	}
	cleanup := func() {
		// Acked, then trimmed: a trim stops at the group's offset.
		version++
		if err := s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 1, Next: appended, Version: version}); err != nil {
			b.Fatal(err)
		}
		if err := s.TrimQueue(ctx, spec.Name, 0, appended); err != nil {
			b.Fatal(err)
		}
		del := make([]as.BatchRecordIfc, benchBatch)
		for i := range del {
			k, _ := as.NewKey(namespace, benchSet, fmt.Sprintf("%s|%d", spec.Name, i))
			del[i] = as.NewBatchDelete(nil, k)
		}
		_ = c.BatchOperate(bp, del)
	}
	b.Cleanup(cleanup)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ids {
			for j := range events {
				events[j].ID = fmt.Sprint(i, "-", j)
			}
		}
		t0 := time.Now()
		if _, err := s.AppendQueue(ctx, spec.Name, events); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		recs := rawWrites(b, spec.Name, events)
		if err := batchErr(c.BatchOperate(bp, recs), recs); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		queueT += t1.Sub(t0)
		rawT += t2.Sub(t1)
		appended += benchBatch
		if i%20 == 19 {
			b.StopTimer()
			cleanup()
			b.StartTimer()
		}
	}
	b.StopTimer()
	reportRatio(b, queueT, rawT, b.N*benchBatch)
}

func BenchmarkQueueReceive(b *testing.B) {
	s, c := benchStore(b)
	ctx := context.Background()
	spec := driver.QueueSpec{Name: unique("bench-receive"), Partitions: 1, Groups: []string{"g"}}
	if err := s.CreateQueue(ctx, spec); err != nil {
		b.Fatal(err)
	}
	const rounds = 20 // batches kept in the queue; reads cycle over them
	events := benchEvents(benchBatch)
	for range rounds {
		if _, err := s.AppendQueue(ctx, spec.Name, events); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		if err := s.DeleteQueue(ctx, spec.Name); err != nil {
			b.Fatal(err)
		}
	})
	off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	bp := as.NewBatchPolicy()
	// The raw reads build their keys as the store does (the key digest is most of the
	// client's CPU per record).
	rawReads := func(r int) []as.BatchRecordIfc {
		recs := make([]as.BatchRecordIfc, benchBatch)
		for i := range recs {
			recs[i] = as.NewBatchRead(nil, aerospike.QueueEntryKey(s, spec.Name, 0, uint64(r*benchBatch+i)), nil)
		}
		return recs
	}
	var queueT, rawT, readT time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := i % rounds
		from := uint64(r * benchBatch)
		t0 := time.Now()
		read, err := s.ReadQueue(ctx, spec.Name, 0, from, benchBatch)
		if err != nil {
			b.Fatal(err)
		}
		if len(read.Entries) != benchBatch {
			b.Fatalf("read %d entries", len(read.Entries))
		}
		tr := time.Now()
		off.Next = from + benchBatch
		off.Version++
		if err := s.CommitQueueOffset(ctx, spec.Name, "g", 0, off); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		readT += tr.Sub(t0)
		recs := rawReads(r)
		if err := batchErr(c.BatchOperate(bp, recs), recs); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		queueT += t1.Sub(t0)
		rawT += t2.Sub(t1)
	}
	b.StopTimer()
	reportRatio(b, queueT, rawT, b.N*benchBatch)
	b.ReportMetric(readT.Seconds()/rawT.Seconds(), "read/raw")
}
