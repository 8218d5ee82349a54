package telemetry_test

import (
	"context"
	"path/filepath"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/store/memory"
	"github.com/dcsync/dcsync/store/sqlite"
)

// BenchmarkInstrumentation measures a lock TryAcquire+Release pair (on the memory store,
// the cheapest, where the overhead shows most, and on SQLite) and a latch CountUp on
// the memory store, with no provider
// installed (the global no-op providers) and with the SDK recording every metric and
// span.
func BenchmarkInstrumentation(b *testing.B) {
	ctx := context.Background()
	sdk := func(b *testing.B) ([]lock.Option, []latch.Option) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		b.Cleanup(func() { _ = mp.Shutdown(ctx); _ = tp.Shutdown(ctx) })
		return []lock.Option{lock.WithMeterProvider(mp), lock.WithTracerProvider(tp)},
			[]latch.Option{latch.WithMeterProvider(mp), latch.WithTracerProvider(tp)}
	}
	for _, c := range []struct {
		name string
		opts func(*testing.B) ([]lock.Option, []latch.Option)
	}{
		{"noprovider", func(*testing.B) ([]lock.Option, []latch.Option) { return nil, nil }},
		{"sdk", sdk},
	} {
		b.Run("lock/"+c.name, func(b *testing.B) {
			lo, _ := c.opts(b)
			m, err := lock.New(memory.New(), "client", "farm", lo...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				l, err := m.TryAcquire(ctx, "job")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("lock-sqlite/"+c.name, func(b *testing.B) {
			lo, _ := c.opts(b)
			st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			m, err := lock.New(st, "client", "farm", lo...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				l, err := m.TryAcquire(ctx, "job")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("latch/"+c.name, func(b *testing.B) {
			_, co := c.opts(b)
			m, err := latch.New(memory.New(), "client", "farm", co...)
			if err != nil {
				b.Fatal(err)
			}
			l, err := m.CreateCountUpDown(ctx, "l", 0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.CountUp(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
