// Package aerospike is dcsync's Aerospike store, on the official Go client
// (github.com/aerospike/aerospike-client-go/v8). Its records are byte-compatible with the
// Java lock and latch libraries, so a Java service and a Go service see the same locks
// and the same counts:
//
//   - latch: set D_LTCH#<suffix>, string user key D_LTCH#<client>#<latch>, integer bin
//     count#<farm>; an XDC read sums every count#* bin of the record.
//   - lock: set DC#<farm>#<suffix> or XDC#<suffix>, string user key <client>#<lock>,
//     bins <farm>##data = 1 and <farm>##uat = epoch ms, taken by a put that expects
//     generation 0, with the lease as the record's TTL.
//
// dcsync adds bins a Java client ignores: "dcsync_ops" on a latch record (a key-ordered
// map of the ids of recent updates, so an update whose first attempt was in doubt is
// never applied twice), and "dcsync_owner" and "dcsync_token" on a lock record (so only
// the owner refreshes or releases it, and every acquisition carries a fencing token).
// Fencing tokens come from a never-expiring counter record in set F#<lock set> (same
// user key as the lock), bin "fence"; no Java set name starts with "F#".
//
// Every operation is retried on network errors and timeouts (Config.Attempts tries,
// Config.RetryDelay apart), and every write is written so that a retry after an
// in-doubt attempt is safe.
package aerospike

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/layout"
)

// Defaults of Config.
const (
	DefaultLatchSetSuffix = "distributed_latch"
	DefaultLockSetSuffix  = "dlm"
	DefaultAttempts       = 5
	DefaultRetryDelay     = 10 * time.Millisecond
	DefaultTimeout        = time.Second
	DefaultOpIDsKept      = 64
)

// Bin and set names dcsync adds to the Java layout. All bin names fit Aerospike's
// 15-byte limit.
const (
	// OpsBin is the latch record's map of recent update ids (key-ordered; keys are
	// time-prefixed ids, values 1).
	OpsBin = "dcsync_ops"
	// OwnerBin is the lock record's owner id (a string).
	OwnerBin = "dcsync_owner"
	// TokenBin is the lock record's fencing token (an integer).
	TokenBin = "dcsync_token"
	// LeaseBin is the lock record's lease length in ms (an integer).
	LeaseBin = "dcsync_lease"
	// FenceBin is the fence record's counter (an integer).
	FenceBin = "fence"
	// FenceSetPrefix is prepended to a lock set's name to name its fence set.
	FenceSetPrefix = "F#"
)

// maxOpIDsKept bounds Config.OpIDsKept, keeping latch records small.
const maxOpIDsKept = 4096

// Config configures a Store. Only Namespace is required.
type Config struct {
	// Namespace holds every record; it must exist on the cluster.
	Namespace string
	// LatchSetSuffix names the latch set D_LTCH#<suffix> (default "distributed_latch",
	// the Java default).
	LatchSetSuffix string
	// LockSetSuffix names the lock sets DC#<farm>#<suffix> and XDC#<suffix> (default
	// "dlm").
	LockSetSuffix string
	// Attempts is the number of tries per operation (default 5, the Java default).
	Attempts int
	// RetryDelay is the pause between tries (default 10ms).
	RetryDelay time.Duration
	// Timeout bounds each try: the client's socket and total timeout (default 1s).
	Timeout time.Duration
	// OpIDsKept is how many recent update ids a latch record remembers (default 64).
	// A retried update is recognised as long as fewer than this many later updates of
	// the same record land between its in-doubt attempt and its retry.
	OpIDsKept int
	// Logger receives retries and in-doubt outcomes (default: discarded).
	Logger *slog.Logger
}

// Store is a dcsync.Store on an Aerospike cluster. It is safe for concurrent use.
type Store struct {
	client   *as.Client
	owned    bool
	cfg      Config
	latchSet string
	log      *slog.Logger

	// mu is held shared by every operation and exclusively by Close, so that Close
	// waits for operations in flight before it closes an owned client.
	mu     sync.RWMutex
	closed bool
}

var _ dcsync.Store = (*Store)(nil)

