// Package hbase is dcsync's HBase store, on the native client in internal/hbaserpc. Its
// rows are byte-compatible with the Java lock and latch libraries (PhonePe DLM and
// DistributedLatch), so a Java service and a Go service see the same locks and the
// same counts. Tables are created on first use (the lock table by the first lock call,
// the latch table by the first latch call) with the Java schema.
//
// Registers (driver.RegisterStore: the election's leader record, the semaphore's and
// read-write lock's counts) are rows of the lock table, Salt("R#" + IdentityKey(key)),
// beside the F# fence rows, with cells D:G (the generation, 8 bytes; every write is one
// CheckAndMutate on it), D:V (the value) and D:W (the id of the write that stored the
// generation, which settles an unknown outcome), none with a TTL. Java lock rows start
// DC# or XDC#, so no Java client reads one as a lock, and ListLocks skips them;
// docs/stores/hbase.md, "Registers", has the details.
//
// # Latch layout
//
// Latches live in table D_LTCH_<suffix>, family C (GZ), row prefix + "<client>_<latch>",
// qualifier count_<farm>, value an 8-byte big-endian signed long with a cell TTL. A DC
// latch exists when the caller's count_<farm> cell exists; an XDC latch when any cell of
// family C exists, and its count is the sum of all of them, as a Java reader sums them
// (HBaseLatchStorage.java:128-134: Bytes.toLong of every cell). Every other cell dcsync
// writes into family C therefore holds an 8-byte zero (an op lane: a longer value whose
// first 8 bytes, all Bytes.toLong reads, are zero), which changes no sum:
//
//	C:count_<farm>   the count of a farm                      (Java's cell)
//	C:dcsync_lt:<ttl ms>:<op id>:<IdentityKey(DC, farm, client, latch)>
//	                 the lifetime marker of count_<farm>: written by the same mutation
//	                 that created that cell, so it has the cell's creation timestamp
//	                 and TTL, and the cell's end is the marker's timestamp + <ttl ms>;
//	                 <op id> names the create (or update) that wrote it; the identity key names the
//	                 latch unambiguously (layout.IdentityKey)
//	C:dcsync_xdc     written with the creator's cell by an XDC create, only if absent,
//	                 so that concurrent XDC creates from several farms have one winner
//	C:dcsync_op:<store id>:<n>
//	                 an op lane (latch_op.go): 8 zero bytes then the id of the update
//	                 that wrote it last; every update is a compare-and-set on one, so
//	                 it is applied once whichever region server its attempts reach. Its
//	                 longer value reads as 0 to Java (Bytes.toLong takes the first 8 bytes)
//
// # The latch lifetime rule on HBase
//
// A latch ends TTL after its creation; updates never move that end (the rule every store
// follows, see driver/drivertest). HBase keeps a TTL per cell version, and a VERSIONS=1
// family still holds older versions until a flush: if a newer version expires first,
// the older one reappears (a count that went 3, 2, 1 would read 3 again). So an update
// of a marked cell (AddLatch) is one conditional RowMutations of
//
//   - an Increment whose TTL is the marker's end minus a lower bound of the timestamp
//     HBase gives the new version (HBase stamps an updated counter max(server time,
//     previous version + 1 ms); the server time comes from a clock probe in the same
//     call that read the row, hbaserpc.GetWithClock): the new version ends at the
//     latch's end, or later by at most the update's own latency, never before;
//   - a delete of the versions it read, stamped at their timestamp: no older version,
//     whatever its TTL, can outlive the new one and reappear;
//
// conditional on the marker, which ends exactly at the latch's end: an update arriving
// later is not applied, and AddLatch reports NotFound instead of re-creating the cell
// holding only its delta. An XDC update from a farm without a cell creates it with a
// marker of its own, ending with the latch (the latest end among the row's markers),
// and an XDC update of a latch dcsync created at level XDC adopts every unmarked farm
// cell (a Java update from a farm without a cell creates one with no TTL), so at level
// XDC the creator's cell and every other farm's cell end together. At level DC each
// farm's cell ends by its own marker: DC latches of one name in two farms have
// independent lifetimes. A cell without a marker (a latch a Java client created) is
// updated as the Java library updates it, by an Increment without TTL, and keeps the
// Java lifetime (see below).
//
// # Lock layout
//
// Locks live in a table named by the user, family D (GZ, 1 version), row prefix +
// "DC#<farm>#<client>#<lock>" or "XDC#<client>#<lock>". A Java client holds a lock by
// the cell D:L (value "M") that it writes with check-and-mutate "if D:L is absent"
// (HBaseStore.java:78-82), and releases it by deleting the row (HBaseStore.java:103).
// dcsync takes the lock the same way, so each excludes the other, and adds cells a Java
// client ignores, all at one version (the timestamp the server gives the Put that
// takes the lock) with the lease as their cell TTL:
//
//	D:L  "M"                       the Java marker
//	D:O  owner id                  only this owner refreshes or releases the lock
//	D:E  expiry, epoch ms          8-byte big-endian (HBase does not return cell TTLs)
//	D:F  fencing counter           8-byte big-endian, no TTL, version >= 2^62
//
// Fencing tokens come from the counter D:F of the lock row itself, bumped by an
// Increment in the same atomic check-and-mutate that takes the row ("D:L absent": Put
// L, O, E; Increment D:F): a take that is not applied bumps nothing, and each applied
// take bumps it while the row is free of any other holder, so each acquisition's
// token is larger than every earlier one's, also after a lease lapsed, and the holder
// learns it in the same call. The counter's version is above fenceBase (2^62 ms): a
// delete marker hides only versions at or before its own timestamp, so a Java release
// (a row delete stamped with the server's time) never hides it, and HBase stamps each
// increment max(server time, previous version + 1), so it stays there. A Java client
// ignores the cell. The first acquire of a row (by this layout) puts the counter there,
// starting above the key's counter of the earlier layout, the row Salt("F#" +
// layout.IdentityKey(key)), cell D:F, so tokens keep increasing across the upgrade
// (processes of the earlier layout must not keep acquiring the same keys alongside:
// they bump the old counter only). A key that shares its Java lock row with another
// (layout.AmbiguousLockKey) keeps that earlier layout: its own counter in its own row,
// bumped with a nonce'd Increment once the lock is held, and recorded in
// D:T  (fencing token, 8-byte big-endian) by a check-and-mutate "D:O is ours and D:E
// unchanged", so that keys of one row have counters of their own.
//
// # Timestamps of lock cells, and releases without delete markers
//
// A delete in HBase is a marker that hides every version, present or future, whose
// timestamp is at or before the marker's. The Java release is a row delete stamped
// with the server's time (HBaseStore.java:103), and the Java acquire stamps its Put
// with the Java client's clock (new Put(row, System.currentTimeMillis()),
// HBaseStore.java:81), so a Java acquire that follows a release, from a client whose
// clock is behind the server's (or in the same millisecond), is hidden: the Java client
// believes it holds a lock that everyone else sees free.
//
// dcsync stamps its releases at the version of the cells it owns (read back by the
// acquire, or just before), and writes no marker at all: an acquire's Put is stamped
// by the server, a D:T token and every refresh are written at that same version (a
// refresh with a new TTL), and a release (also the release of a half-taken lock)
// overwrites the holder's cells at that version with empty values, conditional on
// "D:O is ours, D:E and the token unchanged" (the fencing counter is left alone). HBase
// returns the latest write of a cell version, and its check "D:L absent" (dcsync's and
// the Java acquire's) takes an empty D:L as absent, so the lock is free at once. Such a
// release hides nothing written after it, not a Put of the same millisecond (the later
// write of a version wins) nor a Java Put stamped by a clock that is behind the
// server's by less than the time the lock was held (one behind by more is older than
// the emptied cells, and shadowed by them). The empty cells live until the cells they
// replaced would have expired, plus a day (so that those never show through), then
// vanish. dcsync's acquire reads the row back in the same call as its check-and-mutate:
// its cells hidden by a Java release's marker of the same millisecond are seen at once
// and the acquire starts over, so dcsync never reports a lock it cannot be seen to
// hold.
//
// # Ids that share a Java row
//
// The Java layouts join ids without escaping, so client "a_b" with latch "c" and
// client "a" with latch "b_c" are one latch row (layout.AmbiguousHBaseLatchRow), and
// client "a#b" with lock "c" and client "a" with lock "b#c" one lock row
// (layout.AmbiguousLockKey). dcsync accepts such ids. A latch create on an ambiguous
// row, and every latch update, reads the row and refuses with InvalidArgument, writing
// nothing, when a lifetime marker of another (client, name) is there; two creates
// racing on an empty row can both pass, and the next update through either is refused.
// A latch a Java client wrote carries no marker and cannot be told apart. Two lock keys
// that share a row exclude each other (dcsync and Java alike), and each has its own
// fencing counter.
//
// # A mixed Java and Go deployment
//
// Shared: lock rows and D:L (each excludes the other), latch rows and count cells (each
// reads the other's counts; Java's XDC sum ignores dcsync's zero cells). What a Java
// client does that dcsync cannot prevent:
//
//   - Java's release deletes the row unconditionally (HBaseStore.java:103), also a
//     dcsync holder's lock, and its delete, stamped with the server's time, hides any
//     Put stamped at or before it: a Java acquire from a client whose clock is behind
//     the server's (HBaseStore.java:81) right after a Java release is invisible to
//     everyone but that Java client (dcsync's own acquire reads back and retries).
//   - After a dcsync release, a Java Put stamped with a clock behind by more than the
//     time the released lock was held is older than the emptied cells and shadowed by
//     them: that Java client believes it holds a lock others see free.
//   - A Java latch create is an Increment (HBaseLatchStorage.java:80-82): it adds to an
//     existing count.
//   - Java updates send no TTL: HBase carries the cell's TTL forward from each update,
//     so a Java update extends the cell it touches (until dcsync's next update of that
//     cell, which deletes the older versions and ends it with the latch again), and a
//     Java update of a farm without a cell creates one that never expires (until an XDC
//     update by dcsync adopts it, for a latch dcsync created at level XDC).
//   - A latch a Java client created has no marker: dcsync updates it the Java way and
//     cannot check it for row collisions.
//
// InspectLock of a Java-held lock returns Owner "", Token 0 and a zero Expires, which
// means unknown: the Java store records no expiry and HBase returns no cell TTLs.
//
// # Queue writes retried in doubt
//
// A queue write whose outcome is unknown is sent again (by the client, or by the store
// after reading the row back), and its first attempt may still reach the region server
// later, after later writes (a request held in a network or a server queue). Each
// write is safe to land late because of its condition:
//
//   - Offsets (claims and commits): compare-and-set on the exact bytes of the offset
//     cell read before; a claim raises the token and a commit the version, so the bytes
//     never recur and a late attempt finds other bytes and changes nothing: the offset
//     never moves back and no mark is lost. A claim that finds its own token stored
//     reports success with the stored offset; a commit that finds its own value stored
//     returns nil.
//   - Spec (CreateQueue, AddQueueGroup): "spec absent" with the create's op id, then
//     compare-and-set on the exact spec bytes (groups are only added).
//   - Reservations (Increments of the head counter): a nonce that every retry reuses,
//     so HBase applies each once; a reservation answered after a retry is abandoned,
//     its seqs left as holes that consumers abort.
//   - Dedup claims and placements: compare-and-set on the id's cell (absent, or the
//     exact value read); every value names the call's random token, and a call that
//     finds its own earlier value again (a late placement) takes it back. An id whose
//     cell expired may get a late claim of a finished call: another append takes it
//     over after 5 s.
//   - Events (plain Puts, read back): the seq is this append's alone (its reservation),
//     so every attempt writes the same bytes; a tombstone wins over an event in reads,
//     whatever the order they land in, and the outcome is read back after the write.
//     A Put landing after a trim re-creates the cell below the Floor, where nothing
//     reads it.
//   - Tombstones (AbortQueueSeq, unused seqs): "no event cell at the seq": refused once
//     the event is written, also after it was trimmed: a trim replaces an event's cell
//     by a one-byte mark that lives as long as the queue's dedup window, never deletes
//     it, so the condition cannot hold again while an append of the event's id could
//     still be taken over (a tombstone there would make that append store the event
//     again). After the window, a late tombstone below the Floor is read by nobody.
//   - Trims: the Floor by compare-and-set on the trim guard (q:r, which every Floor
//     raise and every rewind pin replaces by a fresh random value, which a queue
//     created again under the name cannot hold: queue_trim.go), how far events are
//     trimmed by compare-and-set on its exact bytes (it only grows) and on that q:r;
//     the marks replacing events below the Floor are the same bytes, each conditioned
//     on its event cell present and stamped with the newest timestamp the trim read
//     (older than any cell of a queue created again).
//
// # Failures
//
// Every operation validates its input before any I/O. Reads, Puts and Increments are
// retried by the client (Increments carry a nonce, so a retry reaching the same region
// server is not applied twice; after a clean region move the new server does not know
// the nonce, which is why latch updates are compare-and-sets on an op lane and are not
// resent blindly; an update of a Java-created latch cell, which has no lane, is sent
// once and reports an unknown outcome as Connection). A check-and-mutate whose outcome is unknown is
// resolved by reading the row back, and every operation recognises its own earlier
// attempt in what it reads, also one that reached the server after the read-back: an
// acquire its owner id, a release the row gone while its lease was live, a create its
// marker's op id.
package hbase

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// Defaults of Config.
const (
	// DefaultLockTable is the lock table's name when Config.LockTable is empty.
	DefaultLockTable = "dlm_locks"
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
// its fencing counter in the earlier layout: still used by keys that share a Java lock
// row with another (layout.AmbiguousLockKey), and read once by the first acquire of any
// other row, whose counter now lives in the lock row (D:F) and starts above it.
const FencePrefix = "F#"

// maxTries bounds the rounds of an operation that must start over: an acquire that found
// the lock freed under it, a write whose outcome was unknown and turned out not applied.
const maxTries = 5

// Config configures a Store. Every field is optional.
type Config struct {
	// LockTable is the lock table's name, "table" or "namespace:table" (default
	// "dlm_locks", the name the DLM docs use). Java services sharing locks with dcsync must use the same table.
	LockTable string
	// LatchTableSuffix names the latch table D_LTCH_<suffix> (default
	// "distributed_latch", the Java default).
	LatchTableSuffix string
	// QueueTable is the queue table's name (default "dcsync_queue",
	// DefaultQueueTable), created by the first queue call.
	QueueTable string
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
	CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error)
	GetWithClock(ctx context.Context, table string, row, probeFamily []byte, cols ...hbaserpc.Column) ([]hbaserpc.Cell, int64, error)
	MultiMutate(ctx context.Context, table string, actions []hbaserpc.Action) ([]hbaserpc.ActionResult, error)
}

