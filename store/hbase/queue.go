package hbase

// # Queue layout (driver.QueueStore)
//
// The queue lives in its own table (DefaultQueueTable, created on first use by the first
// queue call: family "q", VERSIONS 1, no compression, pre-split into 16 regions on the
// first byte of the row, 0x10..0xF0). Every row starts with a one-byte salt,
// layout.Prefix (the Java libraries' OneByteSimpleHash) of the rest of the key's
// logical part, so queues and partitions spread over the regions. Names are
// length-prefixed (one byte: ids are at most 64 bytes) and partitions are 2-byte
// big-endian, so distinct (queue, partition, ...) never share a row whatever the
// names hold:
//
//	P = salt(L) | L          where L = len(queue) | queue | partition (2 bytes)
//	P | 'h'                  head row of the partition:
//	                           q:h  the reservation counter (8-byte counter): Head
//	                           q:f  Floor (8 bytes), raised by check-and-set
//	                           q:x  the seq below which trimmed events are deleted
//	                           q:r  the trim guard, q:w the pins of rewinds in
//	                                progress (queue_trim.go)
//	P | 'e' | seq (8 bytes)  entry: q:e the event (key, id, payload),
//	                           q:a the tombstone of an aborted seq (wins over q:e)
//	P | 'o' | len(group) | group
//	                         a group's offset: q:t the owner's token (8 bytes),
//	                           q:o token | next | attempts (4) | held (1) | version |
//	                           marks (the rest; the first release's 21-byte cell,
//	                           without version and marks, reads as version 0)
//	salt | len(queue) | queue | 0xFFFF | 's'
//	                         the spec (q:s, JSON)
//	salt | len(queue) | queue | 0xFFFE | 'd' | id
//	                         dedup row of an event id (q:d: partition | seq | writer
//	                           token), cell TTL = the queue's dedup window
//
// The issue sketched "salt | queue | group | partition | seq" for entries; here the
// event partitions are shared by every group (each keeps only an offset row), so the
// group is not in the entry key. The salt covers queue and partition (not the seq), so
// one partition's rows are contiguous: a read is one prefix scan in one region, and the
// head row sits next to its entries. Distinct partitions land on distinct regions at
// random (16 regions; 256 salt values), which spreads a queue's load.
//
// # Appending: reserve, write, check for aborts
//
// AppendQueue reserves seqs with ONE Increment of q:h per partition of the batch (all
// partitions in one MultiMutate; Increments carry a nonce reused by every retry, so a
// retried reservation after a lost reply is not applied twice; a reservation lost for
// good leaves holes the consumer aborts). It then writes every entry with a plain Put
// of q:e and reads the row's q:a back in the same request (MultiMutate's Action.Read:
// one MultiRequest per region server, the Gets in a region action after the Puts'),
// and the consumer's abort is a check-and-mutate "q:e absent: put q:a". HBase orders
// the two on the row: either the abort came first, and the read-back sees q:a (the
// event is appended again at a fresh seq: nobody reads a tombstoned seq), or the Put
// came first, and the abort is refused. So on success each event is stored exactly
// once, and a Put whose reply was lost is simply sent again (it and its read-back are
// idempotent). A batch of plain Puts is one WAL append per region, where conditional
// puts (one RegionAction with a condition per row) cost one each: on the test cluster
// 500 conditional puts took 18 ms, 500 Puts with read-back 7.4 ms.
//
// Large batches (at least 64 events and 16 per partition) check differently, for
// speed: each partition's Puts go in a MultiMutate of their own (all partitions at
// once), and as soon as one returns, ONE Scan of q:a over that partition's seqs of the
// batch replaces its per-row read-backs (500 read-back Gets cost about 2 ms). The
// argument is the same: an abort that came before a Put is visible to the scan, one
// after it was refused. A failed scan is run again; no timing is assumed.
//
// Dedup: an event with an id first claims its dedup row, before any seq is reserved
// for it: "q:d absent" put of a pending value naming the call's random token (cell
// TTL: the dedup window; a claim whose reply was lost recognises its token). Then the
// seqs are reserved and each claim is pointed at its seq (check-and-set from the
// pending value to partition | seq | token), then the entries are written. So appends
// racing for one id never reserve a seq they leave unused. An id pending for another
// call is left for a later round (a call never waits while holding claims of its own:
// no deadlock between calls claiming overlapping ids) and taken over once it has been
// pending for 5 s (its writer died before reserving). An id at (p, seq): the entry
// there decides: an event is a Duplicate; a tombstone (the first writer's seq was
// aborted) lets this append take the id over (check-and-set from that value);
// nothing written yet (the first writer died after placing its claim, or is still
// writing) is written by this append itself at (p, seq) (read back: aborted
// meanwhile is a takeover) and reported Duplicate of that seq; nothing there below
// the partition's Floor was trimmed after delivery: a Duplicate. A producer that dies
// anywhere between its claim and its entry write therefore never loses the event for
// a retry with the same id. (Should the first writer come back and write too, its
// Put overwrites the event at that seq with its own version of the same id.)
//
// # Holes, aborts and trimming
//
// A seq is reserved before it is written: ReadQueue stops before the first reserved seq
// with no entry. AbortQueueSeq writes the tombstone q:a there while q:e is absent.
// TrimQueue raises the Floor (check-and-set, never lowered), then replaces the events'
// cells below it by a one-byte trimmed mark whose cell TTL is the queue's dedup window
// (batched Puts of q:e over the dense seq range, each conditioned on q:e present and
// stamped with the newest timestamp the trim read; see TrimQueue for why not deletes)
// and records how far it went (q:x) so that a trim cut short is finished by the next
// one.
// Tombstones are never deleted: a producer that reserved a seq, was aborted, and
// writes only after the trim must still read q:a back (without it, its write would
// land below the Floor where no one reads it). They are a few bytes per aborted seq.
//
// # Offsets
//
// ClaimQueuePartition and CommitQueueOffset decide on the offset cell q:o as read and
// replace it by a check-and-mutate "q:o holds exactly these bytes" (compare-and-set),
// looping when another claim or commit got in between. A claim writes a higher token
// and keeps the rest; a commit needs the stored token to be its own and the stored
// version below its own. Every write changes the cell's bytes (a claim the token,
// which only grows; a commit the version, which only grows under one token), so bytes
// once replaced never come back: an attempt that lands late, after later writes,
// changes nothing. A commit's first attempt is conditioned on the cell as the store
// last wrote or read it and reads the row back in the same request (one round trip
// while one store owns the partition; a stale guess costs one more). q:t, the token
// alone, is still written by claims for readers of the first release.
//
// # Writes retried in doubt
//
// See the package doc, "Queue writes retried in doubt", for the condition that makes
// each write safe to land late.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// DefaultQueueTable is the queue table's name unless configured otherwise.
const DefaultQueueTable = "dcsync_queue"

