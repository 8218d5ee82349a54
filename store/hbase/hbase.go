// Package hbase is dcsync's HBase store, on the native client in internal/hbaserpc. Its
// rows are byte-compatible with the Java lock and latch libraries, so a Java service and
// a Go service see the same locks and the same counts.
//
// Latches live in table D_LTCH_<suffix>, family C (GZ), row prefix + "<client>_<latch>",
// qualifier count_<farm>, value an 8-byte big-endian signed long with a cell TTL. A DC
// latch exists when the caller's count_<farm> cell exists; an XDC latch when any cell of
// family C exists, and its count is the sum of all of them (as a Java reader sums them).
// The only other cell dcsync writes into family C is C:dcsync_xdc, an 8-byte zero that
// an XDC create writes with its count cell (so concurrent XDC creates from several farms
// have one winner); it changes no sum.
//
// Locks live in a table named by the user, family D (GZ, 1 version), row prefix +
// "DC#<farm>#<client>#<lock>" or "XDC#<client>#<lock>". A Java client holds a lock by
// the cell D:L (value "M") that it wrote with check-and-mutate "if D:L is absent", and
// releases it by deleting the row. dcsync takes the lock the same way, so each excludes
// the other, and adds cells a Java client ignores, all with the lease as their cell TTL:
//
//	D:L  "M"                       the Java marker
//	D:O  owner id                  only this owner refreshes or releases the lock
//	D:E  expiry, epoch ms          8-byte big-endian (HBase does not return cell TTLs)
//	D:T  fencing token             8-byte big-endian
//
// Fencing tokens come from a counter that never expires, in row Salt("F#" + logical lock
// key), cell D:F, bumped with HBase's nonce'd Increment. No Java lock key starts with
// "F#", and a Java release (a row delete) cannot touch it. The counter is bumped by the
// holder after its if-absent acquire succeeded and before the token is recorded with a
// check-and-mutate on D:O, so every successful acquisition of a key gets a larger token
// than the one before, also after a lease lapsed.
//
// A release is a check-and-mutate "D:O == owner" that deletes the lock row, as the Java
// release deletes it. HBase stamps the delete marker with the current millisecond and it
// hides every cell of that row written in the same millisecond: an acquire that lands
// there is reported applied yet invisible. AcquireLock notices (its step 3 finds its
// owner cell gone) and starts over, so dcsync never reports such a lock as held; a Java
// acquire in that millisecond (after a Java or a dcsync release) is hidden the same way,
// and only the Java library can guard against that.
//
// Every operation validates its input before any I/O. Reads, Puts and Increments are
// retried by the client (Increments carry a nonce, so a retry is never applied twice).
// A check-and-mutate whose outcome is unknown is resolved by reading the row back; see
// each method for how.
package hbase

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// Defaults of Config.
const (
	// DefaultLockTable is the lock table's name when Config.LockTable is empty.
	DefaultLockTable = "dcsync_locks"
	// DefaultLatchTableSuffix names the latch table D_LTCH_distributed_latch, the Java
	// library's default.
	DefaultLatchTableSuffix = "distributed_latch"
)

// Families, qualifiers and values of the layout.
var (
	famLock    = []byte(layout.HBaseLockFamily)    // D
	qualLock   = []byte(layout.HBaseLockQualifier) // L
	qualOwner  = []byte("O")
	qualExpiry = []byte("E")
	qualToken  = []byte("T")
	qualFence  = []byte("F")
	lockMarker = []byte("M")                     // what the Java store writes into D:L
	famLatch   = []byte(layout.HBaseLatchFamily) // C
	// qualXDCCreated is written (an 8-byte zero) by an XDC create, atomically with the
	// creator's count cell and only when absent, so that concurrent XDC creates from
	// several farms have exactly one winner.
	qualXDCCreated = []byte("dcsync_xdc")
)

// FencePrefix is prepended to a lock's logical key (before salting) to name the row of
// its fencing counter.
const FencePrefix = "F#"

// maxTries bounds the rounds of an operation that must start over: an acquire that found
// the lock freed under it, a write whose outcome was unknown and turned out not applied.
const maxTries = 5

