// Package queue is a partitioned, exactly-once-ackable event queue on dcsync's stores
// (SQLite, HBase, Aerospike, memory), with consumer groups whose members share the
// partitions through dcsync locks.
//
// # Model
//
// A queue has P partitions, fixed at creation. Producers append events; an event with a
// partition key goes to partition fnv1a32(key) mod P, so events of one key keep their
// order; the keyless events of one Enqueue call go together to one partition, chosen
// round robin per call. Every consumer group reads every partition with its own offsets:
// each event reaches exactly one consumer of each group.
//
// A consumer joins its group by taking a member slot (a lock); every poll interval it
// reads the live slots in one batched call and owns the partitions the assignment gives
// its slot (rendezvous hashing with capacities: P/members or P/members+1 partitions
// each, and a member joining or leaving moves about its share), each through a lock
// whose fencing token it installs in the partition's offset record (compare-and-set).
// A member that joins is handed its partitions within about one poll interval plus the
// in-flight deliveries of their owners: an owner drains a partition no longer its own
// (hands out nothing new, waits for its in-flight messages) before it releases it. A
// dead consumer's partitions move once its locks lapse (about a lease). A zombie
// (paused past its lease) cannot ack: the offset record holds its successor's token
// and refuses its write.
//
// # Delivery
//
// Receive hands messages to the application at least once; an ack is recorded at most
// once per (group, partition, seq). Ack returns nil once the ack is in the partition's
// offset record (one conditional write per partition batch: the offset moves over the
// acked prefix, acks above it are recorded as marks); a message whose Ack returned nil
// is never delivered to the group again, whoever owns the partition next. A message
// not acked within its visibility timeout (Extend moves it) is delivered again; Nack
// asks for a retry after a backoff; either failed attempt is recorded before the
// message is delivered again. After MaxAttempts failed deliveries (counting consumers
// that died holding it) a message goes to the group's dead-letter partition, read by a
// DeadLetters consumer, and is never delivered or acked in the group again.
// Within a group, a message is not handed out while an earlier message with the same
// key, handed out by an earlier Receive, is in flight or waiting for a retry; a key's
// later messages may come in the same batch, in order, and a Nack sends them back with
// it. So per-key order holds through retries.
//
// For exactly-once processing end to end, make the application's effect idempotent
// under the fencing token: write its output conditioned on Message.Token (a stale owner's
// write is refused, as its ack is), or, on SQLite, commit the output in the same
// transaction as the ack (Consumer.AckTx).
//
// # Without a transaction server
//
// On HBase and Aerospike a producer reserves sequence numbers with one atomic increment
// per partition batch and writes the rows if absent; a producer that dies in between
// leaves a hole. A consumer waits HoleTimeout for a hole to fill, then writes a
// tombstone there (if absent): the late producer's write then fails and it re-appends
// the event elsewhere. Either the event or the tombstone lands, never both.
package queue

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/telemetry"
)

// Spec describes a queue to Create: its name, partition count, consumer groups and
// dedup window (the fields are documented on driver.QueueSpec, which stores receive).
type Spec = driver.QueueSpec

// Limits of an event, as every store enforces them.
const (
	// MaxPayload bounds one event's payload, in bytes.
	MaxPayload = driver.MaxQueuePayload
	// MaxKeyLen bounds an event's partition key and its idempotency id, in bytes.
	MaxKeyLen = driver.MaxQueueKeyLen
)

// defaultTrimPeriod is how often at most a consumer trims (one pass over its
// partitions, trim.go).
const defaultTrimPeriod = 5 * time.Second

// Defaults of the options.
const (
	DefaultLease        = 30 * time.Second
	DefaultVisibility   = 30 * time.Second
	DefaultMaxAttempts  = 5
	DefaultHoleTimeout  = 5 * time.Second
	DefaultPollInterval = 100 * time.Millisecond
	DefaultClient       = "dcsync"
	DefaultFarm         = "local"
)

// Option configures a Queue (and the consumers it makes).
type Option func(*options)

type options struct {
	client, farm         string
	lease, visibility    time.Duration
	maxAttempts          int
	minBackoff           time.Duration
	maxBackoff           time.Duration
	holeTimeout          time.Duration
	pollInterval         time.Duration
	log                  *slog.Logger
	lockOpts             []lock.Option
	retentionCheckPeriod time.Duration
	retention            time.Duration
	force                bool // Delete only (delete.go)
	meter                metric.MeterProvider
}