// Store is a driver.Store on an HBase cluster. It is safe for concurrent use.
type Store struct {
	client     *hbaserpc.Client
	db         ops
	owned      bool
	lockTable  string
	latchTable string
	locks      lazyTable // the lock table, created on first use
	latches    lazyTable // the latch table, created on first use
	qstate     *queueState
	held       heldLocks    // the locks this store holds, as its acquires and refreshes left them
	moved      movedRows    // lock rows seen with their fencing counter above fenceBase (lock_move.go)
	latchMem   knownLatches // the DC latch cells this store updated (latch_known.go)
	log        *slog.Logger
	closed     atomic.Bool
	closeOnce  sync.Once
	done       chan struct{} // closed by Close
}

// lazyTable is a table the store creates (when absent) the first time it is used.
type lazyTable struct {
	spec  hbaserpc.TableSpec
	ready atomic.Bool
	sem   chan struct{} // capacity 1: one creator at a time
}

func newLazyTable(spec hbaserpc.TableSpec) lazyTable {
	return lazyTable{spec: spec, sem: make(chan struct{}, 1)}
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.CloseNotifier = (*Store)(nil)
)

// New returns a store on an already-connected client of this module's internal HBase
// client package, so only code inside the module can call it; applications use Open (or
// OpenURL), which dial the cluster themselves. It creates no table: the lock table is created, when absent, by the first
// lock call, and the latch table by the first latch call (as the Java lock store
// creates its table in initialize(), HBaseStore.java:52-71, and the Java latch creates
// its own on the first latch create, HBaseLatchStorage.java:77), with the Java
// libraries' schema (lock: family D, COMPRESSION GZ, VERSIONS 1; latch: family C,
// COMPRESSION GZ; both pre-split on the 256 one-byte prefixes 0x00..0xFF); that call
// waits until every region of the table is online. Each table is created at most once
// per store, also under concurrent calls, and several processes may create it at once.
// A table that cannot be created fails that call with a TableCreation error (the next
// call tries again); an unreachable cluster with a Connection error. Close does not
// close client.
func New(ctx context.Context, client *hbaserpc.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, "hbase.New", "client is nil")
	}
	return newStore(client, false, cfg), nil
}

