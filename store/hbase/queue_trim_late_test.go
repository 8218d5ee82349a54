package hbase

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// trimHold is a queueOps that keeps back, unsent, writes of a trim of one partition
// and reports them in doubt (a Connection error, as a lost reply): the first
// check-and-mutate of the head row, the first one that writes the Floor (q:f), the
// first one that records the trimmed seqs (q:x), and the first MultiMutate that writes
// trimmed marks. send delivers them later, exactly as they were made, through the raw
// client.
type trimHold struct {
	queueOps
	hrow, prefix []byte

	mu       sync.Mutex
	cams     []heldCAM
	multis   [][]hbaserpc.Action
	table    string
	sawFirst bool
	sawRaise bool
	sawX     bool
}

type heldCAM struct {
	table string
	row   []byte
	cond  hbaserpc.Condition
	muts  []hbaserpc.Mutation
}

func writesCell(muts []hbaserpc.Mutation, qual []byte) bool {
	for _, m := range muts {
		if p, ok := m.(*hbaserpc.Put); ok {
			for _, v := range p.Values {
				if bytes.Equal(v.Qualifier, qual) {
					return true
				}
			}
		}
	}
	return false
}

func (h *trimHold) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	if bytes.Equal(row, h.hrow) {
		h.mu.Lock()
		raise, x := writesCell(muts, qualFloor), writesCell(muts, qualTrimmed)
		hold := !h.sawFirst || raise && !h.sawRaise || x && !h.sawX
		h.sawFirst = true
		h.sawRaise = h.sawRaise || raise
		h.sawX = h.sawX || x
		if hold {
			h.cams = append(h.cams, heldCAM{table: table, row: row, cond: cond, muts: muts})
		}
		h.mu.Unlock()
		if hold {
			return false, nil, driver.Errorf(dcsync.Connection, "test", "reply lost (held back)")
		}
	}
	return h.queueOps.CheckAndMutate(ctx, table, row, cond, muts...)
}

func (h *trimHold) MultiMutate(ctx context.Context, table string, acts []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	for _, a := range acts {
		if p, ok := a.Mutation.(*hbaserpc.Put); ok && bytes.HasPrefix(p.Row, h.prefix) && writesCell([]hbaserpc.Mutation{p}, qualEntry) {
			h.mu.Lock()
			hold := len(h.multis) == 0
			if hold {
				h.multis = append(h.multis, acts)
				h.table = table
			}
			h.mu.Unlock()
			if hold {
				return nil, driver.Errorf(dcsync.Connection, "test", "reply lost (held back)")
			}
			break
		}
	}
	return h.queueOps.MultiMutate(ctx, table, acts)
}

// send delivers the held writes in the order they were made, the check-and-mutates
// first, through c.
func (h *trimHold) send(t *testing.T, ctx context.Context, c queueOps) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, w := range h.cams {
		ok, _, err := c.CheckAndMutate(ctx, w.table, w.row, w.cond, w.muts...)
		must(t, err, fmt.Sprintf("late check-and-mutate %d of the head row", i))
		t.Logf("late check-and-mutate %d of the head row (floor write %v, trimmed write %v): applied %v", i, writesCell(w.muts, qualFloor), writesCell(w.muts, qualTrimmed), ok)
	}
	for i, acts := range h.multis {
		res, err := c.MultiMutate(ctx, h.table, acts)
		must(t, err, fmt.Sprintf("late MultiMutate %d of trimmed marks", i))
		t.Logf("late MultiMutate %d of %d trimmed marks: %d results", i, len(acts), len(res))
	}
}

// TestTrimQueueLateTriesKeepNewQueue (issue 15): the writes of a TrimQueue that land
// late, after the queue was deleted and created again under its name, leave the new
// queue alone: its Floor stays at 0 and each of its events stays readable. The trim's
// first check-and-mutate of the head row, its first Floor write, its first batch of
// trimmed marks and its first record of them (q:x) are held back (reported in doubt:
// the call tries again), and sent exactly as made once the new queue holds events at
// the same seqs; the new queue's head row must not record trimmed seqs either.
func TestTrimQueueLateTriesKeepNewQueue(t *testing.T) {
	s := openQueueStore(t)
	ctx := ctxT(t, 2*time.Minute)
	name := qname(t)
	spec := driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{"g"}, Dedup: time.Hour}
	mustCreate(t, s, spec)
	var old []driver.QueueEvent
	for i := range 5 {
		old = append(old, ev(0, fmt.Sprintf("old-%d", i)))
	}
	_, err := s.AppendQueue(ctx, name, old)
	must(t, err, "AppendQueue (old queue)")
	_, err = s.ClaimQueuePartition(ctx, name, "g", 0, 1)
	must(t, err, "ClaimQueuePartition")
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: 5, Held: true, Version: 1}), "CommitQueueOffset")

	h := &trimHold{queueOps: s.client, hrow: headRow(name, 0), prefix: partPrefix(name, 0)}
	s.queue().db = h
	err = s.TrimQueue(ctx, name, 0, 5)
	s.queue().db = nil
	t.Logf("TrimQueue with writes held back: %v", err)
	if len(h.cams) == 0 || !h.sawRaise || !h.sawX || len(h.multis) == 0 {
		t.Fatalf("held %d check-and-mutates (a floor write among them: %v, a trimmed record: %v) and %d MultiMutates of marks; want each kind", len(h.cams), h.sawRaise, h.sawX, len(h.multis))
	}

	// The queue is deleted and created again; it gets events at the same seqs.
	must(t, s.DeleteQueue(ctx, name), "DeleteQueue")
	mustCreate(t, s, spec)
	var fresh []driver.QueueEvent
	for i := range 8 {
		fresh = append(fresh, ev(0, fmt.Sprintf("new-%d", i)))
	}
	_, err = s.AppendQueue(ctx, name, fresh)
	must(t, err, "AppendQueue (new queue)")

	// The old trim's held writes land now.
	h.send(t, ctx, s.client)

	b, err := s.QueueBounds(ctx, name, []int{0})
	must(t, err, "QueueBounds")
	if b[0] != (driver.QueueBounds{Head: 8}) {
		t.Errorf("new queue's bounds %+v after the old trim's late writes, want Head 8 Floor 0 (else its events are below the Floor)", b[0])
	}
	cells, err := s.client.Get(ctx, s.QueueTable(), headRow(name, 0), hbaserpc.Column{Family: famQueue, Qualifier: qualTrimmed})
	must(t, err, "Get q:x")
	if v, _, ok := cellValue(cells, qualTrimmed); ok {
		t.Errorf("new queue's head row records trimmed seqs below %x after the old trim's late writes, want none (else its trims never mark those seqs)", v)
	}
	got := readAll(t, s, name, 0, 0)
	var payloads []string
	for _, e := range got {
		payloads = append(payloads, string(e.Payload))
	}
	want := fmt.Sprint([]string{"new-0", "new-1", "new-2", "new-3", "new-4", "new-5", "new-6", "new-7"})
	if fmt.Sprint(payloads) != want {
		t.Errorf("new queue reads %v after the old trim's late writes, want %s (else its events were replaced by the old trim's marks)", payloads, want)
	}
}
