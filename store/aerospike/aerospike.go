// Package aerospike is dcsync's Aerospike store, on the official Go client
// (github.com/aerospike/aerospike-client-go/v8). Its records are byte-compatible with the
// Java lock and latch libraries (PhonePe DLM and DistributedLatch), so a Java service
// and a Go service see the same locks and the same counts.
//
// # Layout
//
//   - latch: set D_LTCH#<suffix>, string user key D_LTCH#<client>#<latch>, one integer
//     bin count#<farm> per farm cell. A DC latch is the caller's cell; an XDC latch is
//     every cell, and its count their sum. (AerospikeLatchStorage.java.)
//   - lock: set DC#<farm>#<suffix> or XDC#<suffix>, string user key <client>#<lock>,
//     bins <farm>##data = 1 and <farm>##uat = epoch ms, taken by a put that expects
//     generation 0, with the lease as the record's TTL. (AerospikeStore.java.)
//
// dcsync adds bins a Java client ignores (none contains "count#", which the Java XDC
// read sums): on a latch record OpsBin (for each recent writer, the sequence number of
// its last update, so that an update whose first try was in doubt is never applied
// twice), EndsBin (each cell's end), IdentityBin (whose latch the record is) and AtBin;
// on a lock record OwnerBin, AcqBin, LeaseBin (only the owner refreshes or releases,
// every acquisition carries a fencing token, and a lease ends to the ms) and
// IdentityBin. Fencing tokens come from a never-expiring counter record in set
// F#<lock set>, keyed by layout.IdentityKey of the lock (unambiguous), bin "fence",
// which also keeps the number each of the latest acquisitions got (AcqsBin, by the
// lock record's AcqBin): an acquire is two round trips (take the lock record; number
// the acquisition) and readers find the holder's token in the fence record. No Java set
// name starts with "F#".
//
// Registers (driver.RegisterStore: the election's leader record, the semaphore's and
// read-write lock's counts) live in set R#<lock set> (RegisterSetPrefix), keyed by
// layout.IdentityKey of the key, bins dcsync_gen (the generation, checked by a filter
// expression on every write; the record's own 16-bit generation is not used),
// dcsync_value and dcsync_write (the id of the write that stored the generation, which
// settles an unknown outcome). They never expire. No Java set name starts with "R#";
// docs/stores/aerospike.md, "Registers", has the details.
//
// # Latch lifetime
//
// A latch ends TTL after its creation, by the server's clock; count updates never move
// that end, whatever TTL the updating manager has. The Java layout puts every farm's
// cell of a name in one record with one TTL, so dcsync keeps each cell's end in EndsBin
// (ms since the Unix epoch, computed by the server in the creating write) and judges
// cells by it, on the server (filter and read expressions) or by the server's time read
// beside the record:
//   - DC: each farm's cell ends on its own. A 1 s DC latch in dc2 ends without ending
//     dc1's 1 h latch of the same name; a read or update of an ended cell finds no
//     latch, and a create replaces it.
//   - XDC: cells an XDC update adds take the latch's end (the latest end in the
//     record), so the whole latch ends together and its sum never drops because the
//     creator's cell ended first.
//
// The record's own TTL only removes it: a create sets it to cover the new cell (TTL
// rounded up to seconds, plus one) and only ever extends it — the write carries the
// TTL only when a filter on the record's remaining TTL (ExpTTL) says it would end
// sooner, and TTL_DONT_UPDATE otherwise; updates always use TTL_DONT_UPDATE. A record
// whose cells have all ended is replaced whole by the next create.
//
// # Namespace requirement
//
// Every lock and latch record carries a TTL, so the namespace needs nsup-period > 0 (or
// allow-ttl-without-nsup true): otherwise the server refuses every such write
// (FAIL_FORBIDDEN), which this store reports as TableCreation with a message naming the
// namespace and the setting.
//
// # Ids that collide in the Java layout
//
// The Java layout joins ids with '#' unescaped: client "a#b" with latch "c" and client
// "a" with latch "b#c" have one key (layout.AmbiguousAerospikeLatchKey). The first
// dcsync create of such a record writes its (client, name) into IdentityBin; a create or
// update under another identity is refused with InvalidArgument naming both, and
// nothing is written; a read under another identity finds no latch. Two locks with one
// Java key share the lock record, so they exclude each other (LockUnavailable, whose
// message names the colliding holder), but each has its own fence. A farm id with '#'
// makes the DC lock set name DC#<farm>#<suffix> ambiguous across suffixes (farm "a#b"
// with suffix "c" and farm "a" with suffix "b#c"); within one store's suffix it is not.
//
// # A mixed Java and Go deployment
//
//   - Java reads see dcsync's cells (and dcsync reads Java's), but Java knows nothing
//     of cell ends: it sees a cell dcsync considers ended until the record expires (an
//     XDC sum in Java includes it).
//   - A Java update sets the record's TTL to the Java TTL (AerospikeLatchStorage.java:
//     149): it can shorten the record, ending dcsync's cells early, or extend it
//     (dcsync's cells still end at their own ends).
//   - A Java create is create-only on the record (AerospikeLatchStorage.java:71): a
//     Java DC create in a second farm fails once any farm's cell exists, whereas a
//     dcsync one adds its cell.
//   - A record a Java client created has no EndsBin: dcsync follows Java's rule there
//     (every cell lives as long as the record) and adds cells to it without ends. A cell
//     a Java update added to a record dcsync created has no end of its own and ends
//     with the latch.
//   - A Java-written record has no identity, so a collision with it cannot be detected.
//   - Java retries count updates blindly (AerospikeLatchStorage.java:58-61), so its own
//     updates may still be applied twice; dcsync's never are. A Java lock has no owner
//     or lease bins: dcsync respects it until its TTL, and never refreshes or releases
//     it; a Java release deletes any lock, dcsync's included (AerospikeStore.java:84-88).
//
// # Retries and exactly-once updates
//
// Every operation is retried on network errors and timeouts (Config.Attempts tries,
// with exponential backoff and jitter from Config.RetryDelay), and every write is
// written so that a retry after an in-doubt try is safe. Busy replies (KEY_BUSY: more
// than the namespace's transaction-pending-limit, 20 by default, writes queued on one
// record) were not applied; they are retried with backoff without counting as tries.
//
// A count update holds one of its Store's writer slots from its first try to its last,
// and carries the slot's next sequence number; the latch record keeps, per writer slot,
// the number of its last applied update (OpsBin), and a write whose number the record
// already holds is filtered out. So a retry is recognised however many updates other
// writers made meanwhile (Kafka's idempotent producer keeps per-producer sequence
// numbers for the same reason), and no client clock is involved. The record keeps the
// Config.OpIDsKept writers that wrote last, by the server's time.
//
// A try whose outcome is unknown can also reach the server late, after the retry and
// after later writes. Every retried write is conditioned on the state it replaces, so
// that it changes nothing then: a lock's fence increment on the acquisition having no
// number yet, a refresh on less than its TTL being left, updates and deletes of a latch
// on its incarnation (the end of its cell or of the latch), an offset commit on a version
// above the stored one. docs/stores/aerospike.md ("Writes that land late") lists every
// write and its condition.
package aerospike

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/layout"
)

