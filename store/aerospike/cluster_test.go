package aerospike_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/internal/chaos"
	"github.com/dcsync/dcsync/internal/clusterprobe"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/aerospike"
)

// Environment of the cluster tests: DCSYNC_CLUSTER=1 runs them, against the cluster that
// testenv/aerospike/up-cluster started and whose variables it printed.
const (
	envCluster       = "DCSYNC_CLUSTER"
	envClusterAddrs  = "DCSYNC_AEROSPIKE_CLUSTER"         // seeds: 127.0.0.1:37900,127.0.0.1:37910
	envClusterRunDir = "DCSYNC_AEROSPIKE_CLUSTER_RUN_DIR" // for testenv/aerospike/cluster-node
)

// asCluster is the cluster of the test: its nodes' addresses (node i+1 of
// testenv/aerospike/cluster-node is seeds[i]) and a client of all of them.
type asCluster struct {
	seeds  []string
	client *as.Client
}

// clusterUnderTest returns the cluster of $DCSYNC_AEROSPIKE_CLUSTER, or skips the test
// unless DCSYNC_CLUSTER=1 (then a missing cluster fails it). It waits until the cluster
// is whole (testenv/aerospike/cluster-node wait).
func clusterUnderTest(t *testing.T) *asCluster {
	t.Helper()
	if os.Getenv(envCluster) != "1" {
		t.Skip("DCSYNC_CLUSTER=1 runs the cluster tests (on testenv/aerospike/up-cluster)")
	}
	raw := os.Getenv(envClusterAddrs)
	if raw == "" {
		t.Fatalf("%s is not set: start a cluster with `DCSYNC_ASD=/path/to/asd testenv/aerospike/up-cluster` and export what it prints", envClusterAddrs)
	}
	c := &asCluster{seeds: strings.Split(raw, ",")}
	if len(c.seeds) < 2 {
		t.Fatalf("%s=%s names one node: the cluster tests need 2", envClusterAddrs, raw)
	}
	if err := nodeCommand(t, "wait"); err != nil {
		t.Fatal(err)
	}
	var hosts []*as.Host
	for _, s := range c.seeds {
		h, port := splitAddr(t, s)
		hosts = append(hosts, as.NewHost(h, port))
	}
	client, err := as.NewClientWithPolicyAndHost(as.NewClientPolicy(), hosts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	c.client = client
	for deadline := time.Now().Add(30 * time.Second); len(client.GetNodes()) < len(c.seeds); {
		if time.Now().After(deadline) {
			t.Fatalf("the client sees %d nodes, not %d", len(client.GetNodes()), len(c.seeds))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

// nodeCommand runs testenv/aerospike/cluster-node with args.
func nodeCommand(t *testing.T, args ...string) error {
	t.Helper()
	dir, err := filepath.Abs("../../testenv/aerospike")
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(dir, "cluster-node"), args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("testenv/aerospike/cluster-node %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("cluster-node %s (%v): %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), strings.TrimSpace(out.String()))
	return nil
}

// nodeEvent is one step of a node-loss plan: the cluster-node command and how long to
// let the workload run after it.
type nodeEvent struct {
	args  []string
	after time.Duration
}

// nodeLossPlan takes node 2 down with SIGKILL (its in-memory data is gone) and starts it
// again (it rejoins empty and the partitions migrate back), then does the same with a
// clean stop of node 1, the first seed.
var nodeLossPlan = []nodeEvent{
	{[]string{"kill", "2"}, 8 * time.Second},
	{[]string{"start", "2"}, 8 * time.Second},
	{[]string{"stop", "1"}, 8 * time.Second},
	{[]string{"start", "1"}, 8 * time.Second},
}

// runPlan runs the events of plan one after another, marking each in the probe, after a
// quiet start of lead. It returns the first error.
func runPlan(ctx context.Context, t *testing.T, p *clusterprobe.Probe, lead time.Duration, plan []nodeEvent) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(lead):
	}
	for _, e := range plan {
		p.Mark(strings.Join(e.args, " "))
		if err := nodeCommand(t, e.args...); err != nil {
			return err
		}
		if e.args[0] == "start" {
			p.Mark(strings.Join(e.args, " ") + ": rejoined, migrations over")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.after):
		}
	}
	return nil
}

// clusterStore is a store on the cluster's client with the given tries per operation.
func clusterStore(t *testing.T, c *asCluster, attempts int) *aerospike.Store {
	return newStore(t, c.client, aerospike.Config{Namespace: "test", Attempts: attempts})
}

