package javaclients

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The Java libraries' operations timed in the JVM (the tool's hbase.bench and as.bench,
// Bench.java), and the comparison that runs them in blocks beside dcsync's operation and
// the raw client operation: the benchmarks BenchmarkJavaRatio of store/aerospike and
// store/hbase.

// Timing is n iterations of a Java library operation timed in the JVM, each with
// System.nanoTime around the library call alone (no request pipe).
type Timing struct {
	// NS holds each iteration's nanoseconds, in order.
	NS []int64 `json:"ns"`
	// Total is the nanoseconds of the whole timed loop.
	Total int64 `json:"total"`
}

// Durations returns NS as durations.
func (t Timing) Durations() []time.Duration {
	out := make([]time.Duration, len(t.NS))
	for i, v := range t.NS {
		out[i] = time.Duration(v)
	}
	return out
}

// BenchOp names the Java operation a bench request times.
type BenchOp string

// The operations the tool times.
const (
	// BenchLock is LockBase.tryAcquireLock + releaseLock of a fresh Lock instance.
	BenchLock BenchOp = "lock"
	// BenchCountDown is the latch storage's decrementCount.
	BenchCountDown BenchOp = "countdown"
	// BenchCount is the latch storage's getCount (at the level the request names).
	BenchCount BenchOp = "count"
)

func (t *Tool) bench(ctx context.Context, op string, f map[string]any) (Timing, error) {
	res, err := t.Call(ctx, op, f)
	if err != nil {
		return Timing{}, err
	}
	var out Timing
	if err := json.Unmarshal(res, &out); err != nil {
		return Timing{}, fmt.Errorf("javaclients %s: result: %w", op, err)
	}
	if want := f["n"].(int); len(out.NS) != want {
		return Timing{}, fmt.Errorf("javaclients %s: %d timings, want %d", op, len(out.NS), want)
	}
	return out, nil
}

// HBaseBenchLock times warmup untimed then n timed iterations of the DLM lock's
// acquire + release (HBaseStore.write then remove) of l, in the JVM.
func (t *Tool) HBaseBenchLock(ctx context.Context, l HBaseLock, ttl time.Duration, n, warmup int) (Timing, error) {
	return t.bench(ctx, "hbase.bench", with(l.fields(), "what", string(BenchLock), "ttl", secs(ttl), "n", n, "warmup", warmup))
}

// HBaseBenchLatch times warmup untimed then n timed iterations of HBaseLatchStorage's
// decrementCount (BenchCountDown) or getCount at level (BenchCount) on l, in the JVM.
func (t *Tool) HBaseBenchLatch(ctx context.Context, what BenchOp, l HBaseLatch, level string, n, warmup int) (Timing, error) {
	return t.bench(ctx, "hbase.bench", with(l.fields(), "what", string(what), "level", level, "n", n, "warmup", warmup))
}

// AerospikeBenchLock times warmup untimed then n timed iterations of the DLM lock's
// acquire + release (AerospikeStore.write then remove) of l, in the JVM.
func (t *Tool) AerospikeBenchLock(ctx context.Context, l AerospikeLock, ttl time.Duration, n, warmup int) (Timing, error) {
	return t.bench(ctx, "as.bench", with(l.fields(), "what", string(BenchLock), "ttl", secs(ttl), "n", n, "warmup", warmup))
}

// AerospikeBenchLatch times warmup untimed then n timed iterations of
// AerospikeLatchStorage's decrementCount (BenchCountDown) or getCount at level
// (BenchCount) on l, in the JVM.
func (t *Tool) AerospikeBenchLatch(ctx context.Context, what BenchOp, l AerospikeLatch, level string, n, warmup int) (Timing, error) {
	return t.bench(ctx, "as.bench", with(l.fields(), "what", string(what), "level", level, "n", n, "warmup", warmup))
}

// Block runs n timed iterations of one side of a comparison and returns each
// iteration's duration.
type Block func(n int) ([]time.Duration, error)

// GoBlock is the Block of a Go operation: op called n times, each call timed.
func GoBlock(op func() error) Block {
	return func(n int) ([]time.Duration, error) {
		out := make([]time.Duration, 0, n)
		for range n {
			t0 := time.Now()
			if err := op(); err != nil {
				return nil, err
			}
			out = append(out, time.Since(t0))
		}
		return out, nil
	}
}

