package exporter_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/exporter"
	"github.com/dcsync/dcsync/queue"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/telemetry"
)

// exportedNames returns every metric family name a Prometheus scrape can show of
// dcsync: the library's instruments (every one recorded once, through OpenTelemetry's
// Prometheus exporter, as an application exports them) and dcsync exporter's store
// metrics (a scrape of a store with a queue, a lock and a latch), with their series
// suffixes (_bucket, _sum, _count of histograms).
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(ctx)
	in := telemetry.For(mp, nil)
	s := telemetry.Scope{In: in, Store: "memory"}
	now := time.Now()
	s.StoreCall(ctx, "acquire_lock", now, errors.New("x"))
	s.Acquired(ctx, "lock.acquire", dcsync.DC, now, nil)
	s.LeaseLost(ctx, dcsync.DC)
	s.Renewed(ctx, dcsync.DC, now, nil)
	s.WatcherRead(ctx)
	s.WatcherBatch(ctx, 1)
	s.Woken(ctx, dcsync.DC, telemetry.SourceRead, now)
	q := telemetry.QueueScope{In: in, Store: "memory", Queue: "q", Group: "g"}
	q.Enqueued(ctx, 1)
	q.Received(ctx, 2, now)
	q.Acked(ctx, now)
	q.Nacked(ctx, 1)
	q.DeadLettered(ctx, 1)
	q.ZombieAcks(ctx, 1)
	q.Owned(ctx, 1)
	q.Rebalanced(ctx)

	st := memory.New()
	if _, err := queue.Create(ctx, st, queue.Spec{Name: "orders", Partitions: 1, Groups: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLock(ctx, dcsync.Key{Level: dcsync.DC, Client: "app", Farm: "dc1", Name: "l"}, "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateLatch(ctx, dcsync.Key{Level: dcsync.DC, Client: "app", Farm: "dc1", Name: "n"}, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(exporter.New(exporter.Config{Store: st, Clients: []string{"app"}}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		if mf.GetType().String() == "HISTOGRAM" {
			for _, sfx := range []string{"_bucket", "_sum", "_count"} {
				names[n+sfx] = true
			}
		}
	}
	return names
}

// dashboardQueries returns every Prometheus expression of the Grafana dashboard.
func dashboardQueries(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}

// metricRE finds the metric names in a PromQL expression once label matchers and
// grouping clauses are cut out (labels such as dcsync_queue look like names): dcsync's
// names (every metric dcsync exports starts with dcsync_).
var (
	metricRE   = regexp.MustCompile(`\bdcsync_[a-z0-9_]+\b`)
	matchersRE = regexp.MustCompile(`\{[^}]*\}`)
	groupingRE = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
)

func metricNames(expr string) []string {
	return metricRE.FindAllString(groupingRE.ReplaceAllString(matchersRE.ReplaceAllString(expr, ""), ""), -1)
}

// Every query of the Grafana dashboard names only metrics the exporter or the library
// really exports (so no panel stays empty because of a typo or a renamed metric), and
// the dashboard covers what operators watch: lag, throughput, redeliveries, dead
// letters, lock holds.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	names := exportedNames(t)
	exprs := dashboardQueries(t, "../../dashboards/dcsync.json")
	used := map[string]bool{}
	for _, e := range exprs {
		found := metricNames(e)
		if len(found) == 0 {
			t.Errorf("query %q names no dcsync metric", e)
		}
		for _, n := range found {
			used[n] = true
			if !names[n] {
				t.Errorf("query %q names %s, which nothing exports", e, n)
			}
		}
	}
	for _, want := range []string{"dcsync_queue_group_lag", "dcsync_queue_dead_letters", "dcsync_queue_acked_total",
		"dcsync_queue_enqueued_total", "dcsync_queue_redelivered_total", "dcsync_lock_expires_in_seconds"} {
		if !used[want] {
			t.Errorf("the dashboard has no panel on %s", want)
		}
	}
	if t.Failed() {
		var all []string
		for n := range names {
			all = append(all, n)
		}
		sort.Strings(all)
		t.Logf("exported: %s", strings.Join(slices.Compact(all), " "))
	}
}
