// Package telemetry holds the OpenTelemetry instruments, span names and attribute keys
// that the lock and latch packages record, and the slog keys they log with.
//
// dcsync uses only OpenTelemetry's API (go.opentelemetry.io/otel): no exporter is
// forced on an application. By default a Manager takes the global providers,
// otel.GetMeterProvider and otel.GetTracerProvider, which record nothing until the
// application installs an SDK with otel.SetMeterProvider and otel.SetTracerProvider. A
// Manager takes the global providers when it is made; the first providers installed
// also receive what Managers made before them record (OpenTelemetry's global
// delegation), later ones only what Managers made after them record. lock.WithMeterProvider,
// lock.WithTracerProvider, latch.WithMeterProvider and latch.WithTracerProvider choose
// other providers for one Manager. The package example exports the metrics in the
// Prometheus text format.
//
// With no provider installed, the instrumentation allocates nothing: metrics are
// skipped through the instruments' Enabled, and no span is started while the global
// tracer provider is still the default one.
//
// # Metrics
//
// Durations are in seconds (unit "s"), counts use curly-brace annotations, as the
// OpenTelemetry semantic conventions ask. The instrumentation scope is ScopeName.
//
//	dcsync.lock.acquisitions        counter    {acquisition}  store, level, operation, outcome, error.code
//	dcsync.lock.acquire.duration    histogram  s              store, level, operation, outcome
//	dcsync.lock.lease.losses        counter    {loss}         store, level
//	dcsync.lock.renewal.duration    histogram  s              store, level, outcome, error.code
//	dcsync.store.operation.duration histogram  s              store, operation, outcome
//	dcsync.store.operation.errors   counter    {error}        store, operation, error.code
//	dcsync.latch.watcher.batch.size histogram  {latch}        store
//	dcsync.latch.watcher.reads      counter    {read}         store
//	dcsync.latch.wakeup.delay       histogram  s              store, level, wakeup.source
//
// dcsync.lock.acquisitions counts every Acquire and TryAcquire by its outcome:
// "acquired", "unavailable" (the lock was held until the wait or ctx ended) or "error"
// (with dcsync.error.code). dcsync.lock.acquire.duration is the time an Acquire or
// TryAcquire took, waits included. dcsync.lock.lease.losses counts leases declared lost
// (KeepAlive's deadline passed, or the store answered LockLost). Renewals are the
// Refresh calls, KeepAlive's included. The store metrics time every call the lock and
// latch packages make to a store; their dcsync.operation is the store method in
// snake case: "acquire_lock", "refresh_lock", "refresh_locks" (KeepAlive's batched
// renewals, on a store with driver.LockBatcher), "release_lock", "inspect_lock",
// "create_latch", "ensure_latch", "add_latch", "read_latches". The watcher's batch size
// is the number of latches one pass reads in one call, its reads are its ReadLatches
// calls (so rate(dcsync_latch_watcher_reads_total) is reads per second), and the wake-up
// delay is the time from the observation that saw a count at or below zero (a
// watcher read returning, "read", or a local CountDown/CountUp returning, "update") to
// the Wait returning. A store call the store answered with "held by another"
// (LockUnavailable), "not found" or "already exists" has outcome "refused" and is not
// counted in dcsync.store.operation.errors: contention and absence are answers, and
// that counter is for alerting on a store that fails (connection, internal, retries
// exhausted, ...).
//
// Lock keys, owners and tokens are never metric attributes (their number is
// unbounded); they are span attributes and log fields.
//
// # Attributes
//
//	dcsync.store       the store's kind: "memory", "sqlite", "hbase", "aerospike" (see StoreName)
//	dcsync.level       "DC" or "XDC"
//	dcsync.operation   what was done: "lock.acquire", "lock.try_acquire", "lock.release",
//	                   "lock.refresh", "latch.create", "latch.count_down", "latch.count_up",
//	                   "latch.wait", "latch.get_or_create", or a store method (above)
//	dcsync.outcome     "ok", "refused" (store calls only: see above), "error", or for
//	                   acquisitions "acquired", "unavailable", "error"
//	dcsync.error.code  the dcsync error code in snake case: "lock_unavailable", "connection", ...
//	dcsync.key         the lock or latch key (spans only)
//	dcsync.lock.token  the fencing token (spans only)
//	dcsync.latch.count the count after an update (spans only)
//	dcsync.wakeup.source "read" or "update" (wake-up delay only)
//
// # Traces
//
// One span per lock.Manager.Acquire ("dcsync.lock.acquire"), TryAcquire
// ("dcsync.lock.try_acquire"), Lock.Release and Manager.Release ("dcsync.lock.release"),
// Lock.Refresh ("dcsync.lock.refresh"), and per latch create ("dcsync.latch.create"),
// CountDown ("dcsync.latch.count_down"), CountUp ("dcsync.latch.count_up") and Wait
// ("dcsync.latch.wait"), with the attributes above. A failed call sets the span status
// to Error, records the error as an event and sets dcsync.error.code.
//
// # Logs
//
// The lock and latch packages log with log/slog under these keys (LogStore, LogOperation
// and so on), the metric attributes without their "dcsync." prefix where they overlap:
//
//	store      the store's kind, as dcsync.store
//	operation  as dcsync.operation
//	key        the lock or latch key (dcsync.Key.String)
//	owner      a lock's owner id
//	token      a lock's fencing token
//	latches    how many latches a watcher pass read
//	interval   a watcher's poll interval
//	err        the error
package telemetry

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/dcsync/dcsync"
)