// Round is one round of a comparison: each side's block, one after the other.
type Round struct {
	Java, Dcsync, Raw []time.Duration
}

// Comparison is the rounds of a three-way comparison: the Java library's operation,
// dcsync's and the raw client operation, each round one block of each, so that the
// noise of a shared machine falls on all three alike within a round.
type Comparison struct {
	Rounds []Round
}

// Compare runs rounds rounds of a Java block, a dcsync block and a raw block of n
// iterations each, in that order.
func Compare(rounds, n int, java, dcsync, raw Block) (Comparison, error) {
	var c Comparison
	for range rounds {
		var r Round
		var err error
		if r.Java, err = java(n); err != nil {
			return c, fmt.Errorf("java block: %w", err)
		}
		if r.Dcsync, err = dcsync(n); err != nil {
			return c, fmt.Errorf("dcsync block: %w", err)
		}
		if r.Raw, err = raw(n); err != nil {
			return c, fmt.Errorf("raw block: %w", err)
		}
		c.Rounds = append(c.Rounds, r)
	}
	return c, nil
}

// Quantile returns the q-quantile (0..1, nearest rank) of l; 0 when l is empty.
func Quantile(l []time.Duration, q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	l = slices.Clone(l)
	slices.Sort(l)
	i := int(q * float64(len(l)))
	return l[min(i, len(l)-1)]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// Ratios returns, for each round, the ratio of the q-quantiles of two sides (say
// Dcsync over Java).
func (c Comparison) Ratios(q float64, num, den func(Round) []time.Duration) []float64 {
	out := make([]float64, 0, len(c.Rounds))
	for _, r := range c.Rounds {
		if d := Quantile(den(r), q); d > 0 {
			out = append(out, float64(Quantile(num(r), q))/float64(d))
		}
	}
	return out
}

// MedianRatio is the median over the rounds of Ratios.
func (c Comparison) MedianRatio(q float64, num, den func(Round) []time.Duration) float64 {
	return median(c.Ratios(q, num, den))
}

// MedianQuantile is the median over the rounds of one side's q-quantile.
func (c Comparison) MedianQuantile(q float64, side func(Round) []time.Duration) time.Duration {
	v := make([]float64, 0, len(c.Rounds))
	for _, r := range c.Rounds {
		v = append(v, float64(Quantile(side(r), q)))
	}
	return time.Duration(median(v))
}

// The sides of a Round.
var (
	JavaSide   = func(r Round) []time.Duration { return r.Java }
	DcsyncSide = func(r Round) []time.Duration { return r.Dcsync }
	RawSide    = func(r Round) []time.Duration { return r.Raw }
)

// Report reports the comparison on b: each side's p50 and p99 (medians over the
// rounds), the medians over the rounds of the per-round ratios of p50s (dcsync/java,
// dcsync/raw, java/raw), and logs each round's ratios (not for b.N < 10).
func (c Comparison) Report(b *testing.B) {
	b.Helper()
	for _, s := range []struct {
		name string
		side func(Round) []time.Duration
	}{{"java", JavaSide}, {"dcsync", DcsyncSide}, {"raw", RawSide}} {
		b.ReportMetric(float64(c.MedianQuantile(0.5, s.side)), s.name+"-p50-ns")
		b.ReportMetric(float64(c.MedianQuantile(0.99, s.side)), s.name+"-p99-ns")
	}
	b.ReportMetric(c.MedianRatio(0.5, DcsyncSide, JavaSide), "dcsync/java")
	b.ReportMetric(c.MedianRatio(0.5, DcsyncSide, RawSide), "dcsync/raw")
	b.ReportMetric(c.MedianRatio(0.5, JavaSide, RawSide), "java/raw")
	if b.N < 10 {
		return // the benchmark framework's first run of one iteration
	}
	f := func(v []float64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprintf("%.2f", x)
		}
		return strings.Join(s, " ")
	}
	b.Logf("per-round p50 ratios over %d rounds: dcsync/java %s; dcsync/raw %s; java/raw %s", len(c.Rounds),
		f(c.Ratios(0.5, DcsyncSide, JavaSide)), f(c.Ratios(0.5, DcsyncSide, RawSide)), f(c.Ratios(0.5, JavaSide, RawSide)))
}
