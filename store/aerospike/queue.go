// # Queues
//
// The store implements driver.QueueStore with one record per event. Aerospike has no
// key-range scan, so a partition's entries are found by their keys: entry seq of
// partition p of queue q has the string key <len(q)>:<q>|<p>|<seq> in set QueueEntrySet
// (the queue name is length-prefixed, so any name is unambiguous). A read fetches the
// known, dense range [from, from+max) below the partition's head with one batch get
// (the head record in the same batch when the store has already seen a head at least
// max above from: one round trip for a consumer catching up; otherwise the head record
// first); an append writes its events with one batch of create-only writes; a trim
// deletes with batch deletes.
//
// Why not segment records (one record per block of seqs holding a map seq -> event)?
// They would couple unrelated events through the record: an event of up to
// driver.MaxQueuePayload (256 KiB) would leave room for three more in a 1 MiB record,
// every append would rewrite the whole segment (the server copies a record on every
// write), concurrent producers of a partition would queue on one record
// (transaction-pending-limit, KEY_BUSY) for the whole batch instead of for the
// reservation only, and a segment's map would need its own in-doubt bookkeeping. One
// record per event has none of that: an event's only limit is the record size
// (max-record-size, 1 MiB by default: a full 256 KiB payload fits with room to spare),
// writes of different events never contend, and a create-only write is its own
// idempotence check (a retry that finds the record finds its own writer id there).
// Its cost is a key lookup per event on read and a record's overhead (64 bytes of
// primary index) per event; the server runs a batch's keys in parallel.
//
// Records, all in the store's namespace (sets QueueSpecSet, QueueHeadSet,
// QueueEntrySet, QueueOffsetSet, QueueIDSet):
//   - spec: one per queue, key <name>: partitions, groups, dedup window, creation time
//     (the server's clock), w, CreateQueue's writer id, inc, the queue's incarnation
//     id (random, drawn by CreateQueue, never changed), and gw, a map of each group
//     added by AddQueueGroup to the id of the call that added it. AddQueueGroup writes
//     it with a generation check. While DeleteQueue runs it also holds bin del, the
//     deletion mark (the deleting call's random id): the queue then reads as not found
//     (see DeleteQueue).
//   - every head, entry, offset and id record also holds inc, the incarnation id of
//     the queue that wrote it (written by every write that may create the record), so
//     that DeleteQueue's deletes, filtered on it, never delete a record of the queue
//     created again under the name. Specs and records written before this release
//     have no inc: a delete takes a record without it as its own.
//   - head: one per partition: head (next seq to reserve), floor (lowest seq kept), gc
//     (every non-tombstone entry below it is deleted) and res, the partition's last
//     Config.OpIDsKept reservations (nonce -> first seq); tg and pins, the trim guard
//     and the rewinds in progress (queue_trim.go).
//   - entry: one per seq: key, id, payload, the server's time, the writer's id; or a
//     tombstone (bin x) for an aborted seq.
//   - offset: one per (queue, group, partition): token, next, attempts, held.
//   - id: one per (queue, event id) with the dedup window as TTL: which append claimed
//     the id and, once it reserved, where the event goes (partition, seq), and the
//     queue's name (bin qbQueue, for DeleteQueue's filtered scan).
//
// # Appending
//
// An append reserves seqs first (one operate per partition adds the batch's count to
// head, all partitions in one batch), then writes the events create-only at their
// seqs. Each reservation carries a random nonce that the operate records in res
// beside the first seq it reserved, and the operate returns the recorded seq when the
// nonce is already there: a retry after an in-doubt reservation gets the same seqs
// instead of reserving again. (res keeps the OpIDsKept reservations made last; a retry
// that comes after more than that many reservations of the partition reserves again
// and leaves a hole, which consumers abort: never a duplicate.)
//
// So the store has holes: a seq below head may be unwritten for a while (its write is
// in flight) or for ever (its producer died). ReadQueue stops before it; the consumer
// aborts it (AbortQueueSeq: a create-only tombstone). A producer whose create-only
// write then fails finds the tombstone and appends that event again with a fresh
// reservation; one that finds its own writer id (an in-doubt earlier try) has
// succeeded. Events of one partition get consecutive seqs in the order given, except
// an event appended again after its seq was aborted, which goes after the others.
//
// Events with an id: before reserving, the append claims each id: its id record is
// created holding the append's writer id and no seq (pending). Then it reserves, points
// the claimed id records at the new seqs (filter: still its claim), and writes the
// events. A producer that dies between pointing and writing cannot lose the event: an
// append of the same id whose claim is refused reads the id record and looks at the
// seq it points at: an event there is a Duplicate; a tombstone means the event was
// never stored, so the append claims the id from that seq (compare-and-set) and
// appends it again; an unwritten seq is completed by writing this append's event there,
// create-only (the first producer's late write then fails and finds an event with its
// id: it reports Duplicate). An id claimed but not yet pointed is waited for (a few
// ms), and taken over by compare-and-set once it has been pending for
// queueClaimTimeout by the server's clock (its holder died before reserving). So
// racing appends of one id reserve one seq between them and never leave a tombstone.
// An append waits for others' claims only at the end of a round, when every claim it
// holds has been pointed and written: two appends cannot wait for each other.
//
// # Queue limits
//
//   - Payload: driver.MaxQueuePayload; the entry record must fit max-record-size
//     (1 MiB by default), which it does with the key and id at their maximum.
//   - Batches are sent in commands of at most queueBatchRecords records and about
//     queueBatchBytes bytes; a ReadQueue returns at most queueReadBytes of payload
//     (fewer entries than max when they are large: the next read goes on).
//   - Tombstones live QueueTombstoneTTL and are not deleted by TrimQueue, so that a
//     producer late with its write still finds one. An append that held its
//     reservation longer than queueMaxWriteDelay before writing writes nothing and
//     returns RetriesExhausted (its seqs are holes that consumers abort; appending
//     again with the same ids is safe); only a process stopped for longer than
//     QueueTombstoneTTL between that check and its write could write below the floor,
//     unseen. A tombstone that expires before a lagging group reads it is a hole again,
//     aborted again.
//   - Id records and tombstones carry a TTL, so the namespace needs nsup-period > 0 (as
//     for locks and latches); entries, heads, offsets and specs never expire.
//   - ClaimQueuePartition retried after an in-doubt try that was applied returns Held
//     true (the claim's own mark). AddQueueGroup and CreateQueue recognise their own
//     in-doubt tries by a writer id in the spec (AddQueueGroup: the group's entry in gw,
//     which no concurrent call changes; CreateQueue: w, which only it writes).
package aerospike

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueStore = (*Store)(nil)