// Config configures a Store. Every field is optional.
type Config struct {
	// LockTable is the lock table's name, "table" or "namespace:table" (default
	// "dcsync_locks"). Java services sharing locks with dcsync must use the same table.
	LockTable string
	// LatchTableSuffix names the latch table D_LTCH_<suffix> (default
	// "distributed_latch", the Java default).
	LatchTableSuffix string
	// Logger receives in-doubt outcomes and their resolution (default: discarded).
	Logger *slog.Logger
}

// ops is the part of *hbaserpc.Client the data path uses; tests wrap it to inject
// faults.
type ops interface {
	Get(ctx context.Context, table string, row []byte, cols ...hbaserpc.Column) ([]hbaserpc.Cell, error)
	MultiGet(ctx context.Context, table string, gets []hbaserpc.Get) ([][]hbaserpc.Cell, error)
	Increment(ctx context.Context, table string, inc *hbaserpc.Increment) ([]hbaserpc.Cell, error)
	CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error)
}

// Store is a dcsync.Store on an HBase cluster. It is safe for concurrent use.
type Store struct {
	client     *hbaserpc.Client
	db         ops
	owned      bool
	lockTable  string
	latchTable string
	log        *slog.Logger
	closed     atomic.Bool
	closeOnce  sync.Once
}

var _ dcsync.Store = (*Store)(nil)

// New returns a store on an already-connected client, as the Java libraries take a
// connection. It creates the lock table and the latch table when they are absent, with
// the Java libraries' schema (lock: family D, COMPRESSION GZ, VERSIONS 1; latch: family C,
// COMPRESSION GZ; both pre-split on the 256 one-byte prefixes 0x00..0xFF), and waits
// until every region of both tables is online. Several processes may call New at once:
// a table another one created first is fine. A table that cannot be created is a
// TableCreation error; an unreachable cluster a Connection error. Close does not close
// client.
func New(ctx context.Context, client *hbaserpc.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, "hbase.New", "client is nil")
	}
	return newStore(ctx, client, false, cfg)
}

func newStore(ctx context.Context, client *hbaserpc.Client, owned bool, cfg Config) (*Store, error) {
	if cfg.LockTable == "" {
		cfg.LockTable = DefaultLockTable
	}
	if cfg.LatchTableSuffix == "" {
		cfg.LatchTableSuffix = DefaultLatchTableSuffix
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		client:     client,
		db:         client,
		owned:      owned,
		lockTable:  cfg.LockTable,
		latchTable: layout.HBaseLatchTable(cfg.LatchTableSuffix),
		log:        cfg.Logger,
	}
	if err := s.ensureTable(ctx, hbaserpc.TableSpec{
		Name:      s.lockTable,
		Families:  []hbaserpc.FamilySpec{{Name: layout.HBaseLockFamily, Compression: "GZ", MaxVersions: 1}},
		SplitKeys: layout.SplitKeys(),
	}); err != nil {
		return nil, err
	}
	if err := s.ensureTable(ctx, hbaserpc.TableSpec{
		Name:      s.latchTable,
		Families:  []hbaserpc.FamilySpec{{Name: layout.HBaseLatchFamily, Compression: "GZ"}},
		SplitKeys: layout.SplitKeys(),
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// OpenURL dials the cluster named by u and returns a store that owns its client (Close
// closes it). The form is
//
//	hbase://ZKHOST:PORT[,ZKHOST2:PORT...]?lock_table=T&latch_table_suffix=S&zk_root=/hbase
//
// where the host part is the ZooKeeper quorum and every query parameter is optional
// (see Config; zk_root is HBase's root znode, default /hbase). Unknown parameters are an
// InvalidArgument error.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	const op = "hbase.OpenURL"
	if u == nil {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "nil URL")
	}
	if u.Scheme != "hbase" {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "scheme %q is not hbase", u.Scheme)
	}
	if u.Host == "" {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "no ZooKeeper quorum in %q", u.Redacted())
	}
	if u.Path != "" && u.Path != "/" {
		return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "unexpected path %q in %q", u.Path, u.Redacted())
	}
	var cfg Config
	rpcCfg := hbaserpc.Config{ZKQuorum: u.Host}
	for k, vs := range u.Query() {
		v := ""
		if len(vs) > 0 {
			v = vs[len(vs)-1]
		}
		switch k {
		case "lock_table":
			cfg.LockTable = v
		case "latch_table_suffix":
			cfg.LatchTableSuffix = v
		case "zk_root":
			rpcCfg.ZKRoot = v
		default:
			return nil, dcsync.Errorf(dcsync.InvalidArgument, op, "unknown parameter %q (want lock_table, latch_table_suffix, zk_root)", k)
		}
	}
	client, err := hbaserpc.Dial(ctx, rpcCfg)
	if err != nil {
		return nil, dcsync.Wrap(err, dcsync.Connection, op)
	}
	s, err := newStore(ctx, client, true, cfg)
	if err != nil {
		client.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the store. It closes the client only when OpenURL dialed it. Locks and
// latches it wrote stay. Calls after Close fail with a Connection error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.owned {
			s.client.Close()
		}
	})
	return nil
}