func invalid(format string, args ...any) error {
	return dcsync.Errorf(dcsync.InvalidArgument, "aerospike.New", format, args...)
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
	return &Store{client: client, owned: owned, cfg: cfg, latchSet: latchSet, log: log}, nil
}

// OpenURL dials the cluster named by u and returns a store that owns the client: Close
// closes it. The URL is
//
//	aerospike://HOST:PORT/NAMESPACE?latch_set_suffix=..&lock_set_suffix=..&attempts=..&timeout=..
//
// where PORT defaults to 3000, timeout is a Go duration ("500ms") and every query
// parameter is optional. A bad URL is InvalidArgument; a cluster that cannot be reached
// is Connection.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	const op = "aerospike.OpenURL"
	if u == nil || !strings.EqualFold(u.Scheme, "aerospike") {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "URL %v: scheme must be aerospike", u)
	}
	host, portStr := u.Hostname(), u.Port()
	if host == "" {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "URL %v names no host", u)
	}
	port := 3000
	if portStr != "" {
		p, err := strconv.Atoi(portStr)
		if err != nil || p <= 0 || p > 65535 {
			return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "URL %v: bad port %q", u, portStr)
		}
		port = p
	}
	cfg := Config{Namespace: strings.Trim(u.Path, "/")}
	q := u.Query()
	for name := range q {
		switch name {
		case "latch_set_suffix", "lock_set_suffix", "attempts", "timeout", "retry_delay", "op_ids_kept":
		default:
			return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "URL %v: unknown parameter %q", u, name)
		}
	}
	cfg.LatchSetSuffix = q.Get("latch_set_suffix")
	cfg.LockSetSuffix = q.Get("lock_set_suffix")
	for _, p := range []struct {
		name string
		dst  *int
	}{{"attempts", &cfg.Attempts}, {"op_ids_kept", &cfg.OpIDsKept}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "URL %v: %s %q is not a positive integer", u, p.name, v)
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
				return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "URL %v: %s %q is not a positive duration", u, p.name, v)
			}
			*p.dst = d
		}
	}
	// Validate everything before dialling.
	if _, err := newStore(nil, false, cfg); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, dcsync.Errorf(dcsync.Connection, op, "dial %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	policy := as.NewClientPolicy()
	policy.Timeout = 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		policy.Timeout = max(min(policy.Timeout, time.Until(dl)), time.Millisecond)
	}
	client, aerr := as.NewClientWithPolicy(policy, host, port)
	if aerr != nil {
		return nil, dcsync.Errorf(dcsync.Connection, op, "dial %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), aerr)
	}
	return newStore(client, true, cfg)
}

// Close closes the client if the store dialled it (OpenURL); a client passed to New is
// left open. Locks and latches stay. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		if s.owned {
			s.client.Close()
		}
	}
	return nil
}

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
		return dcsync.Errorf(dcsync.InvalidArgument, "aerospike.Validate",
			"fence set name %q is longer than %d bytes", fence, layout.MaxSetName)
	}
	return nil
}

func (s *Store) latchKey(k dcsync.Key) (*as.Key, error) {
	key, err := as.NewKey(s.cfg.Namespace, s.latchSet, layout.AerospikeLatchKey(k.Client, k.Name))
	if err != nil {
		return nil, dcsync.Errorf(dcsync.Internal, "aerospike.Key", "latch key: %w", err)
	}
	return key, nil
}

func (s *Store) lockKeys(k dcsync.Key) (lock, fence *as.Key, err error) {
	set := s.lockSet(k)
	user := layout.AerospikeLockKey(k.Client, k.Name)
	lk, aerr := as.NewKey(s.cfg.Namespace, set, user)
	if aerr != nil {
		return nil, nil, dcsync.Errorf(dcsync.Internal, "aerospike.Key", "lock key: %w", aerr)
	}
	fk, aerr := as.NewKey(s.cfg.Namespace, FenceSetPrefix+set, user)
	if aerr != nil {
		return nil, nil, dcsync.Errorf(dcsync.Internal, "aerospike.Key", "fence key: %w", aerr)
	}
	return lk, fk, nil
}

