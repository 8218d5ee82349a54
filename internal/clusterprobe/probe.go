// Package clusterprobe is the probe of the cluster tests (store/aerospike and
// store/hbase, cluster_test.go, DCSYNC_CLUSTER=1): store operations in a loop while a
// node leaves and rejoins or regions move and region servers stop and start, each
// one's start, latency and error code recorded, summed up per phase of the run
// (before, during each event, after). See docs/clusters.md.
package clusterprobe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// OpTimeout bounds every probe operation: one that runs into it hung (the store
// neither answered nor failed), which the cluster tests refuse.
const OpTimeout = 60 * time.Second

// Sample is one operation of the probe.
type Sample struct {
	kind  string
	start time.Time
	dur   time.Duration
	code  dcsync.Code // 0: success
	hung  bool        // the operation ran into OpTimeout
}

// Event is one thing done to the cluster: its name and when it began.
type Event struct {
	name string
	at   time.Time
}

// Probe runs the probe's workers and keeps their samples and the events.
type Probe struct {
	s    driver.Store
	name string

	mu      sync.Mutex
	samples []Sample
	events  []Event
	started time.Time
}

// New prepares the probe's latch and queue on s (names prefixed by name).
func New(ctx context.Context, t *testing.T, s driver.Store, name string) *Probe {
	t.Helper()
	p := &Probe{s: s, name: name}
	if err := s.CreateLatch(ctx, p.latchKey(), 1_000_000_000, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: 4, Groups: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *Probe) latchKey() dcsync.Key {
	return dcsync.Key{Level: dcsync.XDC, Client: "cluster", Farm: "dc1", Name: p.name + "-latch"}
}

// Mark records an event, now.
func (p *Probe) Mark(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, Event{name: name, at: time.Now()})
}

