package hbase

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/internal/chaos"
	"github.com/dcsync/dcsync/internal/clusterprobe"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// Environment of the cluster tests: DCSYNC_CLUSTER=1 runs them, against the HBase that
// testenv/hbase/up-cluster started (one master, 2 region servers) and whose variables it
// printed.
const (
	envCluster    = "DCSYNC_CLUSTER"
	envClusterZK  = "DCSYNC_HBASE_CLUSTER_ZK"  // 127.0.0.1:23818
	envClusterCtl = "DCSYNC_HBASE_CLUSTER_CTL" // the launcher's control port, 127.0.0.1:18030
)

// hbCluster is the cluster of the test: a client, the tables of the test, and the
// launcher's control port.
type hbCluster struct {
	zk, ctl string
	client  *hbaserpc.Client
	cfg     Config
}

// clusterUnderTest returns the cluster of $DCSYNC_HBASE_CLUSTER_ZK with tables of the
// test's own (dropped when it ends), or skips the test unless DCSYNC_CLUSTER=1 (then a
// missing cluster fails it).
func clusterUnderTest(t *testing.T) *hbCluster {
	t.Helper()
	if os.Getenv(envCluster) != "1" {
		t.Skip("DCSYNC_CLUSTER=1 runs the cluster tests (on testenv/hbase/up-cluster)")
	}
	c := &hbCluster{zk: os.Getenv(envClusterZK), ctl: os.Getenv(envClusterCtl)}
	if c.zk == "" || c.ctl == "" {
		t.Fatalf("%s and %s must be set: start a cluster with testenv/hbase/up-cluster and export what it prints", envClusterZK, envClusterCtl)
	}
	if _, err := c.command(t, "wait"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	client, err := hbaserpc.Dial(ctx, hbaserpc.Config{ZKQuorum: c.zk, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c.client = client
	run := randHex(4)
	c.cfg = Config{LockTable: "dcsync_cluster_locks_" + run, LatchTableSuffix: "dcsync_cluster_" + run, QueueTable: "dcsync_cluster_queue_" + run}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for _, tb := range c.tables() {
			if err := client.DisableTable(ctx, tb); err != nil {
				t.Logf("cleanup: disable %s: %v", tb, err)
			}
			if err := client.DeleteTable(ctx, tb); err != nil {
				t.Logf("cleanup: delete %s: %v", tb, err)
			}
		}
		client.Close()
	})
	s := c.store(t)
	defer s.Close()
	for _, tb := range []*lazyTable{&s.locks, &s.latches} {
		if err := s.ready(ctx, "test", tb); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.qready(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	// The new tables' regions are open.
	if _, err := c.command(t, "wait"); err != nil {
		t.Fatal(err)
	}
	return c
}

// tables names the test's tables.
func (c *hbCluster) tables() []string {
	return []string{c.cfg.LockTable, "D_LTCH_" + c.cfg.LatchTableSuffix, c.cfg.QueueTable}
}

// store returns a store on the cluster's client and the test's tables.
func (c *hbCluster) store(t *testing.T) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := New(ctx, c.client, c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// command sends one command to the launcher's control port (LocalHBaseMulti.java) and
// returns its reply, an error unless it starts with "ok".
func (c *hbCluster) command(t *testing.T, cmd string) (string, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", c.ctl, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Minute))
	start := time.Now()
	if _, err := fmt.Fprintln(conn, cmd); err != nil {
		return "", err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("cluster-ctl %s: %w", cmd, err)
	}
	reply = strings.TrimSpace(reply)
	t.Logf("cluster-ctl %s (%v): %s", cmd, time.Since(start).Round(time.Millisecond), reply)
	if !strings.HasPrefix(reply, "ok") {
		return reply, fmt.Errorf("cluster-ctl %s: %s", cmd, reply)
	}
	return reply, nil
}

// rsEvent is one step of a plan: a control command, and how long to let the workload
// run after it.
type rsEvent struct {
	cmd   string
	after time.Duration
}

// regionPlan moves an eighth of the regions of the lock, latch and queue tables (32 of
// 257, 16 at a time: all at once overwhelms the one-JVM cluster on a small machine; a
// move of 64 took 1 to 3 minutes under load) to the other region server, then crashes
// region server 1 (abort: the master splits its WAL and reassigns its regions,
// hbase:meta's among them if it held it), starts it again and moves another eighth of
// each table, then stops region server 0 cleanly and starts it again.
func (c *hbCluster) regionPlan() []rsEvent {
	var plan []rsEvent
	for _, tb := range c.tables() {
		plan = append(plan, rsEvent{"move " + tb + " 32 0", 5 * time.Second})
	}
	plan = append(plan, rsEvent{"abort 1", 10 * time.Second}, rsEvent{"start 1", 2 * time.Second})
	for _, tb := range c.tables() {
		plan = append(plan, rsEvent{"move " + tb + " 32 64", 3 * time.Second})
	}
	return append(plan, rsEvent{"stop 0", 10 * time.Second}, rsEvent{"start 0", 8 * time.Second})
}

// runPlan runs plan's commands one after another after a quiet lead, marking each in
// the probe; a command that returns marks its end too. It returns the first error.
func (c *hbCluster) runPlan(ctx context.Context, t *testing.T, p *clusterprobe.Probe, lead time.Duration, plan []rsEvent) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(lead):
	}
	for _, e := range plan {
		p.Mark(e.cmd)
		if _, err := c.command(t, e.cmd); err != nil {
			return err
		}
		p.Mark(e.cmd + ": done")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.after):
		}
	}
	return nil
}