func newStore(client *hbaserpc.Client, owned bool, cfg Config) *Store {
	if cfg.LockTable == "" {
		cfg.LockTable = DefaultLockTable
	}
	if cfg.LatchTableSuffix == "" {
		cfg.LatchTableSuffix = DefaultLatchTableSuffix
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	latchTable := layout.HBaseLatchTable(cfg.LatchTableSuffix)
	s := &Store{
		client:     client,
		db:         client,
		owned:      owned,
		lockTable:  cfg.LockTable,
		latchTable: latchTable,
		locks: newLazyTable(hbaserpc.TableSpec{
			Name:      cfg.LockTable,
			Families:  []hbaserpc.FamilySpec{{Name: layout.HBaseLockFamily, Compression: "GZ", MaxVersions: 1}},
			SplitKeys: layout.SplitKeys(),
		}),
		latches: newLazyTable(hbaserpc.TableSpec{
			Name:      latchTable,
			Families:  []hbaserpc.FamilySpec{{Name: layout.HBaseLatchFamily, Compression: "GZ"}},
			SplitKeys: layout.SplitKeys(),
		}),
		log:  cfg.Logger,
		done: make(chan struct{}),
	}
	setQueueTable(s, cfg.QueueTable)
	return s
}

// ready makes sure t exists and is online, creating it on the first call.
func (s *Store) ready(ctx context.Context, op string, t *lazyTable) error {
	if t.ready.Load() {
		return nil
	}
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return driver.Errorf(dcsync.Connection, op, "waiting for table %s: %w", t.spec.Name, ctx.Err())
	}
	defer func() { <-t.sem }()
	if t.ready.Load() {
		return nil
	}
	if err := s.ensureTable(ctx, op, t.spec); err != nil {
		return err
	}
	t.ready.Store(true)
	return nil
}

