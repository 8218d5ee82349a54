package lock_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
	"github.com/dcsync/dcsync/storeurl"
)

// The renewal scale test (issue 15): one process holds N locks with KeepAlive on one
// Manager and the store calls of their renewals are counted, with a wrapping store,
// over whole renewal intervals. On a store with driver.LockBatcher that is one call per
// interval whatever N; on one without, one RefreshLock per lock. It also reports the
// client's CPU and heap per held lock.
//
// By default (CI) it runs N = 10 on memory and SQLite with a 3 s TTL and asserts that
// every renewal round is one call renewing all N leases, and that there are no more
// rounds than intervals (timing can only delay a round, never add one). With
// DCSYNC_SCALE=1 it measures N = 10, 100, 1,000 and 10,000 with a 10 s TTL on memory
// and SQLite, and on HBase and Aerospike when DCSYNC_HBASE_ZK / DCSYNC_AEROSPIKE are
// set, and logs one table row per run (docs/benchmarks.md, "Scale: renewals"):
//
//	DCSYNC_SCALE=1 go test -count=1 -run TestRenewalScale -v -timeout 60m ./lock/

// callCounter wraps a store and counts the renewal calls that reach it.
type callCounter struct {
	driver.Store
	single  atomic.Int64 // RefreshLock calls
	batches atomic.Int64 // RefreshLocks calls
	leases  atomic.Int64 // leases renewed by RefreshLocks calls

	mu    sync.Mutex
	times []time.Time // of the RefreshLocks calls
}

func (c *callCounter) RefreshLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	c.single.Add(1)
	return c.Store.RefreshLock(ctx, k, owner, ttl)
}

func (c *callCounter) reset() {
	c.single.Store(0)
	c.batches.Store(0)
	c.leases.Store(0)
	c.mu.Lock()
	c.times = nil
	c.mu.Unlock()
}

// maxGap returns the longest time between two RefreshLocks calls since the reset.
func (c *callCounter) maxGap() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(c.times); i++ {
		gap = max(gap, c.times[i].Sub(c.times[i-1]))
	}
	return gap
}

// batchCounter is a callCounter over a store with driver.LockBatcher, which it offers
// in turn.
type batchCounter struct {
	*callCounter
	b driver.LockBatcher
}

func (c *batchCounter) RefreshLocks(ctx context.Context, reqs []driver.LockRefresh) ([]driver.LockResult, error) {
	c.batches.Add(1)
	c.leases.Add(int64(len(reqs)))
	c.mu.Lock()
	c.times = append(c.times, time.Now())
	c.mu.Unlock()
	return c.b.RefreshLocks(ctx, reqs)
}

func (c *batchCounter) InspectLocks(ctx context.Context, keys []dcsync.Key) ([]driver.LockResult, error) {
	return c.b.InspectLocks(ctx, keys)
}

// counted wraps s: a driver.LockBatcher exactly when s is one.
func counted(s driver.Store) (driver.Store, *callCounter) {
	c := &callCounter{Store: s}
	if b, ok := s.(driver.LockBatcher); ok {
		return &batchCounter{callCounter: c, b: b}, c
	}
	return c, c
}

type scaleStore struct {
	name string
	open func(t *testing.T) driver.Store
}

