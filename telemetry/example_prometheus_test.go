package telemetry_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
)

// Export dcsync's metrics to Prometheus: install a MeterProvider whose reader is the
// Prometheus exporter, use locks and latches, and serve the registry (here read once
// through promhttp; a real program mounts promhttp.HandlerFor on its /metrics).
func Example_prometheus() {
	ctx := context.Background()

	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(ctx)
	otel.SetMeterProvider(mp) // or lock.WithMeterProvider(mp) / latch.WithMeterProvider(mp)

	store := memory.New()
	locks, err := lock.New(store, "billing", "dc1")
	if err != nil {
		log.Fatal(err)
	}
	l, err := locks.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}

	latches, err := latch.New(store, "billing", "dc1")
	if err != nil {
		log.Fatal(err)
	}
	c, err := latches.CreateCountDown(ctx, "batch-42", 1)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.CountDown(ctx); err != nil {
		log.Fatal(err)
	}
	if err := c.Wait(ctx); err != nil { // the watcher's first read sees 0
		log.Fatal(err)
	}

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range bytes.Split(rec.Body.Bytes(), []byte("\n")) {
		s := string(line)
		if strings.HasPrefix(s, "dcsync_lock_acquisitions_total") ||
			strings.HasPrefix(s, "dcsync_store_operation_duration_seconds_count") ||
			strings.HasPrefix(s, "dcsync_latch_watcher_reads_total") ||
			strings.HasPrefix(s, "dcsync_latch_wakeup_delay_seconds_count") ||
			strings.HasPrefix(s, "# TYPE dcsync_lock_acquire_duration_seconds") {
			fmt.Println(s)
		}
	}
	// Output:
	// dcsync_latch_wakeup_delay_seconds_count{dcsync_level="DC",dcsync_store="memory",dcsync_wakeup_source="read"} 1
	// dcsync_latch_watcher_reads_total{dcsync_store="memory"} 1
	// # TYPE dcsync_lock_acquire_duration_seconds histogram
	// dcsync_lock_acquisitions_total{dcsync_level="DC",dcsync_operation="lock.acquire",dcsync_outcome="acquired",dcsync_store="memory"} 1
	// dcsync_store_operation_duration_seconds_count{dcsync_operation="acquire_lock",dcsync_outcome="ok",dcsync_store="memory"} 1
	// dcsync_store_operation_duration_seconds_count{dcsync_operation="add_latch",dcsync_outcome="ok",dcsync_store="memory"} 1
	// dcsync_store_operation_duration_seconds_count{dcsync_operation="create_latch",dcsync_outcome="ok",dcsync_store="memory"} 1
	// dcsync_store_operation_duration_seconds_count{dcsync_operation="read_latches",dcsync_outcome="ok",dcsync_store="memory"} 1
	// dcsync_store_operation_duration_seconds_count{dcsync_operation="release_lock",dcsync_outcome="ok",dcsync_store="memory"} 1
}
