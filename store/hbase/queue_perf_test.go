package hbase

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// BenchmarkQueueAppendParts times the parts of an append, each built from raw client
// calls on the rows an append of 500 1 KB events over 16 partitions writes, to see
// where AppendQueue's time goes (compare the events/s metrics in one run):
//
//	Raw        one MultiMutate of plain Puts of q:e (what BenchmarkQueue's Raw does)
//	Mark       the same Puts with the q:m marker too
//	Inc        one MultiMutate of 16 Increments (the reservation) alone
//	IncMark    the reservation, then the Puts of q:e and q:m (no read-back)
//	ReadBack   the Puts of q:e and q:m, each read back (q:a) in the same request
//	MultiGet   Puts, then a MultiGet of every row's q:a
//	Scan       Puts, then one Scan of q:a per partition over its contiguous range,
//	           the 16 scans concurrent
//	SplitRaw   Raw's Puts in one MultiMutate per partition, concurrent
//	SplitScan  Mark's Puts in one MultiMutate per partition, concurrent, each followed
//	           by its partition's Scan of q:a (what AppendQueue writes large batches with)
//	IncSplitScan  the reservation, then SplitScan: AppendQueue of events without ids
//	Chain      per partition, concurrent: its Increment, its Puts, its Scan
//
// Interleaved runs every variant once per op, in turn, so that the shared machine's
// noise falls on all alike, and reports each one's events/s over its median op.
func BenchmarkQueueAppendParts(b *testing.B) {
	s := openQueueStore(b)
	defer s.Close()
	if _, _, err := s.qready(context.Background(), "bench"); err != nil {
		b.Fatal(err)
	}
	c := s.client
	ctx := context.Background()
	table := s.QueueTable()
	payload := make([]byte, benchPayload)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	type variant struct {
		name string
		run  func(name string, base uint64) error
	}
	perPart := uint64(benchBatch / benchParts) // rows per partition and batch, rounded down
	puts := func(name string, base uint64, mark, read bool) []hbaserpc.Action {
		acts := make([]hbaserpc.Action, benchBatch)
		for k := range acts {
			p := k % benchParts
			vals := []hbaserpc.Value{{Family: famQueue, Qualifier: qualEntry, Value: payload}}
			if mark {
				vals = append(vals, hbaserpc.Value{Family: famQueue, Qualifier: []byte("m"), Value: []byte{1}})
			}
			acts[k] = hbaserpc.Action{Mutation: &hbaserpc.Put{Row: entryRow(partPrefix(name, p), base*(perPart+1)+uint64(k/benchParts)), Values: vals}}
			if read {
				acts[k].Read = abortCols
			}
		}
		return acts
	}
	inc := func(name string) error {
		acts := make([]hbaserpc.Action, benchParts)
		for p := range acts {
			acts[p] = hbaserpc.Action{Mutation: &hbaserpc.Increment{Row: headRow(name, p),
				Deltas: []hbaserpc.Delta{{Family: famQueue, Qualifier: qualHead, Amount: int64(perPart)}}}}
		}
		_, err := c.MultiMutate(ctx, table, acts)
		return err
	}
	variants := []variant{
		{"Raw", func(name string, base uint64) error {
			_, err := c.MultiMutate(ctx, table, puts(name, base, false, false))
			return err
		}},
		{"Mark", func(name string, base uint64) error {
			_, err := c.MultiMutate(ctx, table, puts(name, base, true, false))
			return err
		}},
		{"Inc", func(name string, base uint64) error { return inc(name) }},
		{"IncMark", func(name string, base uint64) error {
			if err := inc(name); err != nil {
				return err
			}
			_, err := c.MultiMutate(ctx, table, puts(name, base, true, false))
			return err
		}},
		{"ReadBack", func(name string, base uint64) error {
			_, err := c.MultiMutate(ctx, table, puts(name, base, true, true))
			return err
		}},
		{"MultiGet", func(name string, base uint64) error {
			acts := puts(name, base, true, false)
			if _, err := c.MultiMutate(ctx, table, acts); err != nil {
				return err
			}
			gets := make([]hbaserpc.Get, len(acts))
			for k, a := range acts {
				gets[k] = hbaserpc.Get{Row: a.Mutation.(*hbaserpc.Put).Row, Columns: abortCols}
			}
			_, err := c.MultiGet(ctx, table, gets)
			return err
		}},
		{"Scan", func(name string, base uint64) error {
			if _, err := c.MultiMutate(ctx, table, puts(name, base, true, false)); err != nil {
				return err
			}
			var wg sync.WaitGroup
			errs := make([]error, benchParts)
			for p := 0; p < benchParts; p++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pre := partPrefix(name, p)
					first := base * (perPart + 1)
					_, errs[p] = c.Scan(ctx, table, hbaserpc.Scan{StartRow: entryRow(pre, first), StopRow: entryRow(pre, first+perPart+1), Columns: abortCols})
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		}},
	}
	// Split: one MultiMutate per partition, concurrent, each followed by its scan.
	split := func(name string, base uint64, mark, scan, incr bool) error {
		acts := puts(name, base, mark, false)
		var wg sync.WaitGroup
		errs := make([]error, benchParts)
		for p := 0; p < benchParts; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if incr {
					if _, errs[p] = c.MultiMutate(ctx, table, []hbaserpc.Action{{Mutation: &hbaserpc.Increment{Row: headRow(name, p),
						Deltas: []hbaserpc.Delta{{Family: famQueue, Qualifier: qualHead, Amount: int64(perPart)}}}}}); errs[p] != nil {
						return
					}
				}
				var mine []hbaserpc.Action
				for k := p; k < len(acts); k += benchParts {
					mine = append(mine, acts[k])
				}
				if _, errs[p] = c.MultiMutate(ctx, table, mine); errs[p] != nil || !scan {
					return
				}
				pre := partPrefix(name, p)
				first := base * (perPart + 1)
				_, errs[p] = c.Scan(ctx, table, hbaserpc.Scan{StartRow: entryRow(pre, first), StopRow: entryRow(pre, first+perPart+1), Columns: abortCols})
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
	variants = append(variants,
		variant{"SplitRaw", func(name string, base uint64) error { return split(name, base, false, false, false) }},
		variant{"SplitScan", func(name string, base uint64) error { return split(name, base, true, true, false) }},
		variant{"IncSplitScan", func(name string, base uint64) error {
			if err := inc(name); err != nil {
				return err
			}
			return split(name, base, true, true, false)
		}},
		variant{"Chain", func(name string, base uint64) error { return split(name, base, true, true, true) }},
	)
	b.Run("Interleaved", func(b *testing.B) {
		name := "perf-" + randHex(5)
		spent := make([][]time.Duration, len(variants))
		var base uint64
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for k := range variants {
				v := variants[(k+i)%len(variants)]
				t0 := time.Now()
				if err := v.run(name, base); err != nil {
					b.Fatal(err)
				}
				spent[(k+i)%len(variants)] = append(spent[(k+i)%len(variants)], time.Since(t0))
				base++
			}
		}
		for k, v := range variants {
			b.ReportMetric(float64(benchBatch)/median(spent[k]).Seconds(), v.name+"-ev/s")
		}
	})
	for _, g := range []int{1, 4} {
		for _, v := range variants {
			b.Run(fmt.Sprintf("%s/g=%d", v.name, g), func(b *testing.B) {
				name := "perf-" + randHex(5)
				var seq atomic.Uint64
				parallelOps(b, g, benchBatch, func(_, _ int) error {
					return v.run(name, seq.Add(1)-1)
				})
			})
		}
	}
}