func scaleStores(t *testing.T, all bool) []scaleStore {
	stores := []scaleStore{
		{"memory", func(*testing.T) driver.Store { return memory.New() }},
		{"sqlite", func(t *testing.T) driver.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "scale.db"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
	if !all {
		return stores
	}
	remote := func(name, url string) scaleStore {
		return scaleStore{name, func(t *testing.T) driver.Store {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := storeurl.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}}
	}
	if zk := os.Getenv("DCSYNC_HBASE_ZK"); zk != "" {
		stores = append(stores, remote("hbase", "hbase://"+zk))
	}
	if addr := os.Getenv("DCSYNC_AEROSPIKE"); addr != "" {
		stores = append(stores, remote("aerospike", "aerospike://"+addr+"/test"))
	}
	return stores
}

func TestRenewalScale(t *testing.T) {
	full := os.Getenv("DCSYNC_SCALE") != ""
	ns, ttl := []int{10}, 3*time.Second
	if full {
		ns, ttl = []int{10, 100, 1000, 10000}, 10*time.Second
	}
	for _, st := range scaleStores(t, full) {
		for _, n := range ns {
			t.Run(fmt.Sprintf("%s/N=%d", st.name, n), func(t *testing.T) {
				s := st.open(t)
				defer s.Close()
				f := measureRenewals(t, s, n, ttl, 3)
				t.Logf("| %s | %d | %s | %d | %.2f | %.2f | %.1f | %.0f | %.0f | %d | %d |", st.name, n, f.mode, f.calls, f.perInterval,
					f.maxGap, f.callsPerSec, f.cpuPerLock, f.heapPerLock, f.goroutines, f.lost)
				if full || !f.batcher {
					return
				}
				// Each round is one call renewing every lease, and there are no more
				// rounds than intervals (a loaded machine delays rounds, never adds one).
				if f.single != 0 || f.calls == 0 || f.leases != int64(n)*f.calls || float64(f.calls) > f.intervals+1 {
					t.Fatalf("%d RefreshLocks calls renewing %d leases and %d RefreshLock calls in %.2f intervals; want one call of all %d leases per interval",
						f.calls-f.single, f.leases, f.single, f.intervals, n)
				}
			})
		}
	}
}

type renewalFigures struct {
	batcher        bool
	mode           string
	calls          int64 // renewal store calls in the window
	single, leases int64
	intervals      float64 // the window, in renewal intervals
	perInterval    float64 // store calls per renewal interval
	callsPerSec    float64
	cpuPerLock     float64 // ns of client CPU per second per held lock
	heapPerLock    float64 // bytes of heap per held lock (Lock, KeepAlive and, for an in-process store, its record)
	goroutines     int     // goroutines KeepAlive added, at rest
	lost           int     // leases lost while held
	maxGap         float64 // the longest time between two rounds, in intervals
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// measureRenewals holds n locks with KeepAlive (lease ttl) on one Manager over s,
// lets two renewal intervals pass for the rounds to align, and counts the renewal
// calls over the next `intervals` intervals.
func measureRenewals(t *testing.T, s driver.Store, n int, ttl time.Duration, intervals int) renewalFigures {
	ctx := context.Background()
	cs, c := counted(s)
	_, batcher := cs.(driver.LockBatcher)
	m, err := lock.New(cs, "scale", "dc1", lock.WithTTL(ttl), lock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("scale-%d-%d", time.Now().UnixNano(), n)
	warm, err := m.TryAcquire(ctx, prefix+"-warm") // connections made before g0
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g0 := runtime.NumGoroutine()
	h0 := heap()
	// KeepAlive at once after each acquisition: taking 10,000 locks one durable write
	// each can outlast a lease.
	kactx, stopKeepAlives := context.WithCancel(ctx)
	defer stopKeepAlives()
	locks := make([]*lock.Lock, n)
	kctxs := make([]context.Context, n)
	parallel(n, func(i int) {
		l, err := m.TryAcquire(ctx, fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			t.Error(err)
			return
		}
		locks[i], kctxs[i] = l, l.KeepAlive(kactx)
	})
	if t.Failed() {
		t.FailNow()
	}
	h2 := heap()
	every := (ttl - time.Duration(lock.DefaultClockDrift*float64(ttl)) - lock.DefaultMargin) / 3
	time.Sleep(2 * every) // the rounds align
	c.reset()
	cpu0, t0 := cpuTime(), time.Now()
	g := math.MaxInt // goroutines at rest: the fewest seen, sampled between rounds
	for end := t0.Add(time.Duration(intervals) * every); time.Now().Before(end); time.Sleep(97 * time.Millisecond) {
		g = min(g, runtime.NumGoroutine())
	}
	cpu, elapsed := cpuTime()-cpu0, time.Since(t0)
	f := renewalFigures{batcher: batcher, single: c.single.Load(), leases: c.leases.Load()}
	f.calls = c.batches.Load() + f.single
	f.mode = "RefreshLocks (one batch)"
	if !batcher {
		f.mode = "RefreshLock per lock (fallback)"
	}
	f.intervals = float64(elapsed) / float64(every)
	f.maxGap = float64(c.maxGap()) / float64(every)
	f.perInterval = float64(f.calls) / f.intervals
	f.callsPerSec = float64(f.calls) / elapsed.Seconds()
	f.cpuPerLock = float64(cpu) / elapsed.Seconds() / float64(n)
	f.heapPerLock = float64(int64(h2)-int64(h0)) / float64(n)
	f.goroutines = g - g0
	for _, k := range kctxs {
		if k.Err() != nil {
			f.lost++
		}
	}
	if f.lost > 0 {
		t.Errorf("%d of %d leases lost while held, the first: %v", f.lost, n, context.Cause(kctxs[0]))
	}

	parallel(n, func(i int) {
		if err := locks[i].Release(ctx); err != nil {
			t.Error(err)
		}
	})
	return f
}

// parallel runs f(0..n-1) on up to 16 goroutines.
func parallel(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, 16) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}