// Defaults of Config.
const (
	DefaultLatchSetSuffix = "distributed_latch"
	DefaultLockSetSuffix  = "distributed_lock"
	DefaultAttempts       = 5
	DefaultRetryDelay     = 10 * time.Millisecond
	DefaultTimeout        = time.Second
	DefaultOpIDsKept      = 256
)

// Bin and set names dcsync adds to the Java layout. All bin names fit Aerospike's
// 15-byte limit, and none contains "count#", which the Java latch library's XDC read
// looks for (AerospikeLatchStorage.java:113-114).
const (
	// OpsBin is the latch record's map from writer (an integer: a store's random id
	// and one of its operation slots, see opID) to [server ms, sequence number] of that
	// writer's last update; it keeps the Config.OpIDsKept most recently written.
	OpsBin = "dcsync_writers"
	// EndsBin is the latch record's map from farm id to the end of that farm's cell, in
	// ms since the Unix epoch by the server's clock.
	EndsBin = "dcsync_ends"
	// IdentityBin is the (client, latch) a latch record belongs to, or the key a lock
	// record belongs to: layout.IdentityKey, unambiguous where the Java key is not.
	IdentityBin = "dcsync_id"
	// AtBin is the server's time (ms since the Unix epoch) of a latch record's last XDC
	// update: the reply to that update judges which cells have ended by it.
	AtBin = "dcsync_at"
	// OwnerBin is the lock record's owner id (a string).
	OwnerBin = "dcsync_owner"
	// TokenBin is the lock record's fencing token (an integer), as versions before
	// issue 15 wrote it; a lock record now carries AcqBin instead and its token is in
	// the fence record (AcqsBin). A record with TokenBin is still read by it.
	TokenBin = "dcsync_token"
	// AcqBin is the lock record's acquisition id (a random integer, one per
	// AcquireLock), the key of the acquisition's number in the fence record's AcqsBin.
	AcqBin = "dcsync_acq"
	// AcqsBin is the fence record's map from acquisition id (AcqBin) to the fencing
	// token the acquisition got; it keeps the FencesKept latest.
	AcqsBin = "dcsync_acqs"
	// LeaseBin is the lock record's lease length in ms (an integer).
	LeaseBin = "dcsync_lease"
	// FenceBin is the fence record's counter (an integer).
	FenceBin = "fence"
	// FenceSetPrefix is prepended to a lock set's name to name its fence set.
	FenceSetPrefix = "F#"
)