// BenchmarkQueueEnqueueInterleaved compares, in phases that alternate so that the
// machine's noise falls on all alike, AppendQueue of N 1 KB events over 16
// partitions as AppendQueue does it ("queue"), forced to verify its Puts the former
// way, every row read back in the Puts' request ("readback"), or by scans ("scan"),
// with raw MultiMutates of N plain
// Puts of the same size ("raw", BenchmarkQueue's Enqueue/Raw), from G goroutines.
// Each b.N is one phase of 4 batches per goroutine per variant. Reports each
// variant's events/s and the ratios.
func BenchmarkQueueEnqueueInterleaved(b *testing.B) {
	s := openQueueStore(b)
	defer s.Close()
	c := s.client
	ctx := context.Background()
	table := s.QueueTable()
	payload := make([]byte, benchPayload)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	for _, c2 := range []struct{ g, n int }{{1, benchBatch}, {4, benchBatch}, {1, 1}, {1, 16}, {1, 64}, {1, 128}, {1, 256}} {
		g, n := c2.g, c2.n
		evs := benchEvents(n, benchParts, payload)
		b.Run(fmt.Sprintf("g=%d/n=%d", g, n), func(b *testing.B) {
			name := qname(b)
			if err := s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: benchParts, Groups: []string{"g"}}); err != nil {
				b.Fatal(err)
			}
			raw := "raw-" + randHex(5)
			var rawSeq atomic.Uint64
			variants := []struct {
				name string
				op   func() error
			}{
				{"queue", func() error {
					_, err := s.AppendQueue(ctx, name, evs)
					return err
				}},
				{"readback", func() error {
					_, err := s.AppendQueue(ctx, name, evs)
					return err
				}},
				{"scan", func() error {
					_, err := s.AppendQueue(ctx, name, evs)
					return err
				}},
				{"raw", func() error {
					base := rawSeq.Add(uint64(n)) - uint64(n)
					acts := make([]hbaserpc.Action, n)
					for k := range acts {
						acts[k] = hbaserpc.Action{Mutation: &hbaserpc.Put{Row: entryRow(partPrefix(raw, k%benchParts), base+uint64(k)),
							Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualEntry, Value: payload}}}}
					}
					_, err := c.MultiMutate(ctx, table, acts)
					return err
				}},
			}
			const perPhase = 4
			spent := make([][]time.Duration, len(variants))
			defer appendVerify.Store(verifyAuto)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k := range variants {
					v := (k + i) % len(variants)
					switch variants[v].name {
					case "readback":
						appendVerify.Store(verifyReadBack)
					case "scan":
						appendVerify.Store(verifyScan)
					default:
						appendVerify.Store(verifyAuto)
					}
					var wg sync.WaitGroup
					errs := make([]error, g)
					t0 := time.Now()
					for w := 0; w < g; w++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for n := 0; n < perPhase && errs[w] == nil; n++ {
								errs[w] = variants[v].op()
							}
						}()
					}
					wg.Wait()
					spent[v] = append(spent[v], time.Since(t0))
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.StopTimer()
			rate := make([]float64, len(variants))
			for k, v := range variants {
				rate[k] = float64(g*perPhase*n) / median(spent[k]).Seconds()
				b.ReportMetric(rate[k], v.name+"-ev/s")
			}
			b.ReportMetric(rate[0]/rate[3], "queue/raw")
			b.ReportMetric(rate[1]/rate[3], "readback/raw")
		})
	}
}

// median returns the median of ds (which it sorts): the interleaved benchmarks report
// medians of their phases, as the shared machine's load comes in bursts.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}