// TestClusterNodeLoss runs, on the 2-node cluster (replication-factor 2), the chaos
// checker's lock and latch workers and the probe while node 2 is killed with SIGKILL and
// started again, then node 1 is stopped and started again, each time rejoining empty
// (namespace in memory) and filled again by migrations. It checks that
//   - the lock and latch histories are linearizable (no two holders, tokens increasing,
//     every acknowledged count-down applied once): with replication-factor 2 and the
//     client's default commit level (all replicas), an acknowledged write is on both
//     nodes, so one node's loss loses none;
//   - every probe operation returned (none ran into clusterprobe.OpTimeout) and every error
//     carries an outage code (Connection, RetriesExhausted);
//
// and logs the probe's figures per phase (docs/clusters.md). The conformance suite then
// runs on the recovered cluster (TestClusterConformance).
func TestClusterNodeLoss(t *testing.T) {
	c := clusterUnderTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	probe := clusterprobe.New(ctxT(t), t, clusterStore(t, c, 5), unique("clusterprobe"))

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		probe.Run(ctx)
	}()
	planErr := make(chan error, 1)
	lead := 8 * time.Second
	go func() { planErr <- runPlan(ctx, t, probe, lead, nodeLossPlan) }()

	// The chaos run covers the plan: its pauses, and for each command up to 30 s (a
	// start waits for the node's port, then for the migrations).
	planned := lead
	for _, e := range nodeLossPlan {
		planned += e.after + 30*time.Second
	}
	s := clusterStore(t, c, 8)
	rep := chaos.RunT(t, chaos.Scenario{
		Open:      func(context.Context) (driver.Store, error) { return s, nil },
		Goroutine: 4,
		Locks:     32,
		Duration:  planned,
		Level:     dcsync.XDC,
		Name:      unique("clusterchaos"),
	})
	err := <-planErr
	cancel()
	wg.Wait()
	t.Logf("chaos: %d lock acquisitions, %d latch operations; %v", rep.Acquisitions, rep.LatchOps, rep.Lock)
	probe.Report(t)
	if err != nil {
		t.Fatal(err)
	}
	if err := nodeCommand(t, "wait"); err != nil {
		t.Fatal(err)
	}
}

// TestClusterConformance runs the conformance suite on the cluster once it is whole (a
// node that left has rejoined and migrations are over): `-run
// 'TestClusterConformance/(Lock|Latch|Queue)$'` runs the lock, latch and queue parts.
func TestClusterConformance(t *testing.T) {
	c := clusterUnderTest(t)
	seed := c.seeds[0]
	drivertest.Run(t, drivertest.Harness{
		Open: func(t *testing.T) driver.Store {
			s, err := aerospike.OpenURL(context.Background(), storeURL(seed, "test"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		ProcessEnv: func(t *testing.T) []string {
			return []string{envChildAddr + "=" + seed, envChildNS + "=test"}
		},
		Holes:            true,
		ReserveQueueSeqs: reserveQueueSeqs,
	})
}

// TestClusterBothNodesLostBreaksLocks shows what docs/clusters.md says of AP mode when
// both copies of the records are lost (both nodes killed with SIGKILL, namespace in
// memory): lock workers recorded as in the chaos runs, with 10 s leases, find after the
// restart no lock records and no fence counters, so a new acquirer gets a lock whose
// holder's lease is still running, with a token from a counter started again at 1. The
// lock checker must find the history not linearizable; the test fails if it does not.
// It runs only with DCSYNC_CLUSTER_LOSS_TEST=1 (it empties the cluster's namespace).
func TestClusterBothNodesLostBreaksLocks(t *testing.T) {
	if os.Getenv("DCSYNC_CLUSTER_LOSS_TEST") != "1" {
		t.Skip("DCSYNC_CLUSTER_LOSS_TEST=1 runs it (it kills both nodes: the namespace is emptied)")
	}
	c := clusterUnderTest(t)
	s := clusterStore(t, c, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log chaos.Log
	name := unique("bothlost")
	names := make([]string, 8)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", name, i)
	}
	var wg sync.WaitGroup
	for i := 1; i <= 12; i++ {
		m, err := lock.New(s, "cluster", "dc1")
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			chaos.LockWorker{Client: i, Locks: m, Names: names, TTL: 10 * time.Second, Slice: 100 * time.Millisecond,
				Retry: 300 * time.Millisecond, Out: log.Add}.Run(ctx)
		}()
	}
	time.Sleep(8 * time.Second)
	for _, args := range [][]string{{"kill", "1"}, {"kill", "2"}, {"start", "1"}, {"start", "2"}} {
		if err := nodeCommand(t, args...); err != nil {
			cancel()
			wg.Wait()
			t.Fatal(err)
		}
	}
	time.Sleep(15 * time.Second)
	cancel()
	wg.Wait()
	res := chaos.CheckLock(log.Records(), time.Minute)
	t.Logf("lock history after losing both nodes: %v", res)
	if res.Failed < 0 {
		t.Fatal("the lock history stayed linearizable although both copies of every record were lost")
	}
}