// maxOpIDsKept bounds Config.OpIDsKept, keeping latch records small.
const maxOpIDsKept = 8192

// Config configures a Store. Only Namespace is required.
type Config struct {
	// Namespace holds every record; it must exist on the cluster.
	Namespace string
	// LatchSetSuffix names the latch set D_LTCH#<suffix> (default "distributed_latch",
	// the Java default).
	LatchSetSuffix string
	// LockSetSuffix names the lock sets DC#<farm>#<suffix> and XDC#<suffix> (default
	// "distributed_lock", the name the DLM docs use).
	LockSetSuffix string
	// Attempts is the number of tries per operation (default 5, the Java default).
	// Replies that say the server refused the command because it is busy (KEY_BUSY:
	// too many writes queued on one record; DEVICE_OVERLOAD; no free connection) do not
	// count: nothing was applied, and they are retried until ctx ends or for at most
	// Attempts × Timeout.
	Attempts int
	// RetryDelay is the pause before the second try (default 10ms). Later pauses
	// double, up to 8 × RetryDelay, each shortened by a random part of up to half
	// (jitter) so that writers contending for one record spread out.
	RetryDelay time.Duration
	// Timeout bounds each try: the client's socket and total timeout (default 1s).
	Timeout time.Duration
	// OpIDsKept is how many writers a latch record remembers the last update of
	// (default 256). A writer is one operation slot of one Store: a Store runs each
	// update in a slot of its own and numbers the slot's updates, so a retry is
	// recognised by its slot's number in the record however many updates other writers
	// made meanwhile. It is forgotten only once OpIDsKept other slots have updated the
	// record after it: keep this above the number of updates that can be in flight on
	// one latch at once, across all processes. Each costs about 25 bytes in the record
	// and in every XDC update's reply.
	OpIDsKept int
	// DurableDelete makes lock releases durable deletes (tombstones). A namespace in
	// strong-consistency mode refuses plain deletes unless it sets
	// strong-consistency-allow-expunge; durable deletes are an Enterprise feature
	// (Community servers answer ENTERPRISE_ONLY). Leave it off on AP namespaces.
	DurableDelete bool
	// Logger receives retries and in-doubt outcomes (default: discarded).
	Logger *slog.Logger
}

// Store is a driver.Store on an Aerospike cluster. It is safe for concurrent use.
type Store struct {
	client   *as.Client
	owned    bool
	cfg      Config
	latchSet string
	log      *slog.Logger
	writers  *writers
	incs     incarnations
	prepared preparedUpdates // DC count-downs' constant parts (latch_prepared.go)

	// mu is held shared by every operation and exclusively by Close, so that Close
	// waits for operations in flight before it closes an owned client.
	mu     sync.RWMutex
	closed bool
	done   chan struct{} // closed by Close
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.CloseNotifier = (*Store)(nil)
)

func invalid(format string, args ...any) error {
	return driver.Errorf(dcsync.InvalidArgument, "aerospike.New", format, args...)
}

func checkSetName(set string) error {
	if len(set) > layout.MaxSetName {
		return invalid("set name %q is longer than %d bytes", set, layout.MaxSetName)
	}
	if strings.ContainsAny(set, ":;\x00") {
		return invalid("set name %q contains ':', ';' or NUL", set)
	}
	return nil
}

// New returns a store on an already-connected client, as the Java libraries take one.
// It validates cfg (InvalidArgument) and does no I/O. Close does not close client.
func New(client *as.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, invalid("client is nil")
	}
	return newStore(client, false, cfg)
}