// queueRegions is the number of regions the queue table is pre-split into.
const queueRegions = 16

var (
	famQueue    = []byte("q")
	qualHead    = []byte("h")
	qualFloor   = []byte("f")
	qualTrimmed = []byte("x")
	qualEntry   = []byte("e")
	qualAbort   = []byte("a")
	qualSpec    = []byte("s")
	qualDedup   = []byte("d")
	qualOffTok  = []byte("t")
	qualOffset  = []byte("o")
)

// Row kinds after a partition's prefix.
const (
	kindHead   = 'h'
	kindEntry  = 'e'
	kindOffset = 'o'
)

// Entry values (q:e) start with a format byte: an event, or the mark TrimQueue
// leaves in place of a trimmed event (that byte alone).
const (
	entryEvent   = 1
	entryTrimmed = 2
)

// Kinds of a decoded entry row.
const (
	kindEvent = iota + 1
	kindTombstone
	kindTrimmed // an event was here, delivered and trimmed
)

var (
	_ driver.QueueStore = (*Store)(nil)
)

// queueOps is what the queue needs of the client; tests wrap it to inject faults (a
// Store's db is used when it implements it, the client otherwise).
type queueOps interface {
	Get(ctx context.Context, table string, row []byte, cols ...hbaserpc.Column) ([]hbaserpc.Cell, error)
	MultiGet(ctx context.Context, table string, gets []hbaserpc.Get) ([][]hbaserpc.Cell, error)
	CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error)
	CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error)
	MultiMutate(ctx context.Context, table string, actions []hbaserpc.Action) ([]hbaserpc.ActionResult, error)
	ScanFunc(ctx context.Context, table string, s hbaserpc.Scan, fn func(hbaserpc.Row) error) error
}

// queueState is a Store's queue state: its table and the specs it has seen.
type queueState struct {
	table lazyTable
	db    queueOps // nil: the store's db or client

	mu    sync.Mutex
	specs map[string]driver.QueueSpec // queues known to exist (for their dedup window)
	seen  map[string][]byte           // offset row -> its cell as last written or read
	heads sync.Map                    // partition prefix -> highest head read or reserved (queue_reads.go)
}

// queue returns the store's queue state.
func (s *Store) queue() *queueState { return s.qstate }

func newQueueState(table string) *queueState {
	splits := make([][]byte, 0, queueRegions-1)
	for i := 1; i < queueRegions; i++ {
		splits = append(splits, []byte{byte(i * 256 / queueRegions)})
	}
	return &queueState{
		table: newLazyTable(hbaserpc.TableSpec{
			Name:      table,
			Families:  []hbaserpc.FamilySpec{{Name: string(famQueue), MaxVersions: 1}},
			SplitKeys: splits,
		}),
		specs: map[string]driver.QueueSpec{},
	}
}

// setQueueTable makes s use table for its queues (before its first queue call).
func setQueueTable(s *Store, table string) {
	if table == "" {
		table = DefaultQueueTable
	}
	s.qstate = newQueueState(table)
}

// QueueTable returns the queue table's name.
func (s *Store) QueueTable() string { return s.queue().table.spec.Name }

// qready checks the store and makes sure the queue table exists; it returns the table
// name and the client to use.
func (s *Store) qready(ctx context.Context, op string) (string, queueOps, error) {
	if err := s.check(op); err != nil {
		return "", nil, err
	}
	q := s.queue()
	if err := s.ready(ctx, op, &q.table); err != nil {
		return "", nil, err
	}
	db := q.db
	if db == nil {
		if d, ok := s.db.(queueOps); ok {
			db = d
		} else {
			db = s.client
		}
	}
	return q.table.spec.Name, db, nil
}

// Keys.

func appendName(b []byte, s string) []byte {
	b = append(b, byte(len(s)))
	return append(b, s...)
}

func salted(logical []byte) []byte {
	row := make([]byte, 0, 1+len(logical)+16)
	row = append(row, layout.Prefix(logical))
	return append(row, logical...)
}

// partPrefix is P: salt | len(queue) | queue | partition.
func partPrefix(name string, p int) []byte {
	l := binary.BigEndian.AppendUint16(appendName(nil, name), uint16(p))
	return salted(l)
}

func headRow(name string, p int) []byte { return append(partPrefix(name, p), kindHead) }

func entryRow(prefix []byte, seq uint64) []byte {
	r := make([]byte, 0, len(prefix)+9)
	r = append(append(r, prefix...), kindEntry)
	return binary.BigEndian.AppendUint64(r, seq)
}

func offsetRow(name, group string, p int) []byte {
	return appendName(append(partPrefix(name, p), kindOffset), group)
}

func specRow(name string) []byte {
	return salted(append(binary.BigEndian.AppendUint16(appendName(nil, name), 0xFFFF), 's'))
}

func dedupRow(name, id string) []byte {
	l := append(binary.BigEndian.AppendUint16(appendName(nil, name), 0xFFFE), 'd')
	return salted(append(l, id...))
}

// Values.

// storedEntry is an entry row as read.
type storedEntry struct {
	kind    int // kindEvent, kindTombstone or kindTrimmed
	key, id string
	payload []byte
	at      int64
}

func encodeEvent(e driver.QueueEvent) []byte {
	b := make([]byte, 0, 1+4+len(e.Key)+len(e.ID)+len(e.Payload))
	b = append(b, entryEvent)
	b = binary.AppendUvarint(b, uint64(len(e.Key)))
	b = append(b, e.Key...)
	b = binary.AppendUvarint(b, uint64(len(e.ID)))
	b = append(b, e.ID...)
	return append(b, e.Payload...)
}

func decodeEvent(v []byte) (storedEntry, error) {
	if len(v) == 1 && v[0] == entryTrimmed {
		return storedEntry{kind: kindTrimmed}, nil
	}
	if len(v) < 1 || v[0] != entryEvent {
		return storedEntry{}, fmt.Errorf("malformed entry (%d bytes)", len(v))
	}
	e := storedEntry{kind: kindEvent}
	rest := v[1:]
	for _, dst := range []*string{&e.key, &e.id} {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return storedEntry{}, fmt.Errorf("malformed entry")
		}
		*dst = string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
	}
	e.payload = rest
	return e, nil
}