// WithMeterProvider sets the OpenTelemetry meter provider the queue records its
// metrics with (default: the global one). The metrics are listed in package
// telemetry: events enqueued, messages received, redelivered, acked, nacked,
// dead-lettered, zombie acks, enqueue-to-receive and receive-to-ack latency,
// partitions owned and rebalances, by store, queue and group.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meter = mp }
}

// WithIdentity sets the client and farm ids of the queue's locks (defaults "dcsync" and
// "local"). Partition and member locks are XDC locks, so the farm only labels them.
func WithIdentity(client, farm string) Option {
	return func(o *options) { o.client, o.farm = client, farm }
}

// WithLease sets the lease of partition and member locks (default 30 s): a dead
// consumer's partitions move after about this long.
func WithLease(ttl time.Duration) Option { return func(o *options) { o.lease = ttl } }

// WithVisibility sets how long a received message stays invisible to further Receives
// before it is delivered again (default 30 s); Consumer.Extend moves it.
func WithVisibility(d time.Duration) Option { return func(o *options) { o.visibility = d } }

// WithMaxAttempts sets how many deliveries a message gets before it is dead-lettered
// (default 5).
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// WithRetryBackoff sets the backoff before a Nacked message is delivered again: min
// after the first attempt, doubling up to max (defaults 100 ms and 10 s).
func WithRetryBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// WithHoleTimeout sets how long a consumer waits for a reserved but unwritten sequence
// number before it aborts it (default 5 s). It only matters on stores with holes (HBase,
// Aerospike) and when a producer died or stalled mid-append.
func WithHoleTimeout(d time.Duration) Option { return func(o *options) { o.holeTimeout = d } }

// WithPollInterval sets the interval of the consumers' membership reads and of the
// reads of the partitions' heads while consumers wait (default 100 ms). Head reads back
// off, doubling up to 8 intervals, while they find nothing new; events enqueued through
// the same store value wake consumers at once, and 8 intervals bound the latency of
// events from other processes to an idle consumer. A member that joins is seen within
// about one interval.
func WithPollInterval(d time.Duration) Option { return func(o *options) { o.pollInterval = d } }

// WithRetention keeps acked events for at least d after they were enqueued, so that
// Consumer.Seek can replay them (default 0: an event is deleted soon after every group
// acked it). Consumers trim; every consumer of the queue should use the same value.
func WithRetention(d time.Duration) Option { return func(o *options) { o.retention = d } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithLockOptions passes options to the lock manager of partitions and members. Their
// level stays XDC whatever lock.WithLevel says (members read each other's slot locks at
// that level).
func WithLockOptions(opts ...lock.Option) Option {
	return func(o *options) { o.lockOpts = append(o.lockOpts, opts...) }
}

func newOptions(opts []Option) (options, error) {
	o := options{client: DefaultClient, farm: DefaultFarm, lease: DefaultLease,
		visibility: DefaultVisibility, maxAttempts: DefaultMaxAttempts,
		minBackoff: 100 * time.Millisecond, maxBackoff: 10 * time.Second,
		holeTimeout: DefaultHoleTimeout, pollInterval: DefaultPollInterval, log: slog.Default(),
		retentionCheckPeriod: defaultTrimPeriod}
	for _, f := range opts {
		f(&o)
	}
	const op = "queue.Options"
	switch {
	case o.visibility <= 0:
		return o, driver.Errorf(dcsync.InvalidArgument, op, "visibility %v must be positive", o.visibility)
	case o.maxAttempts < 1:
		return o, driver.Errorf(dcsync.InvalidArgument, op, "max attempts %d must be at least 1", o.maxAttempts)
	case o.minBackoff < 0 || o.maxBackoff < o.minBackoff:
		return o, driver.Errorf(dcsync.InvalidArgument, op, "retry backoff [%v, %v] must be ordered and not negative", o.minBackoff, o.maxBackoff)
	case o.holeTimeout <= 0:
		return o, driver.Errorf(dcsync.InvalidArgument, op, "hole timeout %v must be positive", o.holeTimeout)
	case o.pollInterval <= 0:
		return o, driver.Errorf(dcsync.InvalidArgument, op, "poll interval %v must be positive", o.pollInterval)
	case o.retention < 0:
		return o, driver.Errorf(dcsync.InvalidArgument, op, "retention %v is negative", o.retention)
	case o.log == nil:
		return o, driver.Errorf(dcsync.InvalidArgument, op, "logger is nil")
	}
	if err := driver.ValidateTTL(o.lease); err != nil {
		return o, driver.Errorf(dcsync.InvalidArgument, op, "lease: %v", err)
	}
	return o, nil
}

// Queue is a handle on one queue: it enqueues, makes consumers and reports lag. It is
// safe for concurrent use.
type Queue struct {
	store driver.Store
	opts  options
	tel   telemetry.QueueScope
	locks *lock.Manager
	spec  atomic.Pointer[Spec]
	rr    atomic.Uint64
}

// Create creates a queue with spec (see Spec; spec.Created is ignored) and
// returns a handle on it. It returns an error matching dcsync.ErrAlreadyExists when a
// queue of that name exists.
func Create(ctx context.Context, s driver.Store, spec Spec, opts ...Option) (*Queue, error) {
	if s == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, "queue.Create", "store is nil")
	}
	if err := driver.ValidateQueueSpec(spec); err != nil {
		return nil, err
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	spec.Groups = append([]string(nil), spec.Groups...)
	if err := s.CreateQueue(ctx, spec); err != nil {
		return nil, err
	}
	return open(ctx, s, spec.Name, o)
}