func newStore(client *as.Client, owned bool, cfg Config) (*Store, error) {
	if cfg.Namespace == "" || len(cfg.Namespace) > 31 || strings.ContainsAny(cfg.Namespace, ":;\x00") {
		return nil, invalid("namespace %q must be 1 to 31 bytes without ':' or ';'", cfg.Namespace)
	}
	if cfg.LatchSetSuffix == "" {
		cfg.LatchSetSuffix = DefaultLatchSetSuffix
	}
	if cfg.LockSetSuffix == "" {
		cfg.LockSetSuffix = DefaultLockSetSuffix
	}
	switch {
	case cfg.Attempts < 0:
		return nil, invalid("attempts %d is negative", cfg.Attempts)
	case cfg.Attempts == 0:
		cfg.Attempts = DefaultAttempts
	}
	switch {
	case cfg.RetryDelay < 0:
		return nil, invalid("retry delay %v is negative", cfg.RetryDelay)
	case cfg.RetryDelay == 0:
		cfg.RetryDelay = DefaultRetryDelay
	}
	switch {
	case cfg.Timeout < 0:
		return nil, invalid("timeout %v is negative", cfg.Timeout)
	case cfg.Timeout == 0:
		cfg.Timeout = DefaultTimeout
	}
	switch {
	case cfg.OpIDsKept < 0 || cfg.OpIDsKept > maxOpIDsKept:
		return nil, invalid("op ids kept %d is outside [1, %d]", cfg.OpIDsKept, maxOpIDsKept)
	case cfg.OpIDsKept == 0:
		cfg.OpIDsKept = DefaultOpIDsKept
	}
	latchSet := layout.AerospikeLatchSet(cfg.LatchSetSuffix)
	xdc := layout.AerospikeLockSet(dcsync.XDC, "", cfg.LockSetSuffix)
	for _, set := range []string{latchSet, xdc, FenceSetPrefix + xdc} {
		if err := checkSetName(set); err != nil {
			return nil, err
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{client: client, owned: owned, cfg: cfg, latchSet: latchSet, log: log, writers: newWriters(), done: make(chan struct{})}, nil
}

// OpenURL dials the cluster named by u and returns a store that owns the client: Close
// closes it. The URL is
//
//	aerospike://[USER@]HOST:PORT/NAMESPACE?latch_set_suffix=..&lock_set_suffix=..&attempts=..&timeout=..
//
// where PORT defaults to 3000, timeout is a Go duration ("500ms") and every query
// parameter is optional. A bad URL is InvalidArgument; a cluster that cannot be reached
// is Connection.
//
// Security (docs/secure-clusters.md; what each mode protects: docs/stores/aerospike.md):
//
//   - TLS: tls_ca=/path (PEM authorities to trust; else the system's), tls_name=NAME
//     (the cluster's TLS name, which the server's certificate must carry; default the
//     host), tls_cert=/path and tls_key=/path (a client certificate), tls=true (TLS
//     with the system's roots and no other parameter).
//   - Who the client is: user=NAME (or USER@ in the URL) with a password from exactly
//     one of ?password_file=/path, $DCSYNC_AEROSPIKE_PASSWORD (PasswordEnv) and a file
//     named by $DCSYNC_AEROSPIKE_PASSWORD_FILE; auth=internal (the default with a user),
//     external (LDAP; needs TLS) or pki (the client certificate is the identity; no
//     user or password).
//
// A password in the URL itself (USER:PASSWORD@) is refused (InvalidArgument), and so is
// a secret file that other users may read. A server that refuses the credentials, or a
// certificate the client refuses (an untrusted authority, a wrong TLS name), is
// Unauthenticated, naming what failed; errors never contain the password.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	const op = "aerospike.OpenURL"
	if u == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "URL is nil")
	}
	if err := refusePassword(op, u); err != nil {
		return nil, err
	}
	if !strings.EqualFold(u.Scheme, "aerospike") {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "URL %s: scheme must be aerospike", shownURL(u))
	}
	host, portStr := u.Hostname(), u.Port()
	if host == "" {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "URL %s names no host", shownURL(u))
	}
	port := 3000
	if portStr != "" {
		p, err := strconv.Atoi(portStr)
		if err != nil || p <= 0 || p > 65535 {
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "URL %s: bad port %q", shownURL(u), portStr)
		}
		port = p
	}
	cfg := Config{Namespace: strings.Trim(u.Path, "/")}
	q := u.Query()
	for name := range q {
		switch name {
		case "latch_set_suffix", "lock_set_suffix", "attempts", "timeout", "retry_delay", "op_ids_kept", "durable_delete":
		default:
			if slices.Contains(securityParams, name) {
				continue
			}
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "URL %s: unknown parameter %q", shownURL(u), name)
		}
	}
	cfg.LatchSetSuffix = q.Get("latch_set_suffix")
	cfg.LockSetSuffix = q.Get("lock_set_suffix")
	switch v := q.Get("durable_delete"); v {
	case "", "false":
	case "true":
		cfg.DurableDelete = true
	default:
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "URL %s: durable_delete %q is not true or false", shownURL(u), v)
	}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"attempts", &cfg.Attempts}, {"op_ids_kept", &cfg.OpIDsKept}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return nil, driver.Errorf(dcsync.InvalidArgument, op, "URL %s: %s %q is not a positive integer", shownURL(u), p.name, v)
			}
			*p.dst = n
		}
	}
	for _, p := range []struct {
		name string
		dst  *time.Duration
	}{{"timeout", &cfg.Timeout}, {"retry_delay", &cfg.RetryDelay}} {
		if v := q.Get(p.name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, driver.Errorf(dcsync.InvalidArgument, op, "URL %s: %s %q is not a positive duration", shownURL(u), p.name, v)
			}
			*p.dst = d
		}
	}
	// Validate everything before dialling.
	if _, err := newStore(nil, false, cfg); err != nil {
		return nil, err
	}
	sec, err := parseSecurity(op, u)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if err := ctx.Err(); err != nil {
		return nil, driver.Errorf(dcsync.Connection, op, "dial %s: %w", addr, err)
	}
	policy := as.NewClientPolicy()
	policy.Timeout = 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		policy.Timeout = max(min(policy.Timeout, time.Until(dl)), time.Millisecond)
	}
	// The login (if any) is bounded by the open timeout too.
	policy.LoginTimeout = policy.Timeout
	sec.apply(policy)
	client, aerr := as.NewClientWithPolicyAndHost(policy, sec.host(host, port))
	if aerr != nil {
		return nil, sec.dialError(op, addr, aerr)
	}
	if err := checkNamespace(op, client, cfg.Namespace); err != nil {
		client.Close()
		return nil, err
	}
	return newStore(client, true, cfg)
}