// findEntry decodes an entry row's cells: a tombstone when q:a is there (whatever
// else is), the event (or trimmed mark) of q:e otherwise (ok false: neither, a seq not
// written yet, or an event trimmed by an earlier release, which deleted the cell).
func findEntry(cells []hbaserpc.Cell) (storedEntry, bool, error) {
	if _, ts, ok := cellValue(cells, qualAbort); ok {
		return storedEntry{kind: kindTombstone, at: ts}, true, nil
	}
	if v, ts, ok := cellValue(cells, qualEntry); ok {
		e, err := decodeEvent(v)
		e.at = ts
		return e, true, err
	}
	return storedEntry{}, false, nil
}

// entryCols are the columns of an entry row a reader needs.
var entryCols = []hbaserpc.Column{{Family: famQueue, Qualifier: qualEntry}, {Family: famQueue, Qualifier: qualAbort}}

// abortPut is the tombstone, written with the condition "q:e absent".
func abortPut(row []byte) *hbaserpc.Put {
	return &hbaserpc.Put{Row: row, Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualAbort, Value: []byte{1}}}}
}

func cellValue(cells []hbaserpc.Cell, qual []byte) ([]byte, int64, bool) {
	for _, c := range cells {
		if bytes.Equal(c.Family, famQueue) && bytes.Equal(c.Qualifier, qual) {
			return c.Value, c.Timestamp, true
		}
	}
	return nil, 0, false
}

func cellUint(cells []hbaserpc.Cell, qual []byte) (uint64, error) {
	v, _, ok := cellValue(cells, qual)
	if !ok {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("cell q:%s holds %d bytes, want 8", qual, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func decodeBounds(op string, cells []hbaserpc.Cell) (driver.QueueBounds, error) {
	h, err := cellUint(cells, qualHead)
	if err != nil {
		return driver.QueueBounds{}, driver.Errorf(dcsync.Internal, op, "head row: %v", err)
	}
	f, err := cellUint(cells, qualFloor)
	if err != nil {
		return driver.QueueBounds{}, driver.Errorf(dcsync.Internal, op, "head row: %v", err)
	}
	if int64(h) < 0 {
		return driver.QueueBounds{}, driver.Errorf(dcsync.Internal, op, "head row: negative head")
	}
	return driver.QueueBounds{Head: h, Floor: f}, nil
}

var headCols = []hbaserpc.Column{{Family: famQueue, Qualifier: qualHead}, {Family: famQueue, Qualifier: qualFloor}}

// Spec.

type specDoc struct {
	Name       string   `json:"name"`
	Partitions int      `json:"partitions"`
	Groups     []string `json:"groups"`
	DedupMs    int64    `json:"dedup_ms"`
	CreatedMs  int64    `json:"created_ms,omitempty"`
	// Op names the CreateQueue that wrote the spec, so that a create whose reply was
	// lost recognises its own spec.
	Op string `json:"op,omitempty"`
	// Adders names, per group added by AddQueueGroup, the call that added it, so that
	// a call whose write was in doubt tells its own add (nil) from another's
	// (AlreadyExists). Groups CreateQueue made, and groups added by a release before
	// this field, have none: they read as another's.
	Adders map[string]string `json:"adders,omitempty"`
}

func (d specDoc) spec(cellTS int64) driver.QueueSpec {
	created := d.CreatedMs
	if created == 0 {
		created = cellTS
	}
	return driver.QueueSpec{Name: d.Name, Partitions: d.Partitions, Groups: append([]string(nil), d.Groups...),
		Dedup: time.Duration(d.DedupMs) * time.Millisecond, Created: time.UnixMilli(created)}
}

// randToken returns a random non-zero token.
func randToken() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if t := binary.BigEndian.Uint64(b[:]); t != 0 {
			return t
		}
	}
}

// CreateQueue creates the queue (and the queue table on first use). It returns
// AlreadyExists, changing nothing, when a queue of that name exists. A Delete of the
// name cut short (its deletion mark in the spec cell) is finished first: the queue
// starts empty.
func (s *Store) CreateQueue(ctx context.Context, spec driver.QueueSpec) error {
	const op = "hbase.CreateQueue"
	if err := driver.ValidateQueueSpec(spec); err != nil {
		return err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return err
	}
	doc := specDoc{Name: spec.Name, Partitions: spec.Partitions, Groups: spec.Groups, DedupMs: spec.Dedup.Milliseconds(),
		Op: fmt.Sprintf("%016x", randToken())}
	if spec.Dedup > 0 && doc.DedupMs == 0 {
		doc.DedupMs = 1
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return driver.Errorf(dcsync.Internal, op, "%v", err)
	}
	row := specRow(spec.Name)
	for try := 0; ; try++ {
		ok, _, err := db.CheckAndMutate(ctx, table, row, hbaserpc.IfAbsent(famQueue, qualSpec),
			&hbaserpc.Put{Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualSpec, Value: raw}}})
		if err != nil && (!inDoubt(err) || try >= maxTries) {
			return wrap(err, op)
		}
		if err == nil && ok {
			return nil
		}
		// Refused, or in doubt: whose spec is there?
		got, _, found, rerr := s.readSpec(ctx, db, table, spec.Name)
		if rerr != nil {
			return rerr
		}
		if found && got.Op == doc.Op {
			return nil
		}
		if found {
			return driver.Errorf(dcsync.AlreadyExists, op, "queue %q exists", spec.Name)
		}
		// A Delete of the name cut short left its deletion mark: finish it, so that
		// the queue starts empty, and create again.
		if done, derr := s.finishDelete(ctx, db, table, spec.Name); derr != nil {
			return derr
		} else if done && try < maxTries {
			continue
		}
		if err == nil {
			return driver.Errorf(dcsync.Internal, op, "queue %q: create refused but no spec found", spec.Name)
		}
		s.log.Debug("hbase: queue create in doubt, not applied; retrying", "queue", spec.Name, "err", err)
	}
}

// readSpec reads a queue's spec row.
func (s *Store) readSpec(ctx context.Context, db queueOps, table, name string) (specDoc, int64, bool, error) {
	d, _, ts, ok, err := s.readSpecRaw(ctx, db, table, name)
	return d, ts, ok, err
}

// readSpecRaw is readSpec that also returns the stored bytes.
func (s *Store) readSpecRaw(ctx context.Context, db queueOps, table, name string) (specDoc, []byte, int64, bool, error) {
	const op = "hbase.ReadQueueSpec"
	cells, err := db.Get(ctx, table, specRow(name), hbaserpc.Column{Family: famQueue, Qualifier: qualSpec})
	if err != nil {
		return specDoc{}, nil, 0, false, wrap(err, op)
	}
	v, ts, ok := cellValue(cells, qualSpec)
	if !ok || isDeleting(v) {
		return specDoc{}, nil, 0, false, nil // none, or a queue being deleted (DeleteQueue)
	}
	d, err := decodeSpec(op, name, v)
	if err != nil {
		return specDoc{}, nil, 0, false, err
	}
	return d, v, ts, true, nil
}