// ScopeName is the instrumentation scope of every meter and tracer dcsync uses.
const ScopeName = "github.com/dcsync/dcsync"

// Attribute keys of metrics and spans.
const (
	AttrStore        = "dcsync.store"
	AttrLevel        = "dcsync.level"
	AttrOperation    = "dcsync.operation"
	AttrOutcome      = "dcsync.outcome"
	AttrErrorCode    = "dcsync.error.code"
	AttrKey          = "dcsync.key"
	AttrToken        = "dcsync.lock.token"
	AttrCount        = "dcsync.latch.count"
	AttrWakeupSource = "dcsync.wakeup.source"
)

// slog keys (see Logs in the package doc).
const (
	LogStore     = "store"
	LogOperation = "operation"
	LogKey       = "key"
	LogOwner     = "owner"
	LogToken     = "token"
	LogLatches   = "latches"
	LogInterval  = "interval"
	LogErr       = "err"
)

// Metric names.
const (
	MetricLockAcquisitions = "dcsync.lock.acquisitions"
	MetricLockAcquireTime  = "dcsync.lock.acquire.duration"
	MetricLockLeaseLosses  = "dcsync.lock.lease.losses"
	MetricLockRenewalTime  = "dcsync.lock.renewal.duration"
	MetricStoreDuration    = "dcsync.store.operation.duration"
	MetricStoreErrors      = "dcsync.store.operation.errors"
	MetricWatcherBatchSize = "dcsync.latch.watcher.batch.size"
	MetricWatcherReads     = "dcsync.latch.watcher.reads"
	MetricLatchWakeupDelay = "dcsync.latch.wakeup.delay"
)

// Values of dcsync.outcome and dcsync.wakeup.source.
const (
	OutcomeOK          = "ok"
	OutcomeError       = "error"
	OutcomeAcquired    = "acquired"
	OutcomeUnavailable = "unavailable"
	OutcomeRefused     = "refused" // a store call answered "held", "not found" or "exists"
	SourceRead         = "read"
	SourceUpdate       = "update"
)

// StoreNamer may be implemented by a store to name its kind in telemetry (the
// dcsync.store attribute and the "store" log key). Without it the name is derived from
// the store's Go type: the last element of its package path ("memory" for
// *memory.Store, "sqlite" for *sqlite.Store), or the type's name when the package is
// main or the type is unnamed.
type StoreNamer interface {
	StoreName() string
}

