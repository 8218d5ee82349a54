package aerospike

import (
	"context"
	"sync"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"

	"github.com/dcsync/dcsync/driver"
)

var _ driver.QueueBatchReader = (*Store)(nil)

// ReadQueues implements driver.QueueBatchReader. One batch (one command per node, in
// commands of at most queueBatchRecords records sent at once: readBatches) reads every partition's head record and the
// entries from From that the store knows to be below the head (the highest head it
// has read or reserved, knownHead: a consumer's reads after the hub's QueueBounds or
// this process's appends); the entries are then cut at the head read in the same
// batch, at the first missing one, at Max and after queueReadBytes of payload, as
// ReadQueue cuts them. The reads whose head is above what the store knew (or whose
// Floor is above From) get the rest of their entries in a second batch, all of them
// at once; a read that finds no entry where its head says there are some (a hole, or
// a trim since) is done as ReadQueue does it (readHeadFirst: the head again). The
// record layout is ReadQueue's: nothing else is read or written.
func (s *Store) ReadQueues(ctx context.Context, name string, reads []driver.QueueReadReq) ([]driver.QueueReadResult, error) {
	const op = "aerospike.ReadQueues"
	if err := driver.ValidateQueueReads(name, reads); err != nil {
		return nil, err
	}
	out := make([]driver.QueueReadResult, len(reads))
	if len(reads) == 0 {
		return out, nil
	}
	if _, err := s.queueDedup(ctx, op, name); err != nil {
		return nil, err
	}
	// The first batch: head records and the entries known to be there.
	type plan struct {
		head, n int    // index of the head record in recs; entries read after it
		end     uint64 // the read ends before end (Head, or start+Max)
		bytes   int    // payload taken so far
		done    bool
		slow    bool // nothing found where the head says entries are: readHeadFirst
	}
	plans := make([]plan, len(reads))
	var recs []as.BatchRecordIfc
	for i, r := range reads {
		n := 0
		if known := s.knownHead(name, r.P); known > r.From {
			n = int(min(uint64(r.Max), known-r.From, queueBatchRecords))
		}
		plans[i] = plan{head: len(recs), n: n}
		recs = append(recs, as.NewBatchRead(nil, s.headKey(name, r.P), []string{qbHead, qbFloor}))
		for seq := r.From; seq < r.From+uint64(n); seq++ {
			recs = append(recs, as.NewBatchRead(nil, s.entryKey(name, r.P, seq), nil))
		}
	}
	if err := s.readBatches(ctx, op, recs); err != nil {
		return nil, err
	}
	// take appends the entry of br at seq to read i; it reports whether the read goes on.
	take := func(i int, seq uint64, br *as.BatchRecord) bool {
		pl, res := &plans[i], &out[i]
		if seq >= pl.end || br.ResultCode != types.OK || br.Record == nil {
			return false
		}
		e := entryOf(seq, br.Record.Bins)
		res.Entries = append(res.Entries, e)
		pl.bytes += len(e.Payload)
		return pl.bytes < queueReadBytes
	}
	type more struct {
		i      int
		lo, hi uint64
		first  int // index of the first entry record in recs2
	}
	var (
		rest  []more
		recs2 []as.BatchRecordIfc
	)
	for i, r := range reads {
		pl, res := &plans[i], &out[i]
		hr := recs[pl.head].BatchRec()
		if hr.ResultCode == types.OK && hr.Record != nil {
			res.QueueBounds = driver.QueueBounds{Head: uintOf(hr.Record.Bins[qbHead]), Floor: uintOf(hr.Record.Bins[qbFloor])}
		}
		s.sawHead(name, r.P, res.Head)
		start := max(r.From, res.Floor)
		if start >= res.Head {
			pl.done = true
			continue
		}
		pl.end = min(res.Head, start+uint64(r.Max))
		if start == r.From {
			for k := 0; k < pl.n; k++ {
				if !take(i, r.From+uint64(k), recs[pl.head+1+k].BatchRec()) {
					// The head, a missing entry (a hole, or a trim since), or enough
					// payload: the read ends here, unless nothing was found.
					pl.done = len(res.Entries) > 0
					pl.slow = !pl.done
					break
				}
			}
		}
		if pl.done || pl.slow {
			continue
		}
		lo := start + uint64(len(res.Entries))
		if lo >= pl.end {
			pl.done = true
			continue
		}
		rest = append(rest, more{i: i, lo: lo, hi: pl.end, first: len(recs2)})
		for seq := lo; seq < pl.end; seq++ {
			recs2 = append(recs2, as.NewBatchRead(nil, s.entryKey(name, r.P, seq), nil))
		}
	}
	// The second batch: the entries of heads the store did not know, all reads at once.
	if len(recs2) > 0 {
		if err := s.readBatches(ctx, op, recs2); err != nil {
			for _, m := range rest {
				out[m.i].QueueRead, out[m.i].Err = driver.QueueRead{}, err
				plans[m.i].done = true
			}
		}
		for _, m := range rest {
			pl := &plans[m.i]
			if pl.done {
				continue
			}
			had := len(out[m.i].Entries)
			for seq := m.lo; seq < m.hi; seq++ {
				if !take(m.i, seq, recs2[m.first+int(seq-m.lo)].BatchRec()) {
					break
				}
			}
			pl.slow = len(out[m.i].Entries) == 0 && had == 0
		}
	}
	for i, r := range reads {
		if plans[i].slow {
			out[i].QueueRead, out[i].Err = s.readHeadFirst(ctx, op, name, r.P, r.From, r.Max)
		}
	}
	return out, nil
}

// readsAtOnce bounds the commands of one readBatches call in flight.
const readsAtOnce = 8

// readBatches reads recs (missing records are not an error) in commands of at most
// queueBatchRecords records, up to readsAtOnce of them at once, where runBatch sends
// its commands one after another: a consumer catching up on 16 partitions reads
// 16 × 512 records, which ReadQueue calls read 8 partitions at a time.
func (s *Store) readBatches(ctx context.Context, op string, recs []as.BatchRecordIfc) error {
	if len(recs) <= queueBatchRecords {
		return s.runBatch(ctx, op, false, recs, nil, types.KEY_NOT_FOUND_ERROR)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
		sem  = make(chan struct{}, readsAtOnce)
	)
	for lo := 0; lo < len(recs); lo += queueBatchRecords {
		chunk := recs[lo:min(len(recs), lo+queueBatchRecords)]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.runBatch(ctx, op, false, chunk, nil, types.KEY_NOT_FOUND_ERROR); err != nil {
				mu.Lock()
				if ferr == nil {
					ferr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ferr
}