// ReadQueueSpec returns the queue's spec, or NotFound.
func (s *Store) ReadQueueSpec(ctx context.Context, name string) (driver.QueueSpec, error) {
	const op = "hbase.ReadQueueSpec"
	if err := driver.ValidateID("queue", name); err != nil {
		return driver.QueueSpec{}, err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return driver.QueueSpec{}, err
	}
	d, ts, ok, err := s.readSpec(ctx, db, table, name)
	if err != nil {
		return driver.QueueSpec{}, err
	}
	if !ok {
		return driver.QueueSpec{}, driver.Errorf(dcsync.NotFound, op, "queue %q not found", name)
	}
	spec := d.spec(ts)
	s.rememberSpec(spec)
	return spec, nil
}

func (s *Store) rememberSpec(spec driver.QueueSpec) {
	q := s.queue()
	q.mu.Lock()
	q.specs[spec.Name] = spec
	q.mu.Unlock()
}

// knownSpec returns the queue's spec from the cache, or reads it (NotFound when the
// queue does not exist). Only what never changes (the dedup window, the partitions) is
// used from it. DeleteQueue drops it from the deleting store's cache only (see
// DeleteQueue).
func (s *Store) knownSpec(ctx context.Context, db queueOps, table, op, name string) (driver.QueueSpec, error) {
	q := s.queue()
	q.mu.Lock()
	spec, ok := q.specs[name]
	q.mu.Unlock()
	if ok {
		return spec, nil
	}
	d, ts, found, err := s.readSpec(ctx, db, table, name)
	if err != nil {
		return driver.QueueSpec{}, err
	}
	if !found {
		return driver.QueueSpec{}, driver.Errorf(dcsync.NotFound, op, "queue %q not found", name)
	}
	spec = d.spec(ts)
	s.rememberSpec(spec)
	return spec, nil
}

// AddQueueGroup appends group to the queue's groups (check-and-set of the spec, which
// records this call's random id for the group in specDoc.Adders), then
// increments the trim guard q:r of every shared partition's head row (one MultiMutate;
// see "Trims against added groups" in queue_trim.go). It returns only once both are
// done; an error may leave the group added, and the call made again (AlreadyExists)
// bumps the guards again. A call whose spec write was in doubt and that then finds the
// group returns nil only if the id recorded for it is its own; a group another call
// added is AlreadyExists (TestAddQueueGroupInDoubtRaces).
func (s *Store) AddQueueGroup(ctx context.Context, name, group string) (driver.QueueSpec, error) {
	const op = "hbase.AddQueueGroup"
	if err := driver.ValidateID("queue", name); err != nil {
		return driver.QueueSpec{}, err
	}
	if err := driver.ValidateID("group", group); err != nil {
		return driver.QueueSpec{}, err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return driver.QueueSpec{}, err
	}
	row := specRow(name)
	var doubt error
	me := fmt.Sprintf("%016x", randToken()) // this call, in the spec's Adders
	for try := 0; try < 4*maxTries; try++ {
		d, oldRaw, ts, found, err := s.readSpecRaw(ctx, db, table, name)
		if err != nil {
			return driver.QueueSpec{}, err
		}
		if !found {
			return driver.QueueSpec{}, driver.Errorf(dcsync.NotFound, op, "queue %q not found", name)
		}
		spec := d.spec(ts)
		for _, g := range d.Groups {
			if g == group {
				// Bumped again here too, so that whichever call returns (this one, or
				// one whose bump failed) no trim passes the group (see "Trims against
				// added groups").
				if err := bumpTrimGuards(ctx, db, table, op, name, d.Partitions); err != nil {
					return driver.QueueSpec{}, err
				}
				if doubt != nil && d.Adders[group] == me {
					return spec, nil // our in-doubt write landed
				}
				return spec, driver.Errorf(dcsync.AlreadyExists, op, "queue %q already has group %q", name, group)
			}
		}
		if len(d.Groups) >= driver.MaxQueueGroups {
			return spec, driver.Errorf(dcsync.InvalidArgument, op, "queue %q has %d groups, the most allowed", name, len(d.Groups))
		}
		nd := d
		nd.Groups = append(append([]string(nil), d.Groups...), group)
		nd.Adders = make(map[string]string, len(d.Adders)+1)
		for g, a := range d.Adders {
			nd.Adders[g] = a
		}
		nd.Adders[group] = me
		nd.CreatedMs = spec.Created.UnixMilli()
		raw, err := json.Marshal(nd)
		if err != nil {
			return driver.QueueSpec{}, driver.Errorf(dcsync.Internal, op, "%v", err)
		}
		ok, _, err := db.CheckAndMutate(ctx, table, row, hbaserpc.IfEquals(famQueue, qualSpec, oldRaw),
			&hbaserpc.Put{Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualSpec, Value: raw}}})
		if err != nil {
			if !inDoubt(err) {
				return driver.QueueSpec{}, wrap(err, op)
			}
			doubt = err
			continue
		}
		if ok {
			// Then the trim guards: a trim that read the spec before this write is
			// refused (see "Trims against added groups").
			if err := bumpTrimGuards(ctx, db, table, op, name, nd.Partitions); err != nil {
				return driver.QueueSpec{}, err
			}
			out := nd.spec(0)
			s.rememberSpec(out)
			return out, nil
		}
		// Another change got in: read again.
	}
	if doubt != nil {
		return driver.QueueSpec{}, wrap(doubt, op)
	}
	return driver.QueueSpec{}, driver.Errorf(dcsync.RetriesExhausted, op, "queue %q: the spec kept changing", name)
}

// QueueBounds reads the bounds of many partitions in one MultiGet of their head rows.
func (s *Store) QueueBounds(ctx context.Context, name string, ps []int) ([]driver.QueueBounds, error) {
	const op = "hbase.QueueBounds"
	if err := driver.ValidateQueuePartitions(name, ps); err != nil {
		return nil, err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return nil, err
	}
	if _, err := s.knownSpec(ctx, db, table, op, name); err != nil {
		return nil, err
	}
	return s.bounds(ctx, db, table, op, name, ps)
}

func (s *Store) bounds(ctx context.Context, db queueOps, table, op, name string, ps []int) ([]driver.QueueBounds, error) {
	out := make([]driver.QueueBounds, len(ps))
	if len(ps) == 0 {
		return out, nil
	}
	gets := make([]hbaserpc.Get, len(ps))
	for i, p := range ps {
		gets[i] = hbaserpc.Get{Row: headRow(name, p), Columns: headCols}
	}
	rows, err := db.MultiGet(ctx, table, gets)
	if err != nil {
		return nil, wrap(err, op)
	}
	for i, cells := range rows {
		if out[i], err = decodeBounds(op, cells); err != nil {
			return nil, err
		}
		s.sawHead(name, ps[i], out[i].Head)
	}
	return out, nil
}