// Sets of the queue records (see the package doc, Queues).
const (
	QueueSpecSet   = "dcsync_qspec"
	QueueHeadSet   = "dcsync_qhead"
	QueueEntrySet  = "dcsync_qentry"
	QueueOffsetSet = "dcsync_qoffset"
	QueueIDSet     = "dcsync_qid"
)

// QueueTombstoneTTL is how long the tombstone of an aborted seq lives.
const QueueTombstoneTTL = 7 * 24 * time.Hour

const (
	// queueMaxWriteDelay: a producer that held its reservation this long before writing
	// gives it up (see the package doc).
	queueMaxWriteDelay = time.Hour
	// queueBatchRecords and queueBatchBytes bound one batch command.
	queueBatchRecords = 1000
	queueBatchBytes   = 8 << 20
	// queueReadBytes bounds the payload one ReadQueue returns.
	queueReadBytes = 16 << 20
	// queueTrimChunk is the number of deletes per trim step.
	queueTrimChunk = 1000
)

// Bin names of the queue records.
const (
	// spec
	qbName    = "name"
	qbParts   = "parts"
	qbGroups  = "groups"
	qbDedup   = "dedup"
	qbCreated = "created"
	qbWriter  = "w" // CreateQueue's writer id (AddQueueGroup wrote it too before qbGroupWriters)
	// qbGroupWriters maps each group added by AddQueueGroup to the writer id of the
	// call that added it (see AddQueueGroup); absent before the first such group.
	qbGroupWriters = "gw"
	// qbInc is the queue's incarnation id: a random non-zero int that CreateQueue
	// writes in the spec record and every write that may create a head, entry, offset
	// or id record writes in it too (incOp), so that DeleteQueue's batch deletes
	// delete only records of the incarnation they delete (incIs), never those of a
	// queue created again under the name. Specs and records written before this
	// release have none.
	qbInc = "inc"
	// head
	qbHead  = "head"
	qbFloor = "floor"
	qbGC    = "gc"
	qbRes   = "res"
	qbWas   = "was" // the reservation's read result
	// entry
	qbKey     = "k"
	qbID      = "i"
	qbPayload = "v"
	qbAt      = "at"
	qbAborted = "x"
	// offset
	qbToken = "tok"
	qbNext  = "next"
	qbAtt   = "att"
	qbHeld  = "held"
	qbVer   = "ver"   // QueueOffset.Version; absent on records older than it: 0
	qbMarks = "marks" // QueueOffset.Marks, a blob; absent when there are none
	// id record: qbWriter, and
	qbPart = "p"
	qbSeq  = "seq"
)

