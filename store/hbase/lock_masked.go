package hbase

import (
	"bytes"
	"cmp"
	"context"
	"maps"
	"math"
	"slices"
	"sync"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// A Java lock that nobody can read. The Java DLM stamps its acquire Put with the
// client's clock (HBaseStore.java:81, new Put(row, System.currentTimeMillis())) and
// releases with a row Delete that the server stamps with its own current time
// (HBaseStore.java:101-107). A delete marker hides every cell of the row up to its
// timestamp, whenever that cell was written. So a Java acquire whose Put is stamped at
// or before the millisecond of the previous Java release, but reaches the server after
// it (same millisecond, a request in flight, or a client clock behind the server's),
// succeeds and is hidden at once: its holder believes it holds the lock, and every
// other client, Java or dcsync, reads the row as free.
//
// dcsync sees it with a raw read, which returns delete markers and the Puts they hide
// (hbaserpc.Get.Raw). Each Java hold leaves one Put (D:L = "M", no dcsync cell at its
// version) and, once released, one family delete marker at or after it. Cells whose
// TTL has passed are left out by the server. So when a live Java Put is left over
// once each marker has released a Put older than it, some Java holder has not
// released yet although its Put is hidden: the lock is held by Java until that Put's
// TTL ends (see javaMaskedHolds for what this misses and over-counts).
//
// The raw read rides in the call that acquires (AcquireLock's write already reads the
// row back in the same call to the server), so the common path keeps its round trips.
// When it finds a hidden Java hold, the acquire that has just taken the row frees it
// again at once (one more call, only then) and reports LockUnavailable; the row is then
// remembered, and later acquires of it by this process read it raw first, without
// writing, until the hidden hold is gone: each write would add a version above the
// hidden Put, and a raw read returns only maskedReadVersions of each column.

// maskedReadVersions is how many versions of each column of the lock row the raw read
// returns, newest first. Every dcsync acquire that takes the row adds one, and so does
// every Java hold; a hidden Java Put further down is missed.
const maskedReadVersions = 8

// maxMaskedRows bounds the rows remembered as hiding a Java hold.
const maxMaskedRows = 1024

// maskedRows are the lock rows (table + "\x00" + row) where this process found a hidden
// Java hold. The state of a row does not depend on the store reading it, so one set
// serves every store of the process; a row is forgotten by the first raw read that
// finds no hidden hold in it.
var maskedRows = struct {
	sync.Mutex
	m map[string]struct{}
}{m: map[string]struct{}{}}

func maskedKey(table string, row []byte) string { return table + "\x00" + string(row) }

func rememberMasked(table string, row []byte, masked bool) {
	k := maskedKey(table, row)
	maskedRows.Lock()
	defer maskedRows.Unlock()
	switch {
	case !masked:
		delete(maskedRows.m, k)
	case len(maskedRows.m) < maxMaskedRows:
		maskedRows.m[k] = struct{}{}
	}
}

func isRememberedMasked(table string, row []byte) bool {
	maskedRows.Lock()
	defer maskedRows.Unlock()
	_, ok := maskedRows.m[maskedKey(table, row)]
	return ok
}

// maskedCheckOff lists stores whose acquires skip the detection (tests measure what
// happens without it).
var maskedCheckOff sync.Map // *Store -> struct{}

func (s *Store) maskedCheck() bool {
	_, off := maskedCheckOff.Load(s)
	return !off
}

// rawGetOps is what the detection needs of the store's client beyond ops.
// *hbaserpc.Client has it; a test wrapper that embeds ops only goes without the
// detection.
type rawGetOps interface {
	CheckAndMutateGets(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, gets ...hbaserpc.Get) (bool, []hbaserpc.Cell, [][]hbaserpc.Cell, error)
}

func rawLockGet() hbaserpc.Get {
	return hbaserpc.Get{Raw: true, MaxVersions: maskedReadVersions}
}

// takeRead is AcquireLock's call: check-and-mutate muts under cond, then read
// the row's lock family back in the same call, and also read it raw (when the client
// can) to tell whether it hides a Java hold.
func (s *Store) takeRead(ctx context.Context, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation) (applied bool, cells []hbaserpc.Cell, javaHidden bool, err error) {
	rg, ok := s.db.(rawGetOps)
	if !ok || !s.maskedCheck() {
		applied, _, cells, err = s.db.CheckAndMutateRead(ctx, s.lockTable, row, cond, muts, hbaserpc.Column{Family: famLock})
		return applied, cells, false, err
	}
	applied, _, reads, err := rg.CheckAndMutateGets(ctx, s.lockTable, row, cond, muts,
		hbaserpc.Get{Columns: []hbaserpc.Column{{Family: famLock}}}, rawLockGet())
	if err != nil {
		return false, nil, false, err
	}
	return applied, reads[0], javaMaskedHolds(reads[1]) > 0, nil
}

// hiddenJavaHoldFirst is the step before AcquireLock's write for a row where this
// process found a hidden Java hold: it reads the row raw (one call, only for such
// rows) and returns LockUnavailable while the hold is there, nil once it is gone.
func (s *Store) hiddenJavaHoldFirst(ctx context.Context, op string, k dcsync.Key, row []byte) error {
	if !isRememberedMasked(s.lockTable, row) || !s.maskedCheck() {
		return nil
	}
	g := rawLockGet()
	g.Row = row
	res, err := s.db.MultiGet(ctx, s.lockTable, []hbaserpc.Get{g})
	if err != nil {
		return wrap(err, op)
	}
	if javaMaskedHolds(res[0]) == 0 {
		rememberMasked(s.lockTable, row, false)
		return nil
	}
	return hiddenJavaHold(op, k)
}

// yieldToHiddenJava ends an acquire whose write took the row r although the row hides
// a Java hold: it frees the row again (best effort: the cells lapse with the lease
// otherwise), remembers the row, and reports LockUnavailable.
func (s *Store) yieldToHiddenJava(op string, k dcsync.Key, row []byte, owner string, r lockRow) (driver.LockState, error) {
	s.log.Debug("hbase: the row hides a Java acquire behind a Java release of the same millisecond; yielding", "key", k.String())
	rememberMasked(s.lockTable, row, true)
	s.releaseQuiet(row, owner, r)
	return driver.LockState{}, hiddenJavaHold(op, k)
}

func hiddenJavaHold(op string, k dcsync.Key) error {
	return driver.Errorf(dcsync.LockUnavailable, op,
		"%s is held by a Java client whose acquire is hidden by an earlier Java release of the same millisecond (until its TTL ends)", k)
}

// javaMaskedHolds counts, in a raw read of a lock row (every cell type, at most
// maskedReadVersions versions of each column, newest first), the Java holds not yet
// released. A Java hold leaves a live Put (D:L non-empty with no dcsync D:E at the same
// version) and, once released, a family delete marker at or after it. Walking the Puts
// and markers from the oldest, each marker releases one Put seen before it (a Put at
// the marker's own millisecond is before it: the marker hides it); a marker with no
// Put before it (a release of a lock not held) releases nothing. What is left are
// holds not released: a Java acquire hidden by the release before it (its Put is at or
// before that marker, though written after it) stays unreleased until its own release
// adds a marker; a visible Java holder counts too.
//
// Only what both reads reach is walked: when a column returned maskedReadVersions
// versions, older ones may be missing, so Puts and markers older than its oldest
// version returned are left out.
//
// Missed: a Put hidden in the very millisecond of the previous Java hold's own Put
// (one version holds the two); a hidden Put the region has since flushed (a flush drops
// what markers hide), or that has fallen below maskedReadVersions newer versions (a
// Put stamped long before it was written falls low); one hidden behind an extra
// release (a Java release of a lock not held). Over-counted (the lock is held for
// dcsync until the Put's TTL ends): two Java releases of the same millisecond (one
// marker version), i.e. a hidden holder that released within the millisecond it
// acquired.
func javaMaskedHolds(raw []hbaserpc.Cell) int {
	dcsyncVersions := map[int64]bool{}
	for _, c := range raw {
		if c.Type == hbaserpc.CellPut && bytes.Equal(c.Family, famLock) && bytes.Equal(c.Qualifier, qualExpiry) {
			dcsyncVersions[c.Timestamp] = true
		}
	}
	puts := map[int64]bool{} // D:L version -> a Java hold (the newest write of the version decides)
	markers := map[int64]bool{}
	for _, c := range raw {
		switch {
		case !bytes.Equal(c.Family, famLock):
		case c.Type == hbaserpc.CellDeleteFamily:
			markers[c.Timestamp] = true
		case c.Type == hbaserpc.CellPut && bytes.Equal(c.Qualifier, qualLock):
			if _, seen := puts[c.Timestamp]; !seen {
				puts[c.Timestamp] = len(c.Value) > 0 && !dcsyncVersions[c.Timestamp]
			}
		}
	}
	horizon := int64(math.MinInt64)
	for _, versions := range []map[int64]bool{puts, markers} {
		if len(versions) >= maskedReadVersions {
			horizon = max(horizon, slices.Min(slices.Collect(maps.Keys(versions))))
		}
	}
	type event struct {
		ts     int64
		marker bool
	}
	var events []event
	for ts, java := range puts {
		if java && ts >= horizon {
			events = append(events, event{ts, false})
		}
	}
	if len(events) == 0 {
		return 0
	}
	for ts := range markers {
		if ts >= horizon {
			events = append(events, event{ts, true})
		}
	}
	slices.SortFunc(events, func(a, b event) int {
		if a.ts != b.ts {
			return cmp.Compare(a.ts, b.ts)
		}
		if a.marker == b.marker {
			return 0
		}
		if b.marker {
			return -1 // a Put before the marker of its millisecond
		}
		return 1
	})
	held := 0
	for _, e := range events {
		switch {
		case !e.marker:
			held++
		case held > 0:
			held--
		}
	}
	return held
}