// ReadQueue reads partition p from seq from: the head row and a scan of up to max
// entries, concurrently (one round trip), then the entries cut at the first gap and at
// Head. A read from below the Floor scans again from the Floor.
func (s *Store) ReadQueue(ctx context.Context, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	const op = "hbase.ReadQueue"
	if err := driver.ValidateQueueRead(name, p, max); err != nil {
		return driver.QueueRead{}, err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return driver.QueueRead{}, err
	}
	if _, err := s.knownSpec(ctx, db, table, op, name); err != nil {
		return driver.QueueRead{}, err
	}
	return s.readPart(ctx, db, table, op, name, p, from, max)
}

// readPart is ReadQueue once the queue is known: the head row and the scan.
func (s *Store) readPart(ctx context.Context, db queueOps, table, op, name string, p int, from uint64, max int) (driver.QueueRead, error) {
	prefix := partPrefix(name, p)
	var (
		wg     sync.WaitGroup
		head   []hbaserpc.Cell
		herr   error
		bounds driver.QueueBounds
		err    error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		head, herr = db.Get(ctx, table, headRow(name, p), headCols...)
	}()
	rows, serr := s.scanEntries(ctx, db, table, prefix, from, max)
	wg.Wait()
	if herr != nil {
		return driver.QueueRead{}, wrap(herr, op)
	}
	if bounds, err = decodeBounds(op, head); err != nil {
		return driver.QueueRead{}, err
	}
	s.sawHead(name, p, bounds.Head)
	if serr != nil {
		return driver.QueueRead{}, wrap(serr, op)
	}
	start := from
	if start < bounds.Floor {
		start = bounds.Floor
		if rows, err = s.scanEntries(ctx, db, table, prefix, start, max); err != nil {
			return driver.QueueRead{}, wrap(err, op)
		}
	}
	out := driver.QueueRead{QueueBounds: bounds}
	next := start
	for _, r := range rows {
		if next >= bounds.Head || len(out.Entries) >= max {
			break
		}
		seq, ok := entrySeq(prefix, r.Key)
		if !ok || seq != next {
			break // a gap: a reserved seq not written yet
		}
		e, found, err := findEntry(r.Cells)
		if err != nil {
			return driver.QueueRead{}, driver.Errorf(dcsync.Internal, op, "queue %q partition %d seq %d: %v", name, p, seq, err)
		}
		if !found || e.kind == kindTrimmed {
			break // trimmed by a trim that raced this read: below the Floor now
		}
		out.Entries = append(out.Entries, e.queueEntry(seq))
		next++
	}
	return out, nil
}

// queueEntry is the entry e read at seq, as ReadQueue returns it.
func (e storedEntry) queueEntry(seq uint64) driver.QueueEntry {
	qe := driver.QueueEntry{Seq: seq, At: time.UnixMilli(e.at)}
	if e.kind == kindTombstone {
		qe.Aborted = true
	} else {
		qe.Key, qe.ID, qe.Payload = e.key, e.id, e.payload
	}
	return qe
}

// scanEntries scans up to max entry rows of a partition from seq from.
func (s *Store) scanEntries(ctx context.Context, db queueOps, table string, prefix []byte, from uint64, max int) ([]hbaserpc.Row, error) {
	stop := entryRow(prefix, from+uint64(max))
	if from > math.MaxUint64-uint64(max) {
		stop = append(append([]byte(nil), prefix...), kindEntry+1)
	}
	var rows []hbaserpc.Row
	err := db.ScanFunc(ctx, table, hbaserpc.Scan{
		StartRow: entryRow(prefix, from),
		StopRow:  stop,
		Columns:  entryCols,
		Limit:    max,
		Caching:  max,
	}, func(r hbaserpc.Row) error {
		rows = append(rows, r)
		return nil
	})
	return rows, err
}

func entrySeq(prefix, row []byte) (uint64, bool) {
	if len(row) != len(prefix)+9 || !bytes.HasPrefix(row, prefix) || row[len(prefix)] != kindEntry {
		return 0, false
	}
	return binary.BigEndian.Uint64(row[len(prefix)+1:]), true
}

// AbortQueueSeq writes a tombstone at seq if no event is there.
func (s *Store) AbortQueueSeq(ctx context.Context, name string, p int, seq uint64) (bool, error) {
	const op = "hbase.AbortQueueSeq"
	if err := driver.ValidateQueueRead(name, p, 1); err != nil {
		return false, err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return false, err
	}
	if _, err := s.knownSpec(ctx, db, table, op, name); err != nil {
		return false, err
	}
	b, err := s.bounds(ctx, db, table, op, name, []int{p})
	if err != nil {
		return false, err
	}
	if seq >= b[0].Head {
		return false, driver.Errorf(dcsync.InvalidArgument, op, "seq %d of queue %q partition %d is not reserved (head %d)", seq, name, p, b[0].Head)
	}
	row := entryRow(partPrefix(name, p), seq)
	readBack := func() (bool, bool, error) { // aborted, decided
		cells, err := db.Get(ctx, table, row, entryCols...)
		if err != nil {
			return false, false, wrap(err, op)
		}
		e, found, err := findEntry(cells)
		if err != nil {
			return false, false, driver.Errorf(dcsync.Internal, op, "seq %d: %v", seq, err)
		}
		if !found {
			return false, false, nil
		}
		return e.kind == kindTombstone, true, nil
	}
	if seq < b[0].Floor {
		// Trimmed: an event was there (tombstones are kept), or it was aborted.
		aborted, _, err := readBack()
		return aborted, err
	}
	var last error
	for try := 0; try < maxTries; try++ {
		ok, _, err := db.CheckAndMutate(ctx, table, row, hbaserpc.IfAbsent(famQueue, qualEntry), abortPut(row))
		if err != nil && !inDoubt(err) {
			return false, wrap(err, op)
		}
		if err == nil && ok {
			return true, nil
		}
		aborted, decided, rerr := readBack()
		if rerr != nil {
			return false, rerr
		}
		if decided {
			return aborted, nil
		}
		last = err
	}
	return false, wrap(last, op)
}