// Open returns a handle on an existing queue; an error matching dcsync.ErrNotFound when
// there is none.
func Open(ctx context.Context, s driver.Store, name string, opts ...Option) (*Queue, error) {
	if s == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, "queue.Open", "store is nil")
	}
	if err := driver.ValidateID("queue", name); err != nil {
		return nil, err
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return open(ctx, s, name, o)
}

func open(ctx context.Context, s driver.Store, name string, o options) (*Queue, error) {
	spec, err := s.ReadQueueSpec(ctx, name)
	if err != nil {
		return nil, err
	}
	lopts := append([]lock.Option{lock.WithTTL(o.lease), lock.WithLevel(dcsync.XDC), lock.WithLogger(o.log)}, o.lockOpts...)
	locks, err := lock.New(s, o.client, o.farm, lopts...)
	if err != nil {
		return nil, err
	}
	q := &Queue{store: s, opts: o, locks: locks,
		tel: telemetry.QueueScope{In: telemetry.For(o.meter, nil), Store: telemetry.StoreName(s), Queue: name}}
	q.spec.Store(&spec)
	// Round robin from a random partition: short-lived producers (a CLI run) spread.
	q.rr.Store(rand.Uint64())
	return q, nil
}

// Spec returns the queue's spec as last read.
func (q *Queue) Spec() Spec { return *q.spec.Load() }

// Name returns the queue's name.
func (q *Queue) Name() string { return q.spec.Load().Name }

// AddGroup adds a consumer group. Its consumers start at the oldest event still
// stored. It returns an error matching dcsync.ErrAlreadyExists when the group exists.
func (q *Queue) AddGroup(ctx context.Context, group string) error {
	if err := driver.ValidateID("group", group); err != nil {
		return err
	}
	spec, err := q.store.AddQueueGroup(ctx, q.Name(), group)
	if err == nil || errors.Is(err, dcsync.ErrAlreadyExists) {
		if spec.Name != "" {
			q.spec.Store(&spec)
		}
	}
	return err
}

// Event is one event to enqueue.
type Event struct {
	// Key is the partition key: events with the same key go to the same partition and
	// are received in order within each group. Empty: no key (see the package doc).
	Key string
	// ID is the idempotency id: within the queue's dedup window an event whose ID was
	// already enqueued is not enqueued again (its result says Duplicate). Give every
	// event an ID to make retrying a failed Enqueue safe. IDs starting with a NUL byte
	// are reserved.
	ID string
	// Payload is the event's body, at most MaxPayload bytes.
	Payload []byte
}

// Partition returns the partition of key in a queue of p partitions: fnv1a32(key) mod p.
// Other clients route keys the same way with it.
func Partition(key string, p int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(p))
}

// Appended is where Enqueue put an event: its partition and sequence number, and
// whether it was a duplicate of an earlier event with the same ID.
type Appended = driver.QueueAppend