// checkNamespace refuses, as InvalidArgument, a namespace the cluster does not have,
// naming the ones it has: without it the first operation fails with the server's
// INVALID_NAMESPACE. It asks one node ("namespaces" info command); a node that does not
// answer leaves the check to the first operation.
func checkNamespace(op string, client *as.Client, ns string) error {
	nodes := client.GetNodes()
	if len(nodes) == 0 {
		return nil
	}
	info, err := nodes[0].RequestInfo(as.NewInfoPolicy(), "namespaces")
	if err != nil {
		return nil
	}
	have := strings.Split(info["namespaces"], ";")
	if slices.Contains(have, ns) {
		return nil
	}
	return driver.Errorf(dcsync.InvalidArgument, op, "namespace %q: the cluster has no such namespace (it has %s)", ns, strings.Join(have, ", "))
}

// Close closes the client if the store dialled it (OpenURL); a client passed to New is
// left open. Locks and latches stay. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
		if s.owned {
			s.client.Close()
		}
	}
	return nil
}

// Done returns a channel that Close closes: package latch ends every Wait on a closed
// store at once.
func (s *Store) Done() <-chan struct{} { return s.done }

// Client returns the client the store uses.
func (s *Store) Client() *as.Client { return s.client }

// ---- keys and validation ----

func (s *Store) lockSet(k dcsync.Key) string {
	return layout.AerospikeLockSet(k.Level, k.Farm, s.cfg.LockSetSuffix)
}

// checkKey runs the Aerospike-specific checks that follow dcsync's own.
func (s *Store) checkKey(k dcsync.Key) error {
	if err := layout.CheckAerospikeKey(k, s.cfg.LatchSetSuffix, s.cfg.LockSetSuffix); err != nil {
		return err
	}
	if fence := FenceSetPrefix + s.lockSet(k); len(fence) > layout.MaxSetName {
		return driver.Errorf(dcsync.InvalidArgument, "aerospike.Validate",
			"fence set name %q is longer than %d bytes", fence, layout.MaxSetName)
	}
	return nil
}

func (s *Store) latchKey(k dcsync.Key) (*as.Key, error) {
	key, err := as.NewKey(s.cfg.Namespace, s.latchSet, layout.AerospikeLatchKey(k.Client, k.Name))
	if err != nil {
		return nil, driver.Errorf(dcsync.Internal, "aerospike.Key", "latch key: %w", err)
	}
	return key, nil
}