// TrimQueue raises partition p's Floor to below (never lowers it), or as far as the
// offsets of the groups that read p and the rewinds in progress allow (queue_trim.go,
// "Trims against rewinds"), and replaces its events below the Floor by trimmed marks
// (see the queue layout). Each of its writes that lands late, after the queue was
// deleted and created again under its name, leaves the new queue alone (queue_trim.go,
// "Trims against a queue created again"). Cost of a trim that raises the Floor: two
// MultiGets, a check-and-mutate (two on a partition's first trim), a MultiMutate per
// 1000 marks, a Get and a check-and-mutate.
func (s *Store) TrimQueue(ctx context.Context, name string, p int, below uint64) error {
	const op = "hbase.TrimQueue"
	if err := driver.ValidateQueuePartitions(name, []int{p}); err != nil {
		return err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return err
	}
	spec, err := s.knownSpec(ctx, db, table, op, name)
	if err != nil {
		return err
	}
	hrow := headRow(name, p)
	// Raise the floor as far as the offsets allow (queue_trim.go).
	g, err := s.raiseFloor(ctx, db, table, op, name, p, below)
	if err != nil {
		return err
	}
	trimmed := g.trimmed
	below = min(below, g.bounds.Floor)
	if trimmed >= below {
		return nil
	}
	// Replace the events in [trimmed, below) by the trimmed mark: the seqs are dense, so
	// the rows are known without a scan. The mark is one byte with the queue's dedup
	// window as its cell TTL (the event's bytes are gone at once; the mark once the
	// window ends), not a delete: an abort's attempt still in flight ("q:e absent: put
	// q:a") must not find the cell absent and tombstone a delivered event, which would
	// let an append of its id within the window take the id over and append it again.
	// After the window no append resolves the id any more. A tombstone stays (see the
	// layout).
	//
	// Each mark is stamped with g.newest, the newest timestamp the trim read (at or
	// after the write of every event below the Floor, before any write of a queue
	// created again under the name), and conditioned on q:e present (one conditional
	// action each, in the same MultiMutate): so a mark that lands late, after the queue
	// was deleted and created again, never hides an event of the new queue (its cell is
	// newer than the mark) nor shows where the new queue has written nothing yet (no
	// q:e: refused). See queue_trim.go, "Trims against a queue created again". The TTL
	// counts from the stamp: it is lengthened by the time since, as this clock tells,
	// so the mark lives at least the window from the stamp and about the window from
	// now. The actions are idempotent (the same stamped mark again).
	prefix := partPrefix(name, p)
	mark := []hbaserpc.Value{{Family: famQueue, Qualifier: qualEntry, Value: []byte{entryTrimmed}}}
	ttl := spec.DedupWindow() + max(0, time.Since(time.UnixMilli(g.newest)))
	present := hbaserpc.IfPresent(famQueue, qualEntry)
	const chunk = 1000
	for from := trimmed; from < below; {
		n := min(below-from, uint64(chunk))
		acts := make([]hbaserpc.Action, n)
		for i := range acts {
			acts[i] = hbaserpc.Action{Cond: &present, Mutation: &hbaserpc.Put{Row: entryRow(prefix, from+uint64(i)), Timestamp: g.newest, TTL: ttl, Values: mark}}
		}
		// A conditional action in doubt is not sent again by the client: sent again
		// here (the same stamped mark again, harmless).
		for try := 0; ; try++ {
			_, err := db.MultiMutate(ctx, table, acts)
			if err == nil {
				break
			}
			if !inDoubt(err) || try >= maxTries {
				return wrap(err, op)
			}
		}
		from += n
	}
	// Record how far events are trimmed (never lowered; a failure here only makes the
	// next trim mark again). Conditioned also on the trim guard q:r as read, when it
	// is a drawn value (see queue_trim.go): a queue created again under the name
	// cannot hold it, so a late attempt never records marks the new queue lacks.
	for try := 0; try < maxTries; try++ {
		cells, err := db.Get(ctx, table, hrow, hbaserpc.Column{Family: famQueue, Qualifier: qualTrimmed}, hbaserpc.Column{Family: famQueue, Qualifier: qualGuard})
		if err != nil {
			return wrap(err, op)
		}
		cur, err := cellUint(cells, qualTrimmed)
		if err != nil {
			return driver.Errorf(dcsync.Internal, op, "head row: %v", err)
		}
		if cur >= below {
			return nil
		}
		cond := hbaserpc.IfAbsent(famQueue, qualTrimmed)
		if raw, _, ok := cellValue(cells, qualTrimmed); ok {
			cond = hbaserpc.IfEquals(famQueue, qualTrimmed, raw)
		}
		if raw, _, ok := cellValue(cells, qualGuard); ok && (trimGuard{guard: raw}).unique() {
			cond = hbaserpc.IfAll(cond, hbaserpc.IfEquals(famQueue, qualGuard, raw))
		}
		ok, _, err := db.CheckAndMutate(ctx, table, hrow, cond,
			&hbaserpc.Put{Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualTrimmed, Value: be64(below)}}})
		if err != nil && !inDoubt(err) {
			return wrap(err, op)
		}
		if err == nil && ok {
			return nil
		}
	}
	return nil
}

// Offsets.

// Offset cell (q:o) formats. The first, of 21 bytes, is token | next | attempts |
// held; the current one appends version (8 bytes) and the marks (the rest, verbatim).
// A cell in the first format reads as Version 0 with no marks, and is rewritten in the
// current one by the next claim or commit.
const (
	offsetLenV1 = 8 + 8 + 4 + 1
	offsetLen   = offsetLenV1 + 8 // without the marks
)

