package javaclients

import (
	"errors"
	"testing"
	"time"
)

// fixedBlock returns a Block whose iterations take d each (reported, not slept), d
// changing by round as rounds says.
func fixedBlock(rounds []time.Duration, calls *int) Block {
	return func(n int) ([]time.Duration, error) {
		d := rounds[*calls%len(rounds)]
		*calls++
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d
		}
		return out, nil
	}
}

// TestCompareRatios: Compare runs the three blocks in rounds, and the reported ratios are
// the medians over the rounds of each round's ratio of p50s, so that a round in which
// the whole machine was slow (every side 10x) does not move them.
func TestCompareRatios(t *testing.T) {
	var jc, dc, rc int
	us := time.Microsecond
	java := fixedBlock([]time.Duration{100 * us, 1000 * us, 100 * us, 110 * us, 90 * us}, &jc)
	dcsync := fixedBlock([]time.Duration{200 * us, 2000 * us, 220 * us, 200 * us, 180 * us}, &dc)
	raw := fixedBlock([]time.Duration{100 * us, 1000 * us, 110 * us, 100 * us, 90 * us}, &rc)
	c, err := Compare(5, 7, java, dcsync, raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rounds) != 5 || jc != 5 || dc != 5 || rc != 5 || len(c.Rounds[0].Java) != 7 {
		t.Fatalf("rounds %d, blocks %d/%d/%d, iterations %d; want 5 rounds of one block each of 7", len(c.Rounds), jc, dc, rc, len(c.Rounds[0].Java))
	}
	if got := c.MedianRatio(0.5, DcsyncSide, RawSide); got != 2 {
		t.Errorf("dcsync/raw = %v, want 2 (per-round 2 2 2 2 2)", got)
	}
	// Per-round dcsync/java: 2, 2, 2.2, 1.818..., 2: median 2.
	if got := c.MedianRatio(0.5, DcsyncSide, JavaSide); got != 2 {
		t.Errorf("dcsync/java = %v, want 2", got)
	}
	if got := c.MedianQuantile(0.5, JavaSide); got != 100*us {
		t.Errorf("java p50 over rounds = %v, want 100µs", got)
	}

	// A failing block stops the comparison with its side named.
	boom := errors.New("boom")
	_, err = Compare(3, 1, java, func(int) ([]time.Duration, error) { return nil, boom }, raw)
	if !errors.Is(err, boom) {
		t.Errorf("Compare with a failing block: %v, want boom", err)
	}
}

// TestQuantile: nearest rank, on a copy.
func TestQuantile(t *testing.T) {
	l := []time.Duration{5, 1, 4, 2, 3}
	if q := Quantile(l, 0.5); q != 3 {
		t.Errorf("p50 = %v, want 3", q)
	}
	if q := Quantile(l, 0.99); q != 5 {
		t.Errorf("p99 = %v, want 5", q)
	}
	if l[0] != 5 {
		t.Errorf("Quantile sorted its argument: %v", l)
	}
	if q := Quantile(nil, 0.5); q != 0 {
		t.Errorf("p50 of nothing = %v, want 0", q)
	}
}