// Run runs one worker per kind of operation (lock acquire+release, latch count-down,
// enqueue of one event, latch read) until ctx ends.
func (p *Probe) Run(ctx context.Context) {
	p.mu.Lock()
	p.started = time.Now()
	p.mu.Unlock()
	ops := map[string]func(ctx context.Context, i int) error{
		"lock": func(ctx context.Context, i int) error {
			k := dcsync.Key{Level: dcsync.XDC, Client: "cluster", Farm: "dc1", Name: fmt.Sprintf("%s-lock-%d", p.name, i)}
			if _, err := p.s.AcquireLock(ctx, k, "probe", 10*time.Second); err != nil {
				return err
			}
			return p.s.ReleaseLock(ctx, k, "probe")
		},
		"countdown": func(ctx context.Context, _ int) error {
			_, err := p.s.AddLatch(ctx, p.latchKey(), -1)
			return err
		},
		"count": func(ctx context.Context, _ int) error {
			_, err := p.s.ReadLatches(ctx, []dcsync.Key{p.latchKey()})
			return err
		},
		"enqueue": func(ctx context.Context, i int) error {
			_, err := p.s.AppendQueue(ctx, p.name, []driver.QueueEvent{{Partition: i % 4, ID: fmt.Sprintf("e%d", i), Payload: []byte("x")}})
			return err
		},
	}
	var wg sync.WaitGroup
	for kind, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				octx, cancel := context.WithTimeout(ctx, OpTimeout)
				start := time.Now()
				err := op(octx, i)
				dur := time.Since(start)
				hung := errors.Is(octx.Err(), context.DeadlineExceeded)
				cancel()
				if ctx.Err() != nil {
					return // the run ended: this one was cut off, not measured
				}
				p.mu.Lock()
				p.samples = append(p.samples, Sample{kind: kind, start: start, dur: dur, code: dcsync.CodeOf(err), hung: hung})
				p.mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// Phase sums up the operations that started in one phase of the run.
type Phase struct {
	name     string
	from, to time.Time
	ops      int
	p50, p99 time.Duration
	max      time.Duration
	errors   map[string]int // by "kind: code"
	codes    map[dcsync.Code]int
	hung     int
	// lastErr is how long after the phase's start its last failed operation ended.
	lastErr time.Duration
	// recovered is, for a phase with errors, how long after its start the first success
	// after its last error ended (0 when nothing failed).
	recovered time.Duration
}

func (ph Phase) String() string {
	var errs []string
	for c, n := range ph.errors {
		errs = append(errs, fmt.Sprintf("%s %d", c, n))
	}
	slices.Sort(errs)
	e := "none"
	if len(errs) > 0 {
		e = strings.Join(errs, ", ")
	}
	rec := "-"
	if ph.recovered > 0 {
		rec = fmt.Sprintf("%.1f s / %.1f s", ph.lastErr.Seconds(), ph.recovered.Seconds())
	}
	return fmt.Sprintf("| %s | %.1f s | %d | %v | %v | %v | %s | %s |", ph.name, ph.to.Sub(ph.from).Seconds(), ph.ops,
		ph.p50.Round(10*time.Microsecond), ph.p99.Round(time.Millisecond), ph.max.Round(time.Millisecond), e, rec)
}

// Phases splits the samples at the events: before the first, then one phase per event
// up to the next (the last up to now).
func (p *Probe) Phases() []Phase {
	p.mu.Lock()
	defer p.mu.Unlock()
	bounds := []Event{{name: "before", at: p.started}}
	bounds = append(bounds, p.events...)
	var out []Phase
	for i, b := range bounds {
		to := time.Now()
		if i+1 < len(bounds) {
			to = bounds[i+1].at
		}
		ph := Phase{name: b.name, from: b.at, to: to, errors: map[string]int{}, codes: map[dcsync.Code]int{}}
		var lat []time.Duration
		var lastErr time.Time
		for _, s := range p.samples {
			if s.start.Before(b.at) || !s.start.Before(to) {
				continue
			}
			ph.ops++
			lat = append(lat, s.dur)
			if s.hung {
				ph.hung++
			}
			if s.code != 0 {
				ph.errors[s.kind+": "+s.code.String()]++
				ph.codes[s.code]++
				if end := s.start.Add(s.dur); end.After(lastErr) {
					lastErr = end
				}
			}
		}
		if !lastErr.IsZero() {
			// The first success that ended after the last error.
			var first time.Time
			for _, s := range p.samples {
				end := s.start.Add(s.dur)
				if s.code == 0 && end.After(lastErr) && (first.IsZero() || end.Before(first)) {
					first = end
				}
			}
			ph.lastErr = lastErr.Sub(b.at)
			if !first.IsZero() {
				ph.recovered = first.Sub(b.at)
			}
		}
		if len(lat) > 0 {
			slices.Sort(lat)
			ph.p50 = lat[len(lat)/2]
			ph.p99 = lat[min(len(lat)-1, len(lat)*99/100)]
			ph.max = lat[len(lat)-1]
		}
		out = append(out, ph)
	}
	return out
}

// Report logs the phases as a markdown table (the figures of docs/clusters.md) and
// fails t when an operation hung or failed with an error that carries no dcsync code
// of a store outage (Connection, RetriesExhausted), or LockLost from the lock's release
// (an acquire slowed by the outage past the probe's 10 s lease, or a release whose
// first attempt landed and whose retry found the lock free). LockUnavailable is not
// expected: every probe lock is its own.
func (p *Probe) Report(t *testing.T) []Phase {
	t.Helper()
	phases := p.Phases()
	t.Log("| phase (from the event) | length | ops | p50 | p99 | max | errors (op: code count) | last error ended / first success after it (from the event) |")
	t.Log("|---|---|---|---|---|---|---|---|")
	for _, ph := range phases {
		t.Log(ph.String())
		if ph.hung > 0 {
			t.Errorf("phase %s: %d operations hung for %v", ph.name, ph.hung, OpTimeout)
		}
		for c, n := range ph.codes {
			if c != dcsync.Connection && c != dcsync.RetriesExhausted && (c != dcsync.LockLost || ph.errors["lock: "+c.String()] != n) {
				t.Errorf("phase %s: %d operations failed with code %v (want Connection or RetriesExhausted, or LockLost from a lock)", ph.name, n, c)
			}
		}
	}
	return phases
}