// Enqueue appends events and returns, for each, its partition and sequence number (or,
// for a duplicate ID, the earlier event's). The store applies the batch exactly once
// also when an attempt failed in doubt; when Enqueue returns an error some events may
// be stored, and enqueueing them again is safe if they have IDs.
func (q *Queue) Enqueue(ctx context.Context, events ...Event) ([]Appended, error) {
	spec := q.spec.Load()
	if len(events) == 0 {
		return nil, driver.Errorf(dcsync.InvalidArgument, "queue.Enqueue", "no events")
	}
	rr := -1
	qe := make([]driver.QueueEvent, len(events))
	for i, e := range events {
		if strings.HasPrefix(e.ID, "\x00") {
			return nil, driver.Errorf(dcsync.InvalidArgument, "queue.Enqueue", "event %d: ids starting with NUL are reserved", i)
		}
		p := 0
		if e.Key != "" {
			p = Partition(e.Key, spec.Partitions)
		} else {
			if rr < 0 {
				rr = int(q.rr.Add(1) % uint64(spec.Partitions))
			}
			p = rr
		}
		qe[i] = driver.QueueEvent{Partition: p, Key: e.Key, ID: e.ID, Payload: e.Payload}
	}
	res, err := q.append(ctx, qe)
	if err == nil {
		n := 0
		for _, r := range res {
			if !r.Duplicate {
				n++
			}
		}
		q.tel.Enqueued(ctx, n)
	}
	return res, err
}

func (q *Queue) append(ctx context.Context, qe []driver.QueueEvent) ([]driver.QueueAppend, error) {
	if err := driver.ValidateQueueEvents(qe); err != nil {
		return nil, err
	}
	res, err := q.store.AppendQueue(ctx, q.Name(), qe)
	if err != nil {
		return nil, err
	}
	ps := make([]int, 0, 4)
	for _, r := range res {
		if !r.Duplicate {
			ps = append(ps, r.Partition)
		}
	}
	if h := lookupHub(q.store, q.Name()); h != nil {
		h.appended(ps)
	}
	return res, nil
}

// PartitionLag is one partition's position for a group.
type PartitionLag struct {
	Partition int
	// Dead labels the group's dead-letter partition (Partition = Spec().Partitions +
	// the group's index); the others are event partitions.
	Dead bool
	// Head is the partition's next sequence number; Next is the group's first
	// unacknowledged one (raised to the partition's floor); Lag is Head - Next.
	Head, Next, Lag uint64
	// Token is the fencing token of the partition's current (or last) owner.
	Token uint64
}

// Lag reports group's lag per partition (its dead-letter partition last, labelled
// Dead, with Partition = Spec().Partitions + the group's index). Describe reads more:
// owners, attempts and member slots.
func (q *Queue) Lag(ctx context.Context, group string) ([]PartitionLag, error) {
	spec, gi, err := q.group(ctx, group)
	if err != nil {
		return nil, err
	}
	ps := make([]int, 0, spec.Partitions+1)
	for p := 0; p < spec.Partitions; p++ {
		ps = append(ps, p)
	}
	ps = append(ps, spec.Partitions+gi)
	bounds, err := q.store.QueueBounds(ctx, spec.Name, ps)
	if err != nil {
		return nil, err
	}
	offs, err := q.store.ReadQueueOffsets(ctx, spec.Name, group, ps)
	if err != nil {
		return nil, err
	}
	out := make([]PartitionLag, len(ps))
	for i, p := range ps {
		next := max(offs[i].Next, bounds[i].Floor)
		l := PartitionLag{Partition: p, Dead: p >= spec.Partitions, Head: bounds[i].Head, Next: next, Token: offs[i].Token}
		if l.Head > next {
			l.Lag = l.Head - next
		}
		out[i] = l
	}
	return out, nil
}

// group returns the spec and index of group, re-reading the spec once when the group
// is unknown (another process may have added it).
func (q *Queue) group(ctx context.Context, group string) (Spec, int, error) {
	if err := driver.ValidateID("group", group); err != nil {
		return Spec{}, 0, err
	}
	spec := *q.spec.Load()
	if gi := spec.GroupIndex(group); gi >= 0 {
		return spec, gi, nil
	}
	fresh, err := q.store.ReadQueueSpec(ctx, spec.Name)
	if err != nil {
		return spec, 0, err
	}
	q.spec.Store(&fresh)
	if gi := fresh.GroupIndex(group); gi >= 0 {
		return fresh, gi, nil
	}
	return fresh, 0, driver.Errorf(dcsync.NotFound, "queue", "queue %q has no group %q", spec.Name, group)
}