// LockTable returns the lock table's name.
func (s *Store) LockTable() string { return s.lockTable }

// LatchTable returns the latch table's name, D_LTCH_<suffix>.
func (s *Store) LatchTable() string { return s.latchTable }

func (s *Store) check(op string) error {
	if s.closed.Load() {
		return dcsync.Errorf(dcsync.Connection, op, "store is closed")
	}
	return nil
}

// ensureTable creates spec's table if it does not exist and waits until it is online.
func (s *Store) ensureTable(ctx context.Context, spec hbaserpc.TableSpec) error {
	const op = "hbase.New"
	exists, err := s.client.TableExists(ctx, spec.Name)
	if err != nil {
		return tableErr(op, spec.Name, "checking", err)
	}
	if !exists {
		err := s.client.CreateTable(ctx, spec)
		switch {
		case err == nil:
			return nil // CreateTable waited for the table to come online
		case hbaserpc.IsTableExists(err):
			s.log.Debug("hbase: table created concurrently", "table", spec.Name)
		default:
			return tableErr(op, spec.Name, "creating", err)
		}
	}
	return s.waitOnline(ctx, spec.Name)
}

// tableErr keeps a Connection error (the cluster is unreachable or ctx ended) and makes
// anything else a TableCreation error.
func tableErr(op, table, doing string, err error) error {
	if dcsync.CodeOf(err) == dcsync.Connection {
		return dcsync.Wrap(err, dcsync.Connection, op)
	}
	return &dcsync.Error{Code: dcsync.TableCreation, Op: op, Msg: doing + " table " + table, Err: err}
}

// waitOnline polls hbase:meta until table's regions cover the whole key space and each
// is open on a server (a table another process is still creating), or ctx ends.
func (s *Store) waitOnline(ctx context.Context, table string) error {
	const op = "hbase.New"
	delay := 20 * time.Millisecond
	for {
		regions, err := s.client.Regions(ctx, table)
		if err != nil {
			return tableErr(op, table, "locating the regions of", err)
		}
		if online(regions) {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return dcsync.Errorf(dcsync.TableCreation, op, "table %s is not online: %w", table, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// online reports whether regions, in key order, tile the key space and are all served.
func online(regions []hbaserpc.Region) bool {
	if len(regions) == 0 || len(regions[0].StartKey) != 0 || len(regions[len(regions)-1].EndKey) != 0 {
		return false
	}
	for i, r := range regions {
		if r.Server == "" {
			return false
		}
		if i > 0 && string(regions[i-1].EndKey) != string(r.StartKey) {
			return false
		}
	}
	return true
}

// inDoubt reports whether a check-and-mutate error may hide an applied mutation: the
// client says "outcome unknown" with a Connection error. Errors of every other code
// (RetriesExhausted: refused every time; Internal; InvalidArgument) were not applied.
func inDoubt(err error) bool {
	return dcsync.CodeOf(err) == dcsync.Connection
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func decode64(op string, c hbaserpc.Cell) (int64, error) {
	v, err := hbaserpc.Int64(c.Value)
	if err != nil {
		return 0, dcsync.Errorf(dcsync.Internal, op, "cell %s:%s of row %q: %v", c.Family, c.Qualifier, c.Row, err)
	}
	return v, nil
}

func wrap(err error, op string) error { return dcsync.Wrap(err, dcsync.Internal, op) }

// ctxErr returns ctx's error as a Connection error when ctx has ended.
func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return dcsync.Errorf(dcsync.Connection, op, "%w", err)
	}
	return nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
