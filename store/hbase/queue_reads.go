package hbase

import (
	"context"
	"sync"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

var _ driver.QueueBatchReader = (*Store)(nil)

// knownHead returns the highest head of partition p of queue name that the store has
// read or reserved (0: none). Heads only grow while the queue lives; a head of a
// queue deleted since is only a guess too high, which costs reads of rows that are
// not there (every read is cut at the head read with it).
func (s *Store) knownHead(name string, p int) uint64 {
	if h, ok := s.queue().heads.Load(string(partPrefix(name, p))); ok {
		return h.(uint64)
	}
	return 0
}

// sawHead records a head of partition p of queue name read or reserved.
func (s *Store) sawHead(name string, p int, head uint64) {
	heads, k := &s.queue().heads, string(partPrefix(name, p))
	for {
		old, loaded := heads.LoadOrStore(k, head)
		if !loaded || old.(uint64) >= head || heads.CompareAndSwap(k, old, head) {
			return
		}
	}
}

// readGetsMax is the most entry rows ReadQueues reads of one partition by Gets in its
// MultiGets; a read of more is ReadQueue's scan (a scan reads a range of rows cheaper
// than one Get per row does).
const readGetsMax = 128

// readsAtOnce bounds the scans of one ReadQueues call in flight.
const readsAtOnce = 8

// ReadQueues implements driver.QueueBatchReader with MultiGets, each one Multi
// request per region server for all the reads. The first reads every partition's
// head row and the entry rows from From that the store knows to be below the head
// (the highest head it has read or reserved: a consumer's reads after the hub's
// QueueBounds or this process's appends); the entries are then cut at the head read
// in the same request, at the first row that holds no entry (a hole) or a trimmed
// mark, and at Max, as ReadQueue's scan cuts them. The reads whose head is above what
// the store knew, or whose Floor is above From, get the rest of their entry rows in a
// second MultiGet, all of them at once. A read of more than readGetsMax rows (a
// consumer catching up) is ReadQueue's head Get and scan instead, up to readsAtOnce
// at a time, beside the MultiGets. Rows and cells read are ReadQueue's.
func (s *Store) ReadQueues(ctx context.Context, name string, reads []driver.QueueReadReq) ([]driver.QueueReadResult, error) {
	const op = "hbase.ReadQueues"
	if err := driver.ValidateQueueReads(name, reads); err != nil {
		return nil, err
	}
	out := make([]driver.QueueReadResult, len(reads))
	if len(reads) == 0 {
		return out, nil
	}
	table, db, err := s.qready(ctx, op)
	if err != nil {
		return nil, err
	}
	if _, err := s.knownSpec(ctx, db, table, op, name); err != nil {
		return nil, err
	}
	// Reads of many rows: scans, in the background.
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, readsAtOnce)
		scan = func(i int) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				r := reads[i]
				out[i].QueueRead, out[i].Err = s.readPart(ctx, db, table, op, name, r.P, r.From, r.Max)
			}()
		}
	)
	defer wg.Wait()
	type plan struct {
		prefix []byte
		head   int    // index of the head row in gets (-1: scanned); n entry rows follow it
		n      int    // entry rows read with the head
		end    uint64 // the read ends before end (Head, or start+Max)
	}
	plans := make([]plan, len(reads))
	var gets []hbaserpc.Get
	for i, r := range reads {
		prefix := partPrefix(name, r.P)
		n := 0
		if known := s.knownHead(name, r.P); known > r.From {
			n = int(min(uint64(r.Max), known-r.From))
		}
		if n > readGetsMax {
			plans[i].head = -1
			scan(i)
			continue
		}
		plans[i] = plan{prefix: prefix, head: len(gets), n: n}
		gets = append(gets, hbaserpc.Get{Row: headRow(name, r.P), Columns: headCols})
		for seq := r.From; seq < r.From+uint64(n); seq++ {
			gets = append(gets, hbaserpc.Get{Row: entryRow(prefix, seq), Columns: entryCols})
		}
	}
	if len(gets) == 0 {
		return out, nil
	}
	rows, err := db.MultiGet(ctx, table, gets)
	if err != nil {
		wg.Wait()
		return nil, wrap(err, op)
	}
	// take appends the entry in cells at seq to read i; it reports whether the read
	// goes on.
	take := func(i int, seq uint64, cells []hbaserpc.Cell) bool {
		if seq >= plans[i].end {
			return false
		}
		e, found, err := findEntry(cells)
		if err != nil {
			out[i].QueueRead = driver.QueueRead{}
			out[i].Err = driver.Errorf(dcsync.Internal, op, "queue %q partition %d seq %d: %v", name, reads[i].P, seq, err)
			return false
		}
		if !found || e.kind == kindTrimmed {
			return false // a gap (a reserved seq not written yet), or trimmed since
		}
		out[i].Entries = append(out[i].Entries, e.queueEntry(seq))
		return true
	}
	type more struct {
		i      int
		lo, hi uint64
		first  int // index of the first row in gets2
	}
	var (
		rest  []more
		gets2 []hbaserpc.Get
	)
	for i, r := range reads {
		pl, res := &plans[i], &out[i]
		if pl.head < 0 {
			continue
		}
		b, err := decodeBounds(op, rows[pl.head])
		if err != nil {
			res.Err = err
			continue
		}
		res.QueueBounds = b
		s.sawHead(name, r.P, b.Head)
		start := max(r.From, b.Floor)
		if start >= b.Head {
			continue
		}
		pl.end = min(b.Head, start+uint64(r.Max))
		stopped := false
		if start == r.From {
			for k := 0; k < pl.n && !stopped; k++ {
				// Stopped at the end, a gap or a trimmed row.
				stopped = !take(i, r.From+uint64(k), rows[pl.head+1+k])
			}
		}
		lo := start + uint64(len(res.Entries))
		if stopped || res.Err != nil || lo >= pl.end {
			continue
		}
		if pl.end-lo > readGetsMax {
			res.QueueRead = driver.QueueRead{}
			plans[i].head = -1
			scan(i)
			continue
		}
		rest = append(rest, more{i: i, lo: lo, hi: pl.end, first: len(gets2)})
		for seq := lo; seq < pl.end; seq++ {
			gets2 = append(gets2, hbaserpc.Get{Row: entryRow(pl.prefix, seq), Columns: entryCols})
		}
	}
	if len(gets2) == 0 {
		return out, nil
	}
	rows2, err := db.MultiGet(ctx, table, gets2)
	for _, m := range rest {
		if err != nil {
			out[m.i].QueueRead, out[m.i].Err = driver.QueueRead{}, wrap(err, op)
			continue
		}
		for seq := m.lo; seq < m.hi; seq++ {
			if !take(m.i, seq, rows2[m.first+int(seq-m.lo)]) {
				break
			}
		}
	}
	return out, nil
}