func encodeOffset(o driver.QueueOffset) []byte {
	b := make([]byte, 0, offsetLen+len(o.Marks))
	b = binary.BigEndian.AppendUint64(b, o.Token)
	b = binary.BigEndian.AppendUint64(b, o.Next)
	b = binary.BigEndian.AppendUint32(b, uint32(o.Attempts))
	if o.Held {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint64(b, o.Version)
	return append(b, o.Marks...)
}

func decodeOffset(v []byte) (driver.QueueOffset, error) {
	if len(v) != offsetLenV1 && len(v) < offsetLen {
		return driver.QueueOffset{}, fmt.Errorf("offset cell holds %d bytes, want %d or at least %d", len(v), offsetLenV1, offsetLen)
	}
	if len(v) > offsetLen+driver.MaxQueueMarksLen {
		return driver.QueueOffset{}, fmt.Errorf("offset cell holds %d bytes, above %d", len(v), offsetLen+driver.MaxQueueMarksLen)
	}
	if v[20] > 1 {
		return driver.QueueOffset{}, fmt.Errorf("offset cell holds held byte %d", v[20])
	}
	o := driver.QueueOffset{
		Token:    binary.BigEndian.Uint64(v[0:8]),
		Next:     binary.BigEndian.Uint64(v[8:16]),
		Attempts: int(binary.BigEndian.Uint32(v[16:20])),
		Held:     v[20] == 1,
	}
	if len(v) >= offsetLen {
		o.Version = binary.BigEndian.Uint64(v[offsetLenV1:offsetLen])
		o.Marks = driver.QueueMarks(v[offsetLen:])
	}
	return o, nil
}

func validGroup(name, group string, p int) error {
	if err := driver.ValidateQueuePartitions(name, []int{p}); err != nil {
		return err
	}
	return driver.ValidateID("group", group)
}

// offsetColumn is the column of an offset row that claims and commits compare and set.
var offsetColumn = hbaserpc.Column{Family: famQueue, Qualifier: qualOffset}

// readOffset reads one offset row: the offset and its raw cell (nil when none).
func readOffset(ctx context.Context, db queueOps, table, op string, row []byte) (driver.QueueOffset, []byte, error) {
	cells, err := db.Get(ctx, table, row, offsetColumn)
	if err != nil {
		return driver.QueueOffset{}, nil, wrap(err, op)
	}
	return offsetOf(op, cells)
}

// offsetOf decodes the offset cell among cells (the zero offset and nil when absent).
func offsetOf(op string, cells []hbaserpc.Cell) (driver.QueueOffset, []byte, error) {
	raw, _, ok := cellValue(cells, qualOffset)
	if !ok {
		return driver.QueueOffset{}, nil, nil
	}
	o, err := decodeOffset(raw)
	if err != nil {
		return driver.QueueOffset{}, nil, driver.Errorf(dcsync.Internal, op, "%v", err)
	}
	return o, raw, nil
}

// offsetCond is the condition of a write that replaces the offset cell raw (nil: no
// cell): compare-and-set on the exact stored bytes.
func offsetCond(raw []byte) hbaserpc.Condition {
	if raw == nil {
		return hbaserpc.IfAbsent(famQueue, qualOffset)
	}
	return hbaserpc.IfEquals(famQueue, qualOffset, raw)
}

// maxSeenOffsets bounds the offset cells a store remembers (see seenOffset).
const maxSeenOffsets = 1 << 16

// seenOffset returns the offset cell of row as this store last wrote or read it (nil:
// unknown). It is only a guess of the stored value, the condition of a commit's first
// compare-and-set: a wrong guess costs a refused attempt, never a wrong write.
func (q *queueState) seenOffset(row []byte) []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.seen[string(row)]
}

func (q *queueState) sawOffset(row, raw []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if raw == nil {
		delete(q.seen, string(row))
		return
	}
	if q.seen == nil || len(q.seen) >= maxSeenOffsets {
		q.seen = make(map[string][]byte)
	}
	q.seen[string(row)] = raw
}

// ClaimQueuePartition makes token the owner of group's offset in partition p (see
// driver.QueueStore): it reads the offset cell and, when token is above the stored
// one, replaces it by the same offset with token, by a check-and-mutate conditioned on
// the exact bytes it read (compare-and-set). A claim whose first attempt lands late,
// after later writes, finds other bytes there and changes nothing; a claim that finds
// its own token stored (its in-doubt attempt landed, or a retried call) writes nothing
// and returns the stored offset.
func (s *Store) ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (driver.QueueOffset, error) {
	const op = "hbase.ClaimQueuePartition"
	if err := validGroup(name, group, p); err != nil {
		return driver.QueueOffset{}, err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return driver.QueueOffset{}, err
	}
	if _, err := s.knownSpec(ctx, db, table, op, name); err != nil {
		return driver.QueueOffset{}, err
	}
	q := s.queue()
	row := offsetRow(name, group, p)
	var doubt error
	for try := 0; try < 4*maxTries; try++ {
		cur, raw, err := readOffset(ctx, db, table, op, row)
		if err != nil {
			return driver.QueueOffset{}, err
		}
		q.sawOffset(row, raw)
		if token < cur.Token {
			return cur, driver.Errorf(dcsync.LockLost, op, "queue %q group %q partition %d is owned by token %d, above %d", name, group, p, cur.Token, token)
		}
		if token == cur.Token {
			// A retried claim, or ours whose reply was lost: nothing to write.
			return cur, nil
		}
		nv := cur
		nv.Token = token
		enc := encodeOffset(nv)
		ok, _, err := db.CheckAndMutate(ctx, table, row, offsetCond(raw), &hbaserpc.Put{Values: []hbaserpc.Value{
			{Family: famQueue, Qualifier: qualOffTok, Value: be64(token)},
			{Family: famQueue, Qualifier: qualOffset, Value: enc},
		}})
		if err != nil {
			if !inDoubt(err) {
				return driver.QueueOffset{}, wrap(err, op)
			}
			doubt = err
			continue // read again: our token there means it landed
		}
		if ok {
			q.sawOffset(row, enc)
			return nv, nil
		}
		// Another claim or commit got in: read again.
	}
	if doubt != nil {
		return driver.QueueOffset{}, wrap(doubt, op)
	}
	return driver.QueueOffset{}, driver.Errorf(dcsync.RetriesExhausted, op, "queue %q group %q partition %d: the offset kept changing", name, group, p)
}

// CommitQueueOffset writes off when the stored token is off.Token and the stored
// Version is below off.Version (see driver.QueueStore), by a check-and-mutate
// conditioned on the exact bytes of the offset cell that the decision was made on
// (compare-and-set). Every write of the cell changes its bytes (a claim the token, a
// commit the version, which only grows under one token), so a stored value never
// comes back: an attempt whose reply was lost and that lands late, after later writes,
// finds other bytes and changes nothing. The first attempt is conditioned on the cell
// as this store last wrote or read it, and reads the row back in the same request, so
// a commit of the partition's owner is one round trip; a refused attempt decides on
// the cell it read back. A commit that moves Next back (a rewind) is pinned in the
// head row first, and refused below the Floor (queue_trim.go).
func (s *Store) CommitQueueOffset(ctx context.Context, name, group string, p int, off driver.QueueOffset) error {
	const op = "hbase.CommitQueueOffset"
	if err := validGroup(name, group, p); err != nil {
		return err
	}
	if off.Attempts < 0 || off.Attempts > math.MaxInt32 {
		return driver.Errorf(dcsync.InvalidArgument, op, "attempts %d out of range", off.Attempts)
	}
	if err := driver.ValidateQueueMarks(op, off); err != nil {
		return err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return err
	}
	if _, err := s.knownSpec(ctx, db, table, op, name); err != nil {
		return err
	}
	c := s.newOffsetCommit(db, table, name, group, p, off)
	raw, cur, known := c.guess()
	return c.finish(ctx, raw, cur, known)
}

// offsetCommit is one commit of an offset under way: CommitQueueOffset's, or one
// record of CommitQueueOffsets (queue_commits.go), which makes its first attempt in
// a batch and finishes it here, so both have one implementation of the decisions.
type offsetCommit struct {
	s                  *Store
	db                 queueOps
	table, name, group string
	p                  int
	off                driver.QueueOffset
	row, nv            []byte // the offset row; off's cell
	doubt              error  // the last attempt that failed in doubt (nil: none)
	tries, doubts      int    // attempts made; of them, in doubt
}