func (s *Store) lockKeys(k dcsync.Key) (lock, fence *as.Key, err error) {
	if lock, err = s.lockKey(k); err != nil {
		return nil, nil, err
	}
	// The fence record's key is only dcsync's: unambiguous, so two locks whose Java keys
	// collide still have fences of their own.
	fk, aerr := as.NewKey(s.cfg.Namespace, FenceSetPrefix+s.lockSet(k), layout.IdentityKey(k))
	if aerr != nil {
		return nil, nil, driver.Errorf(dcsync.Internal, "aerospike.Key", "fence key: %w", aerr)
	}
	return lock, fk, nil
}

// lockKey is the key of k's lock record (the Java layout's).
func (s *Store) lockKey(k dcsync.Key) (*as.Key, error) {
	lk, aerr := as.NewKey(s.cfg.Namespace, s.lockSet(k), layout.AerospikeLockKey(k.Client, k.Name))
	if aerr != nil {
		return nil, driver.Errorf(dcsync.Internal, "aerospike.Key", "lock key: %w", aerr)
	}
	return lk, nil
}

// ttlSeconds rounds ttl up to whole seconds, as Aerospike keeps TTLs.
func ttlSeconds(ttl time.Duration) uint32 {
	return uint32((ttl + time.Second - 1) / time.Second)
}

// ceilMS rounds d up to whole milliseconds: a lease or latch never ends early.
func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// expires converts a record's remaining TTL to an absolute time (zero: never).
func expires(now time.Time, exp uint32) time.Time {
	if exp == 0 || exp >= as.TTLDontUpdate {
		return time.Time{}
	}
	return now.Add(time.Duration(exp) * time.Second)
}

// opID identifies one update: its writer (a Store's random 48-bit id and the slot the
// update holds, 15 bits) and the slot's sequence number. The slot is the update's own
// until it ends, retries included, so a record whose entry for the writer holds seq or
// more has applied the update. No clock is involved.
type opID struct{ writer, seq int64 }

// slotBits is the width of the slot part of a writer id.
const slotBits = 15

// writers hands out operation slots: at most 1<<slotBits updates of one Store are in
// flight at once (more wait).
type writers struct {
	base int64 // random, shifted left by slotBits

	mu   sync.Mutex
	cond *sync.Cond
	free []int64
	seq  []int64 // by slot: the last sequence number handed out
}

func newWriters() *writers {
	var b [8]byte
	_, _ = rand.Read(b[:])
	w := &writers{base: int64(binary.BigEndian.Uint64(b[:])>>16) << slotBits}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// acquire takes a free slot and returns the id of its next update.
func (w *writers) acquire() opID {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.free) == 0 && len(w.seq) == 1<<slotBits {
		w.cond.Wait()
	}
	var slot int64
	if n := len(w.free); n > 0 {
		slot, w.free = w.free[n-1], w.free[:n-1]
	} else {
		slot = int64(len(w.seq))
		w.seq = append(w.seq, 0)
	}
	w.seq[slot]++
	return opID{writer: w.base | slot, seq: w.seq[slot]}
}

// fresh returns a new id on the slot of id, which the caller holds: for a second update
// made within the same hold (the one that takes back an overflowing update).
func (w *writers) fresh(id opID) opID {
	w.mu.Lock()
	defer w.mu.Unlock()
	slot := id.writer & (1<<slotBits - 1)
	w.seq[slot]++
	return opID{writer: id.writer, seq: w.seq[slot]}
}

// release frees the slot of id, whose update has ended.
func (w *writers) release(id opID) {
	w.mu.Lock()
	w.free = append(w.free, id.writer&(1<<slotBits-1))
	w.mu.Unlock()
	w.cond.Signal()
}

// serverNow is the server's clock, in ms since the Unix epoch, inside an expression:
// the record's last-update time (ns) plus the ms since then. In a write's ops, the
// record's last-update time is already the write's own and since_update is 0; in a
// filter or a read it is the record's stored one. Either way the sum is the server's
// current time (checked on the real server, 8.1). Aerospike has no "now" expression.
func serverNow() *as.Expression { return serverNowExp }

var serverNowExp = prepack(as.ExpNumAdd(as.ExpNumDiv(as.ExpLastUpdate(), as.ExpIntVal(int64(time.Millisecond))), as.ExpSinceUpdate()))

// ---- policies ----