// OpenURL dials the cluster named by u and returns a store that owns its client (Close
// closes it), as Open does with Options. The form is
//
//	hbase://ZKHOST:PORT[,ZKHOST2:PORT...]?lock_table=T&latch_table_suffix=S&queue_table=Q&zk_root=/hbase&open_timeout=5s
//
// where the host part is the ZooKeeper quorum and every query parameter is optional
// (see Config; zk_root is HBase's root znode, default /hbase; open_timeout bounds
// reaching the cluster, as Options.OpenTimeout: by default only ctx does, and a quorum
// where no server accepts a connection fails at once). Unknown parameters are an
// InvalidArgument error.
//
// For a secure cluster (docs/secure-clusters.md, docs/stores/hbase.md), Kerberos:
// principal=NAME@REALM&keytab=/path (or kerberos=true alone: the credential cache,
// $KRB5CCNAME), ccache=/path, krb5_conf=/path, server_principal=hbase/_HOST@REALM, and
// for a ZooKeeper that requires SASL zk_sasl=true and zk_server_principal=zookeeper/_HOST
// (see Kerberos); TLS: tls=true, tls_ca=/path, tls_cert=/path&tls_key=/path, tls_name=NAME.
// No secret goes in the URL: user information is refused.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	const op = "hbase.OpenURL"
	if u == nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "nil URL")
	}
	if u.Scheme != "hbase" {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "scheme %q is not hbase", u.Scheme)
	}
	if u.Host == "" {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "no ZooKeeper quorum in %q", u.Redacted())
	}
	if u.Path != "" && u.Path != "/" {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "unexpected path %q in %q", u.Path, u.Redacted())
	}
	var cfg Config
	var openTimeout time.Duration
	rpcCfg := hbaserpc.Config{ZKQuorum: u.Host}
	if u.User != nil {
		return nil, driver.Errorf(dcsync.InvalidArgument, op, "user information in %q: HBase takes no user or password in the URL; a Kerberos identity goes in principal= and keytab=/path (docs/secure-clusters.md)", u.Redacted())
	}
	var err error
	if rpcCfg.Kerberos, rpcCfg.TLS, err = parseSecurity(op, u.Query()); err != nil {
		return nil, err
	}
	for k, vs := range u.Query() {
		v := ""
		if len(vs) > 0 {
			v = vs[len(vs)-1]
		}
		if securityParams[k] {
			continue
		}
		switch k {
		case "lock_table":
			cfg.LockTable = v
		case "latch_table_suffix":
			cfg.LatchTableSuffix = v
		case "queue_table":
			cfg.QueueTable = v
		case "zk_root":
			rpcCfg.ZKRoot = v
		case "open_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, driver.Errorf(dcsync.InvalidArgument, op, "open_timeout %q is not a positive duration", v)
			}
			openTimeout = d
		default:
			return nil, driver.Errorf(dcsync.InvalidArgument, op, "unknown parameter %q (want lock_table, latch_table_suffix, queue_table, zk_root, open_timeout; security: kerberos, principal, keytab, ccache, krb5_conf, server_principal, zk_sasl, zk_server_principal, tls, tls_ca, tls_cert, tls_key, tls_name)", k)
		}
	}
	if err := checkNames(op, strings.Split(u.Host, ","), cfg, func(p string) string {
		if p == "quorum" {
			return "ZooKeeper server"
		}
		return p
	}); err != nil {
		return nil, err
	}
	client, err := dialWithin(ctx, op, openTimeout, rpcCfg)
	if err != nil {
		return nil, err
	}
	return newStore(client, true, cfg), nil
}