// StoreName returns the kind of store s, as recorded in the dcsync.store attribute.
func StoreName(s any) string {
	if n, ok := s.(StoreNamer); ok {
		return n.StoreName()
	}
	t := reflect.TypeOf(s)
	if t == nil {
		return "unknown"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	if i := strings.LastIndexByte(pkg, '/'); i >= 0 {
		pkg = pkg[i+1:]
	}
	if pkg == "" || pkg == "main" {
		if t.Name() != "" {
			return strings.ToLower(t.Name())
		}
		return "unknown"
	}
	return pkg
}

// CodeName returns err's dcsync error code in snake case ("lock_unavailable"), or ""
// for nil.
func CodeName(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(dcsync.CodeOf(err).String(), " ", "_")
}

// Instruments are the meters and tracer of one pair of providers. They are safe for
// concurrent use; get them with For.
type Instruments struct {
	tracer trace.Tracer
	// globalTP is the global tracer provider as it was when these instruments were
	// made, if they use it: while otel.GetTracerProvider still returns it, no provider
	// is installed and Start makes no span at all (the global no-op span costs
	// allocations).
	globalTP trace.TracerProvider

	acquisitions metric.Int64Counter
	acquireTime  metric.Float64Histogram
	leaseLosses  metric.Int64Counter
	renewalTime  metric.Float64Histogram
	storeTime    metric.Float64Histogram
	storeErrors  metric.Int64Counter
	batchSize    metric.Int64Histogram
	reads        metric.Int64Counter
	wakeupDelay  metric.Float64Histogram

	queue queueInstruments

	sets sync.Map // attrs -> metric.MeasurementOption
}

type providers struct {
	mp metric.MeterProvider
	tp trace.TracerProvider
}

var cache sync.Map // providers -> *Instruments

// For returns the Instruments of mp and tp, made once per pair of comparable providers.
// A nil provider stands for the global one (otel.GetMeterProvider,
// otel.GetTracerProvider), which delegates to whatever the application installs later.
func For(mp metric.MeterProvider, tp trace.TracerProvider) *Instruments {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	global := tp == nil
	if global {
		tp = otel.GetTracerProvider()
	}
	p := providers{mp, tp}
	key := reflect.TypeOf(mp).Comparable() && reflect.TypeOf(tp).Comparable()
	if key {
		if in, ok := cache.Load(p); ok {
			return in.(*Instruments)
		}
	}
	in := newInstruments(mp, tp)
	if global && isDelegate(tp) {
		in.globalTP = tp
	}
	if key {
		got, _ := cache.LoadOrStore(p, in)
		return got.(*Instruments)
	}
	return in
}

// isDelegate reports whether tp is OpenTelemetry's default global tracer provider, the
// one otel.GetTracerProvider returns before any is installed (it forwards to the first
// provider installed later).
func isDelegate(tp trace.TracerProvider) bool {
	t := reflect.TypeOf(tp)
	return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global"
}

var secondsBuckets = metric.WithExplicitBucketBoundaries(
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

func newInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *Instruments {
	m := mp.Meter(ScopeName)
	in := &Instruments{tracer: tp.Tracer(ScopeName)}
	// Instrument creation errors (invalid names) cannot happen with these constant
	// names; the API returns a working no-op instrument with them anyway.
	in.acquisitions, _ = m.Int64Counter(MetricLockAcquisitions, metric.WithUnit("{acquisition}"),
		metric.WithDescription("Lock acquisitions (Acquire and TryAcquire) by outcome."))
	in.acquireTime, _ = m.Float64Histogram(MetricLockAcquireTime, metric.WithUnit("s"), secondsBuckets,
		metric.WithDescription("Time an Acquire or TryAcquire took, waiting included."))
	in.leaseLosses, _ = m.Int64Counter(MetricLockLeaseLosses, metric.WithUnit("{loss}"),
		metric.WithDescription("Leases declared lost by their holder."))
	in.renewalTime, _ = m.Float64Histogram(MetricLockRenewalTime, metric.WithUnit("s"), secondsBuckets,
		metric.WithDescription("Latency of lease renewals (Refresh, KeepAlive's included)."))
	in.storeTime, _ = m.Float64Histogram(MetricStoreDuration, metric.WithUnit("s"), secondsBuckets,
		metric.WithDescription("Latency of store calls by store and operation."))
	in.storeErrors, _ = m.Int64Counter(MetricStoreErrors, metric.WithUnit("{error}"),
		metric.WithDescription("Failed store calls by store, operation and error code; a store's answers (a lock held by another, not found, already exists) are not failures."))
	in.batchSize, _ = m.Int64Histogram(MetricWatcherBatchSize, metric.WithUnit("{latch}"),
		metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
		metric.WithDescription("Latches read by one pass of a latch watcher."))
	in.reads, _ = m.Int64Counter(MetricWatcherReads, metric.WithUnit("{read}"),
		metric.WithDescription("ReadLatches calls made by latch watchers."))
	in.wakeupDelay, _ = m.Float64Histogram(MetricLatchWakeupDelay, metric.WithUnit("s"), secondsBuckets,
		metric.WithDescription("Time from the observation of a count at or below zero to the Wait returning."))
	in.queue = newQueueInstruments(m)
	return in
}

// attrs is one combination of metric attributes; empty fields are left out.
type attrs struct {
	store, level, operation, outcome, code, source string
	queue, group                                   string
}

// set returns the measurement option of a, built once per combination: recording a
// measurement then allocates nothing for its attributes.
func (in *Instruments) set(a attrs) metric.MeasurementOption {
	if o, ok := in.sets.Load(a); ok {
		return o.(metric.MeasurementOption)
	}
	kv := make([]attribute.KeyValue, 0, 6)
	add := func(k, v string) {
		if v != "" {
			kv = append(kv, attribute.String(k, v))
		}
	}
	add(AttrStore, a.store)
	add(AttrLevel, a.level)
	add(AttrOperation, a.operation)
	add(AttrOutcome, a.outcome)
	add(AttrErrorCode, a.code)
	add(AttrWakeupSource, a.source)
	add(AttrQueue, a.queue)
	add(AttrGroup, a.group)
	o, _ := in.sets.LoadOrStore(a, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return o.(metric.MeasurementOption)
}

func outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case answer(err):
		return OutcomeRefused
	}
	return OutcomeError
}

// answer tells a store call's error that is the store's answer, not its failure: a
// lock held by another (LockUnavailable: normal contention), a key that does not exist
// (NotFound: a free lock inspected, a latch ended) or already does (AlreadyExists).
// They are not counted under dcsync.store.operation.errors, whose alerts are for a
// store that fails.
func answer(err error) bool {
	switch dcsync.CodeOf(err) {
	case dcsync.LockUnavailable, dcsync.NotFound, dcsync.AlreadyExists:
		return true
	}
	return false
}

// Scope is what a Manager records its telemetry under: its instruments, its store's
// kind and its logger's attribute values.
type Scope struct {
	In    *Instruments
	Store string
}

// NewScope returns the Scope of a Manager on store with the given providers (nil: the
// global ones).
func NewScope(store any, mp metric.MeterProvider, tp trace.TracerProvider) Scope {
	return Scope{In: For(mp, tp), Store: StoreName(store)}
}

// StoreCall records one store call of operation op that started at start and returned
// err.
func (s Scope) StoreCall(ctx context.Context, op string, start time.Time, err error) {
	if s.In.storeTime.Enabled(ctx) {
		s.In.storeTime.Record(ctx, time.Since(start).Seconds(), s.In.set(attrs{store: s.Store, operation: op, outcome: outcome(err)}))
	}
	if err != nil && !answer(err) && s.In.storeErrors.Enabled(ctx) {
		s.In.storeErrors.Add(ctx, 1, s.In.set(attrs{store: s.Store, operation: op, code: CodeName(err)}))
	}
}

// Acquired records the end of an Acquire (op "lock.acquire") or TryAcquire
// ("lock.try_acquire") that started at start and returned err.
func (s Scope) Acquired(ctx context.Context, op string, level dcsync.Level, start time.Time, err error) {
	oc, code := OutcomeAcquired, ""
	switch {
	case err == nil:
	case dcsync.CodeOf(err) == dcsync.LockUnavailable:
		oc = OutcomeUnavailable
	default:
		oc, code = OutcomeError, CodeName(err)
	}
	lv := level.String()
	if s.In.acquisitions.Enabled(ctx) {
		s.In.acquisitions.Add(ctx, 1, s.In.set(attrs{store: s.Store, level: lv, operation: op, outcome: oc, code: code}))
	}
	if s.In.acquireTime.Enabled(ctx) {
		s.In.acquireTime.Record(ctx, time.Since(start).Seconds(), s.In.set(attrs{store: s.Store, level: lv, operation: op, outcome: oc}))
	}
}

// LeaseLost records a lease declared lost.
func (s Scope) LeaseLost(ctx context.Context, level dcsync.Level) {
	if s.In.leaseLosses.Enabled(ctx) {
		s.In.leaseLosses.Add(ctx, 1, s.In.set(attrs{store: s.Store, level: level.String()}))
	}
}

// Renewed records a renewal (Refresh) that started at start and returned err.
func (s Scope) Renewed(ctx context.Context, level dcsync.Level, start time.Time, err error) {
	if s.In.renewalTime.Enabled(ctx) {
		s.In.renewalTime.Record(ctx, time.Since(start).Seconds(),
			s.In.set(attrs{store: s.Store, level: level.String(), outcome: outcome(err), code: CodeName(err)}))
	}
}

// WatcherRead records one ReadLatches call of a latch watcher.
func (s Scope) WatcherRead(ctx context.Context) {
	if s.In.reads.Enabled(ctx) {
		s.In.reads.Add(ctx, 1, s.In.set(attrs{store: s.Store}))
	}
}

// WatcherBatch records the number of latches one watcher pass read.
func (s Scope) WatcherBatch(ctx context.Context, n int) {
	if s.In.batchSize.Enabled(ctx) {
		s.In.batchSize.Record(ctx, int64(n), s.In.set(attrs{store: s.Store}))
	}
}

// Woken records the delay from the observation at observed (by source SourceRead or
// SourceUpdate) to a Wait returning.
func (s Scope) Woken(ctx context.Context, level dcsync.Level, source string, observed time.Time) {
	if s.In.wakeupDelay.Enabled(ctx) {
		s.In.wakeupDelay.Record(ctx, time.Since(observed).Seconds(),
			s.In.set(attrs{store: s.Store, level: level.String(), source: source}))
	}
}

// Start starts the span of operation op ("lock.acquire" becomes span
// "dcsync.lock.acquire") on key k. Attributes are set only when the span records.
func (s Scope) Start(ctx context.Context, op string, k dcsync.Key) (context.Context, trace.Span) {
	name := spanNames[op]
	if name == "" {
		name = "dcsync." + op
	}
	if s.In.globalTP != nil && otel.GetTracerProvider() == s.In.globalTP {
		return ctx, noSpan
	}
	ctx, span := s.In.tracer.Start(ctx, name) // kind Internal
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String(AttrStore, s.Store),
			attribute.String(AttrLevel, k.Level.String()),
			attribute.String(AttrOperation, op),
			attribute.String(AttrKey, k.String()),
		)
	}
	return ctx, span
}

var (
	spanNames            = map[string]string{}
	noSpan    trace.Span = noop.Span{}
)

func init() {
	for _, op := range []string{"lock.acquire", "lock.try_acquire", "lock.release", "lock.refresh",
		"latch.create", "latch.get_or_create", "latch.count_down", "latch.count_up", "latch.wait"} {
		spanNames[op] = "dcsync." + op
	}
}

// End ends span: on err it sets the status to Error with the error's message, records
// the error and sets dcsync.error.code and dcsync.outcome.
func End(span trace.Span, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String(AttrOutcome, outcome(err)))
		if err != nil {
			span.SetAttributes(attribute.String(AttrErrorCode, CodeName(err)))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