// commitOp names the op of a commit's outcome, batched or not.
const commitOp = "hbase.CommitQueueOffset"

func (s *Store) newOffsetCommit(db queueOps, table, name, group string, p int, off driver.QueueOffset) *offsetCommit {
	return &offsetCommit{s: s, db: db, table: table, name: name, group: group, p: p, off: off,
		row: offsetRow(name, group, p), nv: encodeOffset(off)}
}

// put is the write of the commit's cell.
func (c *offsetCommit) put() *hbaserpc.Put {
	return &hbaserpc.Put{Row: c.row, Values: []hbaserpc.Value{{Family: famQueue, Qualifier: qualOffset, Value: c.nv}}}
}

// decide returns done (with the call's result) when the stored offset cur decides
// the commit, false when the write is to be attempted on cur.
func (c *offsetCommit) decide(cur driver.QueueOffset) (bool, error) {
	off := c.off
	switch {
	case cur == off:
		return true, nil // already stored: an earlier attempt of ours, or the same commit again
	case cur.Token != off.Token && c.doubt != nil:
		// An attempt in doubt may have landed before the new owner's claim (which
		// keeps Next and Version): the outcome is unknown, not refused.
		return true, driver.Errorf(dcsync.Connection, commitOp, "queue %q group %q partition %d: outcome unknown: an attempt in doubt may have been applied before token %d took the partition: %w", c.name, c.group, c.p, cur.Token, c.doubt)
	case cur.Token != off.Token:
		return true, driver.Errorf(dcsync.LockLost, commitOp, "queue %q group %q partition %d is owned by token %d, not %d", c.name, c.group, c.p, cur.Token, off.Token)
	case cur.Version >= off.Version:
		return true, driver.Errorf(dcsync.LockLost, commitOp, "queue %q group %q partition %d: token %d stored version %d, not below %d (a later write of the owner)", c.name, c.group, c.p, cur.Token, cur.Version, off.Version)
	}
	return false, nil
}

// guess returns the offset cell as this store last wrote or read it, and its offset,
// with known set when decide allows the write on it. The guess is used only then: any
// other decision is made on the stored cell.
func (c *offsetCommit) guess() (raw []byte, cur driver.QueueOffset, known bool) {
	raw = c.s.queue().seenOffset(c.row)
	if raw == nil {
		return nil, cur, false
	}
	cur, err := decodeOffset(raw)
	if err != nil {
		return nil, driver.QueueOffset{}, false
	}
	if done, _ := c.decide(cur); done {
		return nil, driver.QueueOffset{}, false
	}
	return raw, cur, true
}

// inDoubt records an attempt whose outcome is unknown.
func (c *offsetCommit) inDoubt(err error) {
	c.doubt = err
	c.doubts++
}

// readBack decides on the offset cell read back after a refused attempt (after):
// done with the result, or the cell and offset the next attempt replaces.
func (c *offsetCommit) readBack(after []hbaserpc.Cell) (raw []byte, cur driver.QueueOffset, done bool, err error) {
	cur, raw, err = offsetOf(commitOp, after)
	if err != nil {
		return nil, cur, true, err
	}
	c.s.queue().sawOffset(c.row, raw)
	if done, err := c.decide(cur); done {
		return nil, cur, true, err
	}
	return raw, cur, false, nil
}

// finish makes the commit's attempts from raw, the cell its next attempt replaces
// (cur its offset) when known, else from a read of the row.
func (c *offsetCommit) finish(ctx context.Context, raw []byte, cur driver.QueueOffset, known bool) error {
	q := c.s.queue()
	for ; c.tries < 4*maxTries && c.doubts < maxTries; c.tries++ {
		if !known {
			o, r, err := readOffset(ctx, c.db, c.table, commitOp, c.row)
			if err != nil {
				return err
			}
			q.sawOffset(c.row, r)
			if done, err := c.decide(o); done {
				return err
			}
			raw, cur = r, o
		}
		if c.off.Next < cur.Next {
			// A rewind: pinned before it is written, so that no trim passes it
			// (queue_trim.go); refused below the Floor.
			if err := c.s.pinRewind(ctx, c.db, c.table, commitOp, c.name, c.group, c.p, cur, c.off); err != nil {
				return err
			}
		}
		ok, _, after, err := c.db.CheckAndMutateRead(ctx, c.table, c.row, offsetCond(raw), []hbaserpc.Mutation{c.put()}, offsetColumn)
		if err != nil {
			if !inDoubt(err) {
				return wrap(err, commitOp)
			}
			// Read again: our value there means it landed. The attempt may still land
			// later; its condition, the bytes it replaces, will not hold by then.
			c.inDoubt(err)
			known = false
			continue
		}
		if ok {
			q.sawOffset(c.row, c.nv)
			return nil
		}
		// Refused: decide on the cell read back after the check.
		r, o, done, err := c.readBack(after)
		if done {
			return err
		}
		raw, cur, known = r, o, true
	}
	if c.doubt != nil {
		return wrap(c.doubt, commitOp)
	}
	return driver.Errorf(dcsync.RetriesExhausted, commitOp, "queue %q group %q partition %d: the offset kept changing", c.name, c.group, c.p)
}

// ReadQueueOffsets reads group's offsets of many partitions in one MultiGet.
func (s *Store) ReadQueueOffsets(ctx context.Context, name, group string, ps []int) ([]driver.QueueOffset, error) {
	const op = "hbase.ReadQueueOffsets"
	if err := driver.ValidateQueuePartitions(name, ps); err != nil {
		return nil, err
	}
	if err := driver.ValidateID("group", group); err != nil {
		return nil, err
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return nil, err
	}
	if _, err := s.knownSpec(ctx, db, table, op, name); err != nil {
		return nil, err
	}
	out := make([]driver.QueueOffset, len(ps))
	if len(ps) == 0 {
		return out, nil
	}
	gets := make([]hbaserpc.Get, len(ps))
	for i, p := range ps {
		gets[i] = hbaserpc.Get{Row: offsetRow(name, group, p), Columns: []hbaserpc.Column{{Family: famQueue, Qualifier: qualOffset}}}
	}
	rows, err := db.MultiGet(ctx, table, gets)
	if err != nil {
		return nil, wrap(err, op)
	}
	for i, cells := range rows {
		if raw, _, ok := cellValue(cells, qualOffset); ok {
			if out[i], err = decodeOffset(raw); err != nil {
				return nil, driver.Errorf(dcsync.Internal, op, "%v", err)
			}
		}
	}
	return out, nil
}