// ---- keys ----

func lenPrefixed(b *strings.Builder, s string) {
	b.WriteString(strconv.Itoa(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
}

func (s *Store) qkey(set, user string) *as.Key {
	k, err := as.NewKey(s.cfg.Namespace, set, user)
	if err != nil {
		// NewKey fails only for unsupported key types; a string is always supported.
		panic(fmt.Sprintf("aerospike: key: %v", err))
	}
	return k
}

func (s *Store) specKey(name string) *as.Key { return s.qkey(QueueSpecSet, name) }

func partUser(name string, p int) string {
	var b strings.Builder
	lenPrefixed(&b, name)
	b.WriteByte('|')
	b.WriteString(strconv.Itoa(p))
	return b.String()
}

func (s *Store) headKey(name string, p int) *as.Key { return s.qkey(QueueHeadSet, partUser(name, p)) }

func (s *Store) entryKey(name string, p int, seq uint64) *as.Key {
	return s.qkey(QueueEntrySet, partUser(name, p)+"|"+strconv.FormatUint(seq, 10))
}

func (s *Store) offsetKey(name, group string, p int) *as.Key {
	var b strings.Builder
	lenPrefixed(&b, name)
	lenPrefixed(&b, group)
	b.WriteString(strconv.Itoa(p))
	return s.qkey(QueueOffsetSet, b.String())
}

func (s *Store) idKey(name, id string) *as.Key {
	var b strings.Builder
	lenPrefixed(&b, name)
	b.WriteString(id)
	return s.qkey(QueueIDSet, b.String())
}

// nonce returns a random non-zero int64: a writer or reservation id.
func nonce() int64 {
	for {
		if n := mrand.Int64(); n != 0 {
			return n
		}
	}
}

// ---- the store's queue cache ----

// A queue's dedup window never changes, so a store remembers the queues it has seen:
// every operation checks that its queue exists (NotFound), and after the first it
// costs no round trip. DeleteQueue forgets the queue in the store that deletes it;
// another store (process) keeps it until it is closed (see DeleteQueue). It also remembers the
// highest head it read of each partition (heads only grow), for ReadQueue's one-trip
// read.
type queueCache struct {
	specs sync.Map // queue name -> time.Duration (dedup window)
	incs  sync.Map // queue name -> int64 (the spec's incarnation id, qbInc; 0: none)
	heads sync.Map // partUser(name, p) -> uint64
}

var queueCaches = struct {
	sync.Mutex
	m map[weak.Pointer[Store]]*queueCache
}{m: map[weak.Pointer[Store]]*queueCache{}}

func (s *Store) qcache() *queueCache {
	wp := weak.Make(s)
	queueCaches.Lock()
	defer queueCaches.Unlock()
	c, ok := queueCaches.m[wp]
	if !ok {
		c = &queueCache{}
		queueCaches.m[wp] = c
		runtime.AddCleanup(s, func(wp weak.Pointer[Store]) {
			queueCaches.Lock()
			delete(queueCaches.m, wp)
			queueCaches.Unlock()
		}, wp)
	}
	return c
}

func (s *Store) specCache() *sync.Map { return &s.qcache().specs }

// knownHead returns the highest head of partition p that the store has read (0: none).
func (s *Store) knownHead(name string, p int) uint64 {
	if h, ok := s.qcache().heads.Load(partUser(name, p)); ok {
		return h.(uint64)
	}
	return 0
}

// sawHead records a head of partition p read from the server.
func (s *Store) sawHead(name string, p int, head uint64) {
	heads, k := &s.qcache().heads, partUser(name, p)
	for {
		old, loaded := heads.LoadOrStore(k, head)
		if !loaded || old.(uint64) >= head || heads.CompareAndSwap(k, old, head) {
			return
		}
	}
}

// queueDedup returns the dedup window of queue name, or NotFound.
func (s *Store) queueDedup(ctx context.Context, op, name string) (time.Duration, error) {
	c := s.specCache()
	if d, ok := c.Load(name); ok {
		return d.(time.Duration), nil
	}
	spec, _, err := s.readSpec(ctx, op, name)
	if err != nil {
		return 0, err
	}
	return spec.DedupWindow(), nil
}

// queueInc returns the incarnation id (qbInc) of queue name, 0 when its spec has none
// (created before this release), or NotFound. Like the dedup window it is cached:
// no round trip after the store's first call on the queue.
func (s *Store) queueInc(ctx context.Context, op, name string) (int64, error) {
	if inc, ok := s.qcache().incs.Load(name); ok {
		return inc.(int64), nil
	}
	_, _, inc, err := s.readSpecInc(ctx, op, name)
	return inc, err
}

// incOp is the op that writes incarnation id inc (see qbInc) into a queue record:
// every write that may create a head, entry, offset or id record carries it, so that
// a record written by this release holds the incarnation of the queue that wrote it
// last (a record of another incarnation, left by a process whose cache held a queue
// deleted since, is relabelled by the next write of the live one). nil when inc is 0
// (a queue created before this release): the record gets no bin, as before.
func incOp(inc int64) *as.Operation {
	if inc == 0 {
		return nil
	}
	return as.PutOp(as.NewBin(qbInc, inc))
}

// withInc returns ops followed by incOp(inc) when it is not nil.
func withInc(ops []*as.Operation, inc int64) []*as.Operation {
	if op := incOp(inc); op != nil {
		return append(ops, op)
	}
	return ops
}

// incIs is true on a record of the queue incarnation inc (see qbInc): one whose
// incarnation bin is inc, or that has none (written before this release, or for a
// queue created before it, whose records never carry one). A record that carries
// another incarnation id belongs to a queue created again under the name.
func incIs(inc int64) *as.Expression {
	return as.ExpOr(as.ExpNot(as.ExpBinExists(qbInc)), as.ExpEq(as.ExpIntBin(qbInc), as.ExpIntVal(inc)))
}

// ---- batches ----

// runBatch sends recs (in commands of at most queueBatchRecords records and
// queueBatchBytes bytes, size(i) estimating record i's) until every record has an
// outcome: OK or a result code in expect. Records that failed transiently are sent
// again, the others not, under the store's retry rules (write: the records write).
func (s *Store) runBatch(ctx context.Context, op string, write bool, recs []as.BatchRecordIfc, size func(int) int, expect ...types.ResultCode) error {
	return s.runBatchUpTo(ctx, op, write, recs, queueBatchRecords, size, expect...)
}

// runBatchUpTo is runBatch with commands of at most maxRecords records (0: bounded by
// bytes only). A command the server refuses as too many records for one node (its
// service setting batch-max-requests; 0, no limit, by default on 8.1) is sent again in
// halves when none of its records got an outcome (nothing of it ran).
func (s *Store) runBatchUpTo(ctx context.Context, op string, write bool, recs []as.BatchRecordIfc, maxRecords int, size func(int) int, expect ...types.ResultCode) error {
	if len(recs) == 0 {
		return nil
	}
	pending := make([]int, len(recs))
	for i := range pending {
		pending[i] = i
	}
	final := func(rc types.ResultCode) bool { return rc == types.OK || slices.Contains(expect, rc) }
	return s.retry(ctx, op, write, func(*attempt) error {
		errs := make(map[int]error)
		for start := 0; start < len(pending); {
			end, bytes := start, 0
			for end < len(pending) && (maxRecords <= 0 || end-start < maxRecords) {
				if size != nil {
					n := size(pending[end]) + 64
					if end > start && bytes+n > queueBatchBytes {
						break
					}
					bytes += n
				}
				end++
			}
			chunk := make([]as.BatchRecordIfc, 0, end-start)
			for _, i := range pending[start:end] {
				br := recs[i].BatchRec()
				br.Record, br.Err, br.ResultCode, br.InDoubt = nil, nil, types.NO_RESPONSE, false
				chunk = append(chunk, recs[i])
			}
			if err := s.client.BatchOperate(s.batchPolicy(ctx), chunk); err != nil {
				rc, hasRC := resultCode(err)
				if hasRC && rc == types.BATCH_MAX_REQUESTS_EXCEEDED && len(chunk) > 1 && noOutcome(chunk) {
					maxRecords = len(chunk) / 2 // and send this chunk again, in halves
					continue
				}
				for _, i := range pending[start:end] {
					br := recs[i].BatchRec()
					if br.ResultCode != types.NO_RESPONSE {
						continue
					}
					if hasRC && len(chunk) == 1 && final(rc) {
						// A one-record batch's error may be the record's own.
						br.ResultCode = rc
						continue
					}
					errs[i] = err
				}
			}
			start = end
		}
		var next []int
		var first error
		for _, i := range pending {
			br := recs[i].BatchRec()
			err := errs[i]
			if err == nil {
				if final(br.ResultCode) {
					continue
				}
				err = br.Err
				if err == nil {
					err = &as.AerospikeError{ResultCode: br.ResultCode}
				}
			}
			if !transient(err) {
				return err
			}
			next = append(next, i)
			if first == nil || busy(first) {
				first = err // report a failure that may have applied over a busy one
			}
		}
		pending = next
		return first
	})
}

// noOutcome reports whether no record of recs got an outcome from the server.
func noOutcome(recs []as.BatchRecordIfc) bool {
	for _, r := range recs {
		if r.BatchRec().ResultCode != types.NO_RESPONSE {
			return false
		}
	}
	return true
}

// ---- spec ----

func checkQueueName(name string) error { return driver.ValidateID("queue", name) }

// readSpec reads queue name's spec and its record's generation, or NotFound (also
// when the spec record holds a deletion mark: see DeleteQueue), and caches its dedup
// window.
func (s *Store) readSpec(ctx context.Context, op, name string) (driver.QueueSpec, uint32, error) {
	spec, gen, _, err := s.readSpecInc(ctx, op, name)
	return spec, gen, err
}

// readSpecInc is readSpec that also returns the spec's incarnation id (qbInc; 0:
// none), which it caches too.
func (s *Store) readSpecInc(ctx context.Context, op, name string) (driver.QueueSpec, uint32, int64, error) {
	spec, rec, err := s.readSpecRecord(ctx, op, name)
	if err != nil {
		return driver.QueueSpec{}, 0, 0, err
	}
	return spec, rec.Generation, intBinOr0(rec, qbInc), nil
}

// readSpecRecord is readSpec that returns the whole spec record (never nil without an
// error).
func (s *Store) readSpecRecord(ctx context.Context, op, name string) (driver.QueueSpec, *as.Record, error) {
	rec, err := s.getRecord(ctx, op, s.specKey(name))
	if err != nil {
		return driver.QueueSpec{}, nil, err
	}
	if rec == nil || deletingMark(rec) != 0 {
		return driver.QueueSpec{}, nil, driver.Errorf(dcsync.NotFound, op, "queue %q does not exist", name)
	}
	spec := specOf(name, rec.Bins)
	s.cacheQueue(name, spec.DedupWindow(), intBinOr0(rec, qbInc))
	return spec, rec, nil
}

// groupWriter returns the writer id that spec record rec holds for group in
// qbGroupWriters: the id of the AddQueueGroup call that added it; 0 when there is none
// (a group of CreateQueue's spec, or added by a release before qbGroupWriters).
func groupWriter(rec *as.Record, group string) int64 {
	m, _ := rec.Bins[qbGroupWriters].(map[any]any)
	w, _ := intOf(m[group])
	return w
}

// cacheQueue remembers queue name's dedup window and incarnation id.
func (s *Store) cacheQueue(name string, dedup time.Duration, inc int64) {
	c := s.qcache()
	c.incs.Store(name, inc)
	c.specs.Store(name, dedup)
}

func specOf(name string, bins as.BinMap) driver.QueueSpec {
	spec := driver.QueueSpec{Name: name}
	if n, ok := intOf(bins[qbParts]); ok {
		spec.Partitions = int(n)
	}
	if l, ok := bins[qbGroups].([]any); ok {
		for _, g := range l {
			if gs, ok := g.(string); ok {
				spec.Groups = append(spec.Groups, gs)
			}
		}
	}
	if d, ok := intOf(bins[qbDedup]); ok {
		spec.Dedup = time.Duration(d)
	}
	if ms, ok := intOf(bins[qbCreated]); ok {
		spec.Created = time.UnixMilli(ms)
	}
	return spec
}

func groupsValue(groups []string) []any {
	l := make([]any, len(groups))
	for i, g := range groups {
		l[i] = g
	}
	return l
}

// CreateQueue implements driver.QueueStore: a create-only write of the spec record,
// with the creation time by the server's clock and a new random incarnation id
// (qbInc), which the queue's records carry and DeleteQueue's deletes are filtered on.
// A retry after an in-doubt try that finds the record recognises its own writer id in
// it. A spec record that holds a deletion mark (a DeleteQueue cut short) is a queue
// being deleted: CreateQueue finishes that delete first (see DeleteQueue), so the new
// queue starts empty.
func (s *Store) CreateQueue(ctx context.Context, spec driver.QueueSpec) error {
	const op = "aerospike.CreateQueue"
	if err := driver.ValidateQueueSpec(spec); err != nil {
		return err
	}
	w, inc := nonce(), nonce()
	ops := []*as.Operation{
		as.PutOp(as.NewBin(qbName, spec.Name)),
		as.PutOp(as.NewBin(qbParts, spec.Partitions)),
		as.PutOp(as.NewBin(qbGroups, groupsValue(spec.Groups))),
		as.PutOp(as.NewBin(qbDedup, int64(spec.Dedup))),
		as.PutOp(as.NewBin(qbWriter, w)),
		as.PutOp(as.NewBin(qbInc, inc)),
		as.ExpWriteOp(qbCreated, serverNow(), as.ExpWriteFlagDefault),
	}
	for round := 0; round < deleteRounds; round++ {
		_, code, err := s.write(ctx, op, func() *as.WritePolicy {
			wp := s.writePolicy(ctx, as.TTLDontExpire)
			wp.RecordExistsAction = as.CREATE_ONLY
			return wp
		}, s.specKey(spec.Name), ops, types.KEY_EXISTS_ERROR)
		if err != nil {
			return err
		}
		if code == types.OK {
			s.cacheQueue(spec.Name, spec.DedupWindow(), inc)
			return nil
		}
		rec, err := s.getRecord(ctx, op, s.specKey(spec.Name))
		switch {
		case err != nil:
			return err
		case rec == nil:
			continue // deleted meanwhile
		case deletingMark(rec) != 0:
			if err := s.finishDelete(ctx, op, spec.Name, rec); err != nil {
				return err
			}
			continue
		}
		if ow, _ := intOf(rec.Bins[qbWriter]); ow == w {
			s.cacheQueue(spec.Name, spec.DedupWindow(), inc)
			return nil
		}
		return driver.Errorf(dcsync.AlreadyExists, op, "queue %q exists", spec.Name)
	}
	return driver.Errorf(dcsync.RetriesExhausted, op, "queue %q: its spec record changed under %d tries to create it", spec.Name, deleteRounds)
}

// getRecord reads a whole record; nil when there is none.
func (s *Store) getRecord(ctx context.Context, op string, key *as.Key) (*as.Record, error) {
	var rec *as.Record
	err := s.retry(ctx, op, false, func(*attempt) error {
		r, err := s.client.Get(s.readPolicy(ctx), key)
		switch {
		case hasCode(err, types.KEY_NOT_FOUND_ERROR):
			rec = nil
			return nil
		case err != nil:
			return err
		}
		rec = r
		return nil
	})
	return rec, err
}

// ReadQueueSpec implements driver.QueueStore.
func (s *Store) ReadQueueSpec(ctx context.Context, name string) (driver.QueueSpec, error) {
	if err := checkQueueName(name); err != nil {
		return driver.QueueSpec{}, err
	}
	spec, _, err := s.readSpec(ctx, "aerospike.ReadQueueSpec", name)
	return spec, err
}

// AddQueueGroup implements driver.QueueStore: the spec record is read and written back
// with the group appended, expecting the generation read (a concurrent change makes it
// read again). The write also records, in the map bin qbGroupWriters, the group's
// writer id: a random id of this call. A retry after an in-doubt try decides by that
// entry alone, which no other call changes (groups are never removed, and only the
// call that adds a group writes its entry): the group present with this call's id is
// this call's (its try was applied: the spec, nil), with any other id or none another
// call's (AlreadyExists). (It used to compare the spec's single writer bin w, which a
// concurrent AddQueueGroup of another group overwrites: a call whose own try had
// landed returned AlreadyExists. AddQueueGroup no longer writes w, which is now
// CreateQueue's alone, so CreateQueue's retry, which compares it, is not misled
// either.) Then it increments the trim guard tg of every shared partition's head
// record (see "Trims against added groups" in queue_trim.go); an error may leave the
// group added, and the call made again (AlreadyExists) increments them again.
//
// Releases before qbGroupWriters read such a spec record as before (they ignore the
// bin) and write w when they add a group, leaving qbGroupWriters alone: their groups
// have no entry, which reads as another call's.
func (s *Store) AddQueueGroup(ctx context.Context, name, group string) (driver.QueueSpec, error) {
	const op = "aerospike.AddQueueGroup"
	if err := checkQueueName(name); err != nil {
		return driver.QueueSpec{}, err
	}
	if err := driver.ValidateID("group", group); err != nil {
		return driver.QueueSpec{}, err
	}
	w := nonce()
	for round := 0; round < maxRounds*4; round++ {
		spec, rec, err := s.readSpecRecord(ctx, op, name)
		if err != nil {
			return driver.QueueSpec{}, err
		}
		if spec.GroupIndex(group) >= 0 {
			// Incremented again here too, so that whichever call returns (this one, or
			// one whose increment failed) no trim passes the group (see "Trims against
			// added groups" in queue_trim.go).
			if err := s.bumpTrimGuards(ctx, op, name, spec.Partitions); err != nil {
				return driver.QueueSpec{}, err
			}
			if groupWriter(rec, group) == w {
				return spec, nil // our in-doubt try was applied
			}
			return spec, driver.Errorf(dcsync.AlreadyExists, op, "queue %q has group %q", name, group)
		}
		if len(spec.Groups) >= driver.MaxQueueGroups {
			return driver.QueueSpec{}, driver.Errorf(dcsync.InvalidArgument, op, "queue %q has %d groups, the most it can have", name, len(spec.Groups))
		}
		groups := append(slices.Clone(spec.Groups), group)
		_, code, err := s.write(ctx, op, func() *as.WritePolicy {
			wp := s.writePolicy(ctx, as.TTLDontUpdate)
			wp.RecordExistsAction = as.UPDATE_ONLY
			wp.GenerationPolicy = as.EXPECT_GEN_EQUAL
			wp.Generation = rec.Generation
			return wp
		}, s.specKey(name), []*as.Operation{
			as.PutOp(as.NewBin(qbGroups, groupsValue(groups))),
			as.MapPutOp(as.DefaultMapPolicy(), qbGroupWriters, group, w),
		}, types.GENERATION_ERROR, types.KEY_NOT_FOUND_ERROR)
		if err != nil {
			return driver.QueueSpec{}, err
		}
		if code == types.OK {
			// Then the trim guards: a trim that read the spec before this write has
			// its raise refused (see "Trims against added groups").
			if err := s.bumpTrimGuards(ctx, op, name, spec.Partitions); err != nil {
				return driver.QueueSpec{}, err
			}
			spec.Groups = groups
			return spec, nil
		}
		// Changed meanwhile (or our in-doubt try applied): read again.
	}
	return driver.QueueSpec{}, driver.Errorf(dcsync.RetriesExhausted, op, "queue %q: the spec changed under %d tries to add group %q", name, maxRounds*4, group)
}

// ---- small helpers ----

func uintOf(v any) uint64 {
	n, ok := intOf(v)
	if !ok || n < 0 {
		return 0
	}
	return uint64(n)
}

// headOr0 is bin's integer, or 0 when the record lacks it.
func binOr0(bin string) *as.Expression {
	return as.ExpCond(as.ExpBinExists(bin), as.ExpIntBin(bin), as.ExpIntVal(0))
}