// Close releases the store. It closes the client only when Open or OpenURL dialed it. Locks and
// latches it wrote stay. Calls after Close fail with a Connection error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.done)
		if s.owned {
			s.client.Close()
		}
	})
	return nil
}

// Done returns a channel that Close closes: latch Waits on this store end at once when
// it closes.
func (s *Store) Done() <-chan struct{} { return s.done }

// LockTable returns the lock table's name.
func (s *Store) LockTable() string { return s.lockTable }

// LatchTable returns the latch table's name, D_LTCH_<suffix>.
func (s *Store) LatchTable() string { return s.latchTable }

func (s *Store) check(op string) error {
	if s.closed.Load() {
		return driver.Errorf(dcsync.Connection, op, "store is closed")
	}
	return nil
}

// ensureTable creates spec's table if it does not exist and waits until it is online.
func (s *Store) ensureTable(ctx context.Context, op string, spec hbaserpc.TableSpec) error {
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
	return s.waitOnline(ctx, op, spec.Name)
}

// tableErr keeps a Connection error (the cluster is unreachable or ctx ended) and makes
// anything else a TableCreation error.
func tableErr(op, table, doing string, err error) error {
	if c := dcsync.CodeOf(err); c == dcsync.Connection || c == dcsync.Unauthenticated {
		return driver.Wrap(err, dcsync.Connection, op)
	}
	return &dcsync.Error{Code: dcsync.TableCreation, Op: op, Msg: doing + " table " + table, Err: err}
}

// waitOnline polls hbase:meta until table's regions cover the whole key space and each
// is open on a server (a table another process is still creating), or ctx ends.
func (s *Store) waitOnline(ctx context.Context, op, table string) error {
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
			return driver.Errorf(dcsync.TableCreation, op, "table %s is not online: %w", table, ctx.Err())
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
		return 0, driver.Errorf(dcsync.Internal, op, "cell %s:%s of row %q: %v", c.Family, c.Qualifier, c.Row, err)
	}
	return v, nil
}

func wrap(err error, op string) error { return driver.Wrap(err, dcsync.Internal, op) }

// ctxErr returns ctx's error as a Connection error when ctx has ended.
func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return driver.Errorf(dcsync.Connection, op, "%w", err)
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
