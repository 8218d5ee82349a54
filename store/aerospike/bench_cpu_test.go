package aerospike_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/layout"
	"github.com/dcsync/dcsync/lock"
)

// BenchmarkCPU splits each operation's cost into the CPU time it takes on the client
// (this process, getrusage) and, when $DCSYNC_AEROSPIKE_PID names the server's process,
// on the server (the sum of its threads' on-CPU nanoseconds, /proc/PID/task/*/schedstat):
// CPU time is what a loaded machine's wall-clock noise does not change (much). It runs
// blocks of b.N dcsync operations and b.N raw ones alternately, 7 rounds, and reports
// the medians over the rounds of the CPU µs per operation. The server is shared: other
// clients' commands during a block count too, so read the medians, not single rounds.
//
//	go test -run '^$' -bench BenchmarkCPU -benchtime 1000x ./store/aerospike/
func BenchmarkCPU(b *testing.B) {
	c, s := benchSetup(b)
	ctx := context.Background()
	pid := os.Getenv("DCSYNC_AEROSPIKE_PID")
	lm, err := lock.New(s, "bench", "dc1")
	if err != nil {
		b.Fatal(err)
	}
	m, err := latch.New(s, "bench", "dc1")
	if err != nil {
		b.Fatal(err)
	}
	rawLatch := func(count int64) *as.Key {
		k := key(b, latchSet, layout.AerospikeLatchKey("bench", unique("raw")))
		wp := as.NewWritePolicy(0, 3600) // as javaCreateLatch, living an hour
		wp.RecordExistsAction = as.CREATE_ONLY
		if err := c.Put(wp, k, as.BinMap{"count#dc1": count}); err != nil {
			b.Fatal(err)
		}
		return k
	}
	update := as.NewWritePolicy(0, 60)
	update.RecordExistsAction = as.UPDATE_ONLY
	lockName := unique("lock")
	rawLock := key(b, dc1Locks, "bench#"+unique("rawlock"))
	put := as.NewWritePolicy(0, 60)
	put.GenerationPolicy = as.EXPECT_GEN_EQUAL
	cd, err := m.CreateCountDown(ctx, unique("cd"), 1<<40)
	if err != nil {
		b.Fatal(err)
	}
	rawCD := rawLatch(1 << 40)
	xdc, err := m.CreateCountDown(ctx, unique("count"), 5, latch.Level(dcsync.XDC))
	if err != nil {
		b.Fatal(err)
	}
	rawCount := rawLatch(5)
	pairs := []struct {
		name        string
		dcsync, raw func() error
	}{
		{"LockAcquireRelease", func() error {
			l, err := lm.TryAcquire(ctx, lockName)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}, func() error {
			if err := c.Put(put, rawLock, as.BinMap{"dc1##data": 1, "dc1##uat": time.Now().UnixMilli()}); err != nil {
				return err
			}
			_, err := c.Delete(nil, rawLock)
			return err
		}},
		{"LatchCountDown", func() error { _, err := cd.CountDown(ctx); return err }, func() error {
			_, err := c.Operate(update, rawCD, as.AddOp(as.NewBin("count#dc1", -1)))
			return err
		}},
		{"LatchCountXDC", func() error { _, err := xdc.Count(ctx); return err }, func() error {
			rec, err := c.Get(nil, rawCount)
			if err != nil {
				return err
			}
			n := 0
			for name, v := range rec.Bins {
				if strings.Contains(name, "count#") {
					n += v.(int)
				}
			}
			_ = n
			return nil
		}},
	}
	for _, p := range pairs {
		b.Run(p.name, func(b *testing.B) {
			const rounds = 7
			var cliD, cliR, srvD, srvR, wallD, wallR []float64
			block := func(f func() error) (cli, srv, wall float64) {
				c0, s0, t0 := clientCPU(), serverCPU(pid), time.Now()
				for range b.N {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
				n := float64(b.N)
				return float64(clientCPU()-c0) / n / 1e3, float64(serverCPU(pid)-s0) / n / 1e3, float64(time.Since(t0)) / n / 1e3
			}
			for range rounds {
				c, s, w := block(p.dcsync)
				cliD, srvD, wallD = append(cliD, c), append(srvD, s), append(wallD, w)
				c, s, w = block(p.raw)
				cliR, srvR, wallR = append(cliR, c), append(srvR, s), append(wallR, w)
			}
			med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
			b.ReportMetric(med(cliD), "dcsync-client-cpu-us")
			b.ReportMetric(med(cliR), "raw-client-cpu-us")
			if pid != "" {
				b.ReportMetric(med(srvD), "dcsync-server-cpu-us")
				b.ReportMetric(med(srvR), "raw-server-cpu-us")
			}
			b.ReportMetric(med(wallD), "dcsync-wall-us")
			b.ReportMetric(med(wallR), "raw-wall-us")
		})
	}
}

// clientCPU is this process's user + system CPU time in ns.
func clientCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// serverCPU is the on-CPU ns of every thread of process pid (0 when pid is "").
func serverCPU(pid string) int64 {
	if pid == "" {
		return 0
	}
	files, _ := filepath.Glob("/proc/" + pid + "/task/*/schedstat")
	var sum int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if fs := strings.Fields(string(b)); len(fs) > 0 {
			n, _ := strconv.ParseInt(fs[0], 10, 64)
			sum += n
		}
	}
	return sum
}
