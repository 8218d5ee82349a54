package aerospike_test

import (
	"context"
	"slices"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// BenchmarkQueueCommits writes the offsets of 8 partitions of one group, alternately in
// one loop (the order rotating each iteration, so that the noise of a shared machine
// falls on all alike): by CommitQueueOffsets (one batch command), by 8 CommitQueueOffset
// one after the other (the loop fallback), and raw, by one BatchOperate of 8
// unconditioned puts of the same bins (the floor). It reports each side's median and the
// ratios of the medians.
func BenchmarkQueueCommits(b *testing.B) {
	c := realClient(b)
	s := newStore(b, c, aerospike.Config{})
	ctx := context.Background()
	const k = 8
	queue := func() string {
		spec := driver.QueueSpec{Name: unique("qc"), Partitions: k, Groups: []string{"g"}, Dedup: time.Hour}
		if err := s.CreateQueue(ctx, spec); err != nil {
			b.Fatal(err)
		}
		for p := range k {
			if _, err := s.ClaimQueuePartition(ctx, spec.Name, "g", p, 1); err != nil {
				b.Fatal(err)
			}
		}
		return spec.Name
	}
	batched, single, raw := queue(), queue(), queue()
	rawKeys := make([]*as.Key, k)
	for p := range k {
		rawKeys[p] = aerospike.QueueOffsetKey(s, raw, "g", p)
	}
	offsets := func(v uint64) []driver.QueueCommit {
		cs := make([]driver.QueueCommit, k)
		for p := range cs {
			cs[p] = driver.QueueCommit{P: p, Off: driver.QueueOffset{Token: 1, Next: v * 10, Held: true, Version: v}}
		}
		return cs
	}
	sides := []func(v uint64) error{
		func(v uint64) error {
			res, err := s.CommitQueueOffsets(ctx, batched, "g", offsets(v))
			if err != nil {
				return err
			}
			for _, err := range res {
				if err != nil {
					return err
				}
			}
			return nil
		},
		func(v uint64) error {
			for _, c := range offsets(v) {
				if err := s.CommitQueueOffset(ctx, single, "g", c.P, c.Off); err != nil {
					return err
				}
			}
			return nil
		},
		func(v uint64) error {
			recs := make([]as.BatchRecordIfc, k)
			for p, c := range offsets(v) {
				recs[p] = as.NewBatchWrite(nil, rawKeys[p],
					as.PutOp(as.NewBin("next", int64(c.Off.Next))), as.PutOp(as.NewBin("att", 0)),
					as.PutOp(as.NewBin("held", 1)), as.PutOp(as.NewBin("ver", int64(v))))
			}
			return batchErr(c.BatchOperate(nil, recs), recs)
		},
	}
	times := make([][]time.Duration, len(sides))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range sides {
			side := (i + j) % len(sides)
			start := time.Now()
			if err := sides[side](uint64(i + 1)); err != nil {
				b.Fatal(err)
			}
			times[side] = append(times[side], time.Since(start))
		}
	}
	med := make([]float64, len(sides))
	for j, ts := range times {
		slices.Sort(ts)
		med[j] = float64(ts[len(ts)/2])
	}
	b.ReportMetric(med[0]/1e3, "batch-p50-µs")
	b.ReportMetric(med[1]/1e3, "single8-p50-µs")
	b.ReportMetric(med[2]/1e3, "raw-p50-µs")
	b.ReportMetric(med[0]/med[2], "batch/raw")
	b.ReportMetric(med[1]/med[2], "single8/raw")
}