func (s *Store) basePolicy(ctx context.Context) as.BasePolicy {
	p := *as.NewPolicy()
	t := s.cfg.Timeout
	if dl, ok := ctx.Deadline(); ok {
		t = max(min(t, time.Until(dl)), time.Millisecond)
	}
	p.TotalTimeout, p.SocketTimeout, p.MaxRetries = t, t, 0
	return p
}

func (s *Store) readPolicy(ctx context.Context) *as.BasePolicy {
	p := s.basePolicy(ctx)
	return &p
}

func (s *Store) writePolicy(ctx context.Context, ttl uint32) *as.WritePolicy {
	wp := as.NewWritePolicy(0, ttl)
	wp.BasePolicy = s.basePolicy(ctx)
	return wp
}

func (s *Store) batchPolicy(ctx context.Context) *as.BatchPolicy {
	bp := as.NewBatchPolicy()
	bp.BasePolicy = s.basePolicy(ctx)
	return bp
}

func ownerIs(owner string) *as.Expression {
	return as.ExpEq(ownerBinExp, as.ExpStringVal(owner))
}

// ---- errors and retries ----

// resultCode returns the Aerospike result code of err, and whether err carries one.
func resultCode(err error) (types.ResultCode, bool) {
	var ae *as.AerospikeError
	if errors.As(err, &ae) {
		return ae.ResultCode, true
	}
	return 0, false
}

func hasCode(err error, codes ...types.ResultCode) bool {
	rc, ok := resultCode(err)
	if !ok {
		return false
	}
	for _, c := range codes {
		if rc == c {
			return true
		}
	}
	return false
}

// transient reports whether err is worth another attempt: the network, a timeout, or
// a busy or briefly unavailable server.
func transient(err error) bool {
	if errors.Is(err, errTryAgain) {
		return true
	}
	rc, ok := resultCode(err)
	if !ok {
		return false
	}
	switch rc {
	case types.TIMEOUT, types.KEY_BUSY, types.DEVICE_OVERLOAD, types.PARTITION_UNAVAILABLE,
		types.SERVER_MEM_ERROR, types.XDR_KEY_BUSY:
		return true
	}
	return rc < 0 && rc != types.SERIALIZE_ERROR && rc != types.PARSE_ERROR && rc != types.TYPE_NOT_SUPPORTED
}

// busy reports whether err says the command was refused for load: too many commands
// queued on one record (KEY_BUSY, beyond the namespace's transaction-pending-limit,
// 20 by default), an overloaded device, or no free connection in the client's pool.
// Nothing was applied. Such replies are retried with backoff and do not count as tries.
func busy(err error) bool {
	return hasCode(err, types.KEY_BUSY, types.XDR_KEY_BUSY, types.DEVICE_OVERLOAD, types.NO_AVAILABLE_CONNECTIONS_TO_NODE)
}

// surelyNotApplied reports whether a failed write certainly did not reach the record:
// the client never sent it, or the server refused it.
func surelyNotApplied(err error) bool {
	if errors.Is(err, errTryAgain) || busy(err) {
		return true
	}
	var ae *as.AerospikeError
	if errors.As(err, &ae) && ae.InDoubt {
		return false
	}
	return hasCode(err, types.PARTITION_UNAVAILABLE, types.SERVER_MEM_ERROR, types.INVALID_NODE_ERROR, types.MAX_ERROR_RATE)
}

// errTryAgain makes retry try again (counted as a try, never in doubt): an operation
// found the record in a state that changed under it.
var errTryAgain = errors.New("the record changed; trying again")

// serverError maps an Aerospike error that is not one of an operation's expected
// outcomes.
func (s *Store) serverError(op string, err error) error {
	var de *dcsync.Error
	if errors.As(err, &de) {
		return err
	}
	if rc, ok := resultCode(err); ok {
		switch {
		case rc == types.FAIL_FORBIDDEN:
			// The server refuses a write with a TTL in a namespace without nsup-period
			// (and without allow-ttl-without-nsup): every lock and latch write carries
			// one. It is the store's storage that is unusable as configured, as when a
			// table cannot be created, hence TableCreation.
			return driver.Errorf(dcsync.TableCreation, op,
				"namespace %q refuses writes with a TTL: set nsup-period > 0 or allow-ttl-without-nsup in its configuration (result code %d, %v): %w",
				s.cfg.Namespace, int(rc), rc, err)
		case slices.Contains(authCodes, rc):
			// The session expired and a new login failed, or the user lacks the role.
			return driver.Errorf(dcsync.Unauthenticated, op, "the server refused the client (result code %d, %v): %w", int(rc), rc, err)
		case transient(err):
			return driver.Errorf(dcsync.Connection, op, "result code %d (%v): %w", int(rc), rc, err)
		}
		return driver.Errorf(dcsync.Internal, op, "result code %d (%v): %w", int(rc), rc, err)
	}
	return driver.Errorf(dcsync.Internal, op, "%w", err)
}

