package hbase

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/internal/javaclients"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
)

// javaBenchRounds is how many rounds (a Java block, a dcsync block, a raw block of b.N
// iterations each) BenchmarkJavaRatio runs per operation; javaBenchWarmup how many
// untimed iterations warm the JVM's JIT (and the Go side) first.
const (
	javaBenchRounds = 5
	javaBenchWarmup = 1500
)

// BenchmarkJavaRatio compares dcsync's operation with the Java library's own operation
// (testenv/javaclients, timed in the JVM on the real HBase Java client, after a warm-up)
// and with the raw hbaserpc operation, on the same HBase in one run: javaBenchRounds
// rounds of a Java block, a dcsync block and a raw block of b.N iterations each,
// reporting each side's p50 and p99 and the medians of the per-round ratios of p50s
// (dcsync/java, dcsync/raw, java/raw). The tables are the Java interop tests' (jcTables).
//
//	LockAcquireRelease  lock.Manager TryAcquire + Release  vs  LockBase.tryAcquireLock + releaseLock  vs  if-absent CheckAndMutate + Delete
//	LatchCountDown      CountDown (DC)                     vs  decrementCount (Increment)             vs  Increment with TTL
//	LatchCount          Count (DC)                         vs  getCount(DC)                           vs  Get of one cell
//
// Run: go test -run '^$' -bench JavaRatio -benchtime 300x ./store/hbase/
// (needs $DCSYNC_HBASE_ZK, Java 17 and Maven; skipped without them unless CI=true).
func BenchmarkJavaRatio(b *testing.B) {
	zk := zkQuorum(b)
	c := shared(b)
	tool := javaclients.Require(b, javaclients.Config{HBaseZK: zk})
	lockTable, latchSuffix := jcTables()
	ctx := context.Background()
	setup, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := tool.HBaseLockInit(setup, lockTable); err != nil {
		b.Fatalf("Java HBaseStore.initialize: %v", err)
	}
	s, err := New(setup, c, Config{LockTable: lockTable, LatchTableSuffix: latchSuffix, Logger: testLogger()})
	if err != nil {
		b.Fatalf("New: %v", err)
	}
	defer s.Close()
	lm, err := lock.New(s, "bench", "dc1")
	if err != nil {
		b.Fatal(err)
	}
	m, err := latch.New(s, "bench", "dc1")
	if err != nil {
		b.Fatal(err)
	}
	name := "jratio-" + randHex(4)
	jlock := javaclients.HBaseLock{Table: lockTable, Level: "DC", Farm: "dc1", Client: "bench", Lock: "java-" + randHex(4)}
	jlatch := javaclients.HBaseLatch{Suffix: latchSuffix, Client: "bench", Latch: "java-" + randHex(4), Farm: "dc1"}
	if err := tool.HBaseLatchCreate(setup, jlatch, 1<<40, time.Hour); err != nil {
		b.Fatal(err)
	}
	d, err := m.CreateCountDown(setup, name, 1<<40)
	if err != nil {
		b.Fatal(err)
	}
	row := []byte("\x7fbench-raw-" + randHex(4))
	q := []byte("count_dc1")
	if _, err := c.Increment(setup, s.latchTable, &hbaserpc.Increment{Row: row,
		Deltas: []hbaserpc.Delta{{Family: famLatch, Qualifier: q, Amount: 1 << 40}}, TTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	benches := []struct {
		name              string
		java, dcsync, raw javaclients.Block
	}{
		{"LockAcquireRelease",
			func(n int) ([]time.Duration, error) {
				t, err := tool.HBaseBenchLock(ctx, jlock, time.Minute, n, 0)
				return t.Durations(), err
			},
			javaclients.GoBlock(func() error {
				l, err := lm.TryAcquire(ctx, name)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}),
			javaclients.GoBlock(func() error {
				if _, _, err := c.CheckAndMutate(ctx, lockTable, row, hbaserpc.IfAbsent(famLock, qualLock),
					&hbaserpc.Put{Values: []hbaserpc.Value{{Family: famLock, Qualifier: qualLock, Value: lockMarker}}, TTL: time.Minute}); err != nil {
					return err
				}
				return c.Delete(ctx, lockTable, &hbaserpc.Delete{Row: row})
			}),
		},
		{"LatchCountDown",
			func(n int) ([]time.Duration, error) {
				t, err := tool.HBaseBenchLatch(ctx, javaclients.BenchCountDown, jlatch, "DC", n, 0)
				return t.Durations(), err
			},
			javaclients.GoBlock(func() error { _, err := d.CountDown(ctx); return err }),
			javaclients.GoBlock(func() error {
				_, err := c.Increment(ctx, s.latchTable, &hbaserpc.Increment{Row: row,
					Deltas: []hbaserpc.Delta{{Family: famLatch, Qualifier: q, Amount: -1}}, TTL: time.Hour})
				return err
			}),
		},
		{"LatchCount",
			func(n int) ([]time.Duration, error) {
				t, err := tool.HBaseBenchLatch(ctx, javaclients.BenchCount, jlatch, "DC", n, 0)
				return t.Durations(), err
			},
			javaclients.GoBlock(func() error { _, err := d.Count(ctx); return err }),
			javaclients.GoBlock(func() error {
				_, err := c.Get(ctx, s.latchTable, row, hbaserpc.Column{Family: famLatch, Qualifier: q})
				return err
			}),
		},
	}
	for _, bn := range benches {
		warmed := false
		b.Run(bn.name, func(b *testing.B) {
			if !warmed {
				warmed = true
				for _, w := range []javaclients.Block{bn.java, bn.dcsync, bn.raw} {
					if _, err := w(javaBenchWarmup); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			cmp, err := javaclients.Compare(javaBenchRounds, b.N, bn.java, bn.dcsync, bn.raw)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			cmp.Report(b)
		})
	}
}