// ttlSeconds rounds ttl up to whole seconds, as Aerospike keeps TTLs.
func ttlSeconds(ttl time.Duration) uint32 {
	return uint32((ttl + time.Second - 1) / time.Second)
}

// expires converts a record's remaining TTL to an absolute time (zero: never).
func expires(now time.Time, exp uint32) time.Time {
	if exp == 0 || exp >= as.TTLDontUpdate {
		return time.Time{}
	}
	return now.Add(time.Duration(exp) * time.Second)
}

// newOpID returns a fresh update id: 16 hex digits of the wall clock in ns, then 16
// random hex digits, so ids sort by time (trimming keeps the newest) and never repeat.
func newOpID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixNano()))
	_, _ = rand.Read(b[8:])
	return hex.EncodeToString(b[:])
}

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
	return as.ExpEq(as.ExpStringBin(OwnerBin), as.ExpStringVal(owner))
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

// surelyNotApplied reports whether a failed write certainly did not reach the record:
// the client never sent it, or the server refused it.
func surelyNotApplied(err error) bool {
	var ae *as.AerospikeError
	if errors.As(err, &ae) && ae.InDoubt {
		return false
	}
	rc, _ := resultCode(err)
	switch rc {
	case types.KEY_BUSY, types.DEVICE_OVERLOAD, types.PARTITION_UNAVAILABLE, types.SERVER_MEM_ERROR,
		types.XDR_KEY_BUSY, types.NO_AVAILABLE_CONNECTIONS_TO_NODE, types.INVALID_NODE_ERROR, types.MAX_ERROR_RATE:
		return true
	}
	return false
}

// serverError maps an Aerospike error that is not one of an operation's expected
// outcomes.
func serverError(op string, err error) error {
	var de *dcsync.Error
	if errors.As(err, &de) {
		return err
	}
	if rc, ok := resultCode(err); ok {
		if transient(err) {
			return dcsync.Errorf(dcsync.Connection, op, "result code %d (%v): %w", int(rc), rc, err)
		}
		return dcsync.Errorf(dcsync.Internal, op, "result code %d (%v): %w", int(rc), rc, err)
	}
	return dcsync.Errorf(dcsync.Internal, op, "%w", err)
}

// attempt is the state of one logical operation across its tries.
type attempt struct {
	// inDoubt is true once a failed try of a write may have been applied.
	inDoubt bool
	// n is the number of the current try, from 1.
	n int
}

// retry calls try until it returns nil or a non-transient error, at most
// Config.Attempts times, Config.RetryDelay apart, while ctx lasts. try sees whether an
// earlier try of a write may have been applied (write says the operation writes). A
// transient error after the last try becomes RetriesExhausted wrapping a Connection
// error; any other error from try that is not a *dcsync.Error becomes Internal.
func (s *Store) retry(ctx context.Context, op string, write bool, try func(a *attempt) error) error {
	// Close waits for this; retry never nests, so the read lock is never taken twice.
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return dcsync.Errorf(dcsync.Connection, op, "the store is closed")
	}
	var a attempt
	var last error
	for a.n = 1; a.n <= s.cfg.Attempts; a.n++ {
		if a.n > 1 {
			t := time.NewTimer(s.cfg.RetryDelay)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if err := ctx.Err(); err != nil {
			if last != nil {
				return &dcsync.Error{Code: dcsync.Connection, Op: op,
					Msg: fmt.Sprintf("gave up after %d tries (in doubt: %t): %v", a.n-1, a.inDoubt, last), Err: err}
			}
			return dcsync.Errorf(dcsync.Connection, op, "%w", err)
		}
		err := try(&a)
		if err == nil {
			return nil
		}
		if !transient(err) {
			return serverError(op, err)
		}
		if write && !surelyNotApplied(err) {
			a.inDoubt = true
		}
		last = err
		s.log.Debug("aerospike: retrying", "op", op, "try", a.n, "in_doubt", a.inDoubt, "err", err)
	}
	cause := dcsync.Errorf(dcsync.Connection, op, "%w", last)
	msg := fmt.Sprintf("%d tries failed", s.cfg.Attempts)
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
