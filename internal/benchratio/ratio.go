package benchratio

import (
	"slices"
	"testing"
	"time"
)

// Names are the metric names a run reports besides ratio-p50 and ratio-mean.
type Names struct {
	P50, RawP50     string // each side's median latency, e.g. "dcsync-p50-ns", "raw-p50-ns"
	Calls, RawCalls string // each side's store calls per op, e.g. "dcsync-calls/op"; reported only with a counter
}

// Default are the names of a dcsync side against a raw side.
var Default = Names{P50: "dcsync-p50-ns", RawP50: "raw-p50-ns", Calls: "dcsync-calls/op", RawCalls: "raw-calls/op"}

// Run resets b's timer, runs op then raw b.N times, each timed on its own, stops the
// timer and reports the metrics named by names: each side's median, ratio-p50 (the
// ratio of the medians) and ratio-mean (the ratio of the means), and, when calls is not
// nil, each side's calls per op, calls being read before and after each side (a
// counter of the store calls that only grows). An error of either side fails b.
func Run(b *testing.B, names Names, calls func() int64, op, raw func() error) {
	b.Helper()
	count := calls
	if count == nil {
		count = func() int64 { return 0 }
	}
	ld := make([]time.Duration, 0, b.N)
	lr := make([]time.Duration, 0, b.N)
	var opCalls, rawCalls int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n0 := count()
		t0 := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		n1 := count()
		if err := raw(); err != nil {
			b.Fatal(err)
		}
		ld, lr = append(ld, t1.Sub(t0)), append(lr, time.Since(t1))
		opCalls += n1 - n0
		rawCalls += count() - n1
	}
	b.StopTimer()
	b.ReportMetric(median(ld), names.P50)
	b.ReportMetric(median(lr), names.RawP50)
	b.ReportMetric(median(ld)/median(lr), "ratio-p50")
	b.ReportMetric(mean(ld)/mean(lr), "ratio-mean")
	if calls != nil {
		b.ReportMetric(float64(opCalls)/float64(b.N), names.Calls)
		b.ReportMetric(float64(rawCalls)/float64(b.N), names.RawCalls)
	}
}

// median returns the median of l in nanoseconds (the upper one of an even count).
func median(l []time.Duration) float64 {
	l = slices.Clone(l)
	slices.Sort(l)
	return float64(l[len(l)/2])
}

// mean returns the mean of l in nanoseconds.
func mean(l []time.Duration) float64 {
	var sum time.Duration
	for _, d := range l {
		sum += d
	}
	return float64(sum) / float64(len(l))
}