// attempt is the state of one logical operation across its tries.
type attempt struct {
	// inDoubt is true once a failed try of a write may have been applied.
	inDoubt bool
	// n is the number of the current try, from 1; busy replies do not count.
	n int
}

// maxBackoff bounds the pause between tries, in multiples of Config.RetryDelay: a busy
// record drains in milliseconds (KEY_BUSY: some 20 writes queued on it).
const maxBackoff = 8

// pause returns the pause before the next try after k failures in a row: RetryDelay
// doubled k-1 times (at most maxBackoff × RetryDelay), less a random part of up to half.
func (s *Store) pause(k int) time.Duration {
	d := s.cfg.RetryDelay << min(k-1, 3)
	d = min(d, maxBackoff*s.cfg.RetryDelay)
	if half := int64(d / 2); half > 0 {
		d -= time.Duration(mrand.Int64N(half + 1))
	}
	return d
}

// retry calls try until it returns nil or a non-transient error, at most
// Config.Attempts times (busy replies aside, see Config.Attempts), with growing pauses
// (pause), while ctx lasts. try sees whether an earlier try of a write may have been
// applied (write says the operation writes). A transient error after the last try
// becomes RetriesExhausted wrapping a Connection error; any other error from try that
// is not a *dcsync.Error is mapped by serverError.
func (s *Store) retry(ctx context.Context, op string, write bool, try func(a *attempt) error) error {
	// Close waits for this; retry never nests, so the read lock is never taken twice.
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return driver.Errorf(dcsync.Connection, op, "the store is closed")
	}
	var a attempt
	var last error
	start := time.Now()
	busyBudget := time.Duration(s.cfg.Attempts) * s.cfg.Timeout
	failures, busies := 0, 0
	for a.n = 1; ; {
		if failures > 0 {
			t := time.NewTimer(s.pause(failures))
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if err := ctx.Err(); err != nil {
			if last != nil {
				return &dcsync.Error{Code: dcsync.Connection, Op: op,
					Msg: fmt.Sprintf("gave up after %d tries and %d busy replies (in doubt: %t): %v", a.n-1, busies, a.inDoubt, last), Err: err}
			}
			return driver.Errorf(dcsync.Connection, op, "%w", err)
		}
		err := try(&a)
		if err == nil {
			return nil
		}
		if !transient(err) {
			return s.serverError(op, err)
		}
		if write && !surelyNotApplied(err) {
			a.inDoubt = true
		}
		last = err
		failures++
		if busy(err) {
			busies++
			s.log.Debug("aerospike: busy; retrying", "op", op, "busy", busies, "err", err)
			if time.Since(start) < busyBudget {
				continue
			}
		} else {
			s.log.Debug("aerospike: retrying", "op", op, "try", a.n, "in_doubt", a.inDoubt, "err", err)
			if a.n++; a.n <= s.cfg.Attempts {
				continue
			}
		}
		break
	}
	cause := driver.Errorf(dcsync.Connection, op, "%w", last)
	msg := fmt.Sprintf("%d tries and %d busy replies in %v failed", a.n-1, busies, time.Since(start).Round(time.Millisecond))
	if a.inDoubt {
		msg += "; the last write's outcome is unknown"
	}
	return &dcsync.Error{Code: dcsync.RetriesExhausted, Op: op, Msg: msg, Err: cause}
}

// intOf returns the integer in a bin value, or the last integer of an operate's
// per-op results for one bin.
func intOf(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case as.OpResults:
		for i := len(x) - 1; i >= 0; i-- {
			if n, ok := intOf(x[i]); ok {
				return n, true
			}
		}
	case []any:
		for i := len(x) - 1; i >= 0; i-- {
			if n, ok := intOf(x[i]); ok {
				return n, true
			}
		}
	}
	return 0, false
}

func stringOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case as.OpResults:
		for i := len(x) - 1; i >= 0; i-- {
			if s := stringOf(x[i]); s != "" {
				return s
			}
		}
	}
	return ""
}