// TestClusterRegionMoves runs, on the 2-region-server HBase, the chaos checker's lock
// and latch workers and the probe while an eighth of the regions of the test's lock, latch
// and queue tables move to the other region server, region server 1 crashes (abort) and
// starts again, and region server 0 stops cleanly and starts again. It checks that
//   - the lock and latch histories are linearizable (no two holders, tokens increasing,
//     every acknowledged count-down applied once);
//   - every probe operation returned (none ran into clusterprobe.OpTimeout) and every error
//     carries an outage code (Connection, RetriesExhausted);
//
// and logs the probe's figures per phase (docs/clusters.md). The conformance suite then
// runs on the recovered cluster (TestClusterConformance).
func TestClusterRegionMoves(t *testing.T) {
	c := clusterUnderTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ps := c.store(t)
	defer ps.Close()
	probe := clusterprobe.New(ctxT(t, time.Minute), t, ps, "clusterprobe-"+randHex(4))

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		probe.Run(ctx)
	}()
	plan := c.regionPlan()
	lead := 8 * time.Second
	planErr := make(chan error, 1)
	go func() { planErr <- c.runPlan(ctx, t, probe, lead, plan) }()

	// The chaos run covers the plan: its pauses, and for each command up to 15 s.
	planned := lead
	for _, e := range plan {
		planned += e.after + 15*time.Second
	}
	s := c.store(t)
	defer s.Close()
	rep := chaos.RunT(t, chaos.Scenario{
		Open:      func(context.Context) (driver.Store, error) { return keepOpen{s}, nil },
		Goroutine: 4,
		Locks:     32,
		Duration:  planned,
		Level:     dcsync.XDC,
		Name:      "clusterchaos-" + randHex(4),
	})
	err := <-planErr
	cancel()
	wg.Wait()
	t.Logf("chaos: %d lock acquisitions, %d latch operations; %v", rep.Acquisitions, rep.LatchOps, rep.Lock)
	probe.Report(t)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.command(t, "wait"); err != nil {
		t.Fatal(err)
	}
}

// TestClusterConformance runs the conformance suite on the recovered cluster (both
// region servers live, nothing in transition), on the test's tables: `-run
// 'TestClusterConformance/(Lock|Latch|Queue)$'` runs the lock, latch and queue parts.
func TestClusterConformance(t *testing.T) {
	c := clusterUnderTest(t)
	drivertest.Run(t, drivertest.Harness{
		Open: func(t *testing.T) driver.Store { return c.store(t) },
		ProcessEnv: func(t *testing.T) []string {
			return []string{envZK + "=" + c.zk, envLockTable + "=" + c.cfg.LockTable,
				envLatchSuffix + "=" + c.cfg.LatchTableSuffix, envQueueTable + "=" + c.cfg.QueueTable}
		},
		Holes:            true,
		ReserveQueueSeqs: reserveQueueSeqs,
	})
}
