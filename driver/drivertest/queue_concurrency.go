package drivertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
)

// located is where an appended event went.
type located struct {
	p   int
	seq uint64
}

// checkDense reads every partition of the queue and checks: dense seqs from 0 (nothing
// trimmed), no aborted entry, every payload exactly once. It returns where each payload
// is.
func checkDense(t *testing.T, ctx context.Context, s driver.QueueStore, name string, partitions int) map[string]located {
	t.Helper()
	at := map[string]located{}
	for p := range partitions {
		es, b := readAll(t, ctx, s, name, p, 0)
		if b.Floor != 0 || uint64(len(es)) != b.Head {
			t.Fatalf("partition %d: %d entries, bounds %+v; want every seq below the head, from 0", p, len(es), b)
		}
		for _, e := range es {
			if e.Aborted {
				t.Fatalf("partition %d seq %d is aborted", p, e.Seq)
			}
			if prev, dup := at[string(e.Payload)]; dup {
				t.Fatalf("payload %q stored twice: partition %d seq %d and partition %d seq %d", e.Payload, prev.p, prev.seq, p, e.Seq)
			}
			at[string(e.Payload)] = located{p, e.Seq}
		}
	}
	return at
}

func runConcurrency(t *testing.T, h Harness) {
	t.Run("AppendIsExact", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, 2*time.Minute)
		const parts, writers, batches = 3, 8, 30
		spec := create(t, ctx, s, parts, "g")
		var wg sync.WaitGroup
		results := make([]map[string]located, writers)
		errs := make([]error, writers)
		for w := range writers {
			results[w] = map[string]located{}
			wg.Go(func() {
				for b := range batches {
					var events []driver.QueueEvent
					for j := range b%5 + 1 {
						e := driver.QueueEvent{Partition: (w + j) % parts, Payload: fmt.Appendf(nil, "w%d-b%d-e%d", w, b, j)}
						if j%2 == 0 {
							e.ID = string(e.Payload)
						}
						events = append(events, e)
					}
					res, err := s.AppendQueue(ctx, spec.Name, events)
					if err != nil {
						errs[w] = err
						return
					}
					for i, r := range res {
						if r.Duplicate || r.Partition != events[i].Partition {
							errs[w] = fmt.Errorf("event %s: result %+v", events[i].Payload, r)
							return
						}
						results[w][string(events[i].Payload)] = located{r.Partition, r.Seq}
					}
				}
			})
		}
		wg.Wait()
		total := 0
		for w, err := range errs {
			must(t, err, fmt.Sprintf("writer %d", w))
			total += len(results[w])
		}
		at := checkDense(t, ctx, s, spec.Name, parts)
		if len(at) != total {
			t.Fatalf("%d events stored, %d appended", len(at), total)
		}
		for w := range writers {
			last := map[int]uint64{}
			for b := range batches {
				for j := range b%5 + 1 {
					key := fmt.Sprintf("w%d-b%d-e%d", w, b, j)
					got, ok := at[key]
					if !ok || got != results[w][key] {
						t.Fatalf("event %s stored at %+v (found %v), AppendQueue said %+v", key, got, ok, results[w][key])
					}
					if l, seen := last[got.p]; seen && got.seq <= l {
						t.Fatalf("writer %d: event %s at seq %d of partition %d, after its earlier event at seq %d", w, key, got.seq, got.p, l)
					}
					last[got.p] = got.seq
				}
			}
		}
	})

	t.Run("DedupIsExact", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, 2*time.Minute)
		const parts, writers, ids = 4, 8, 60
		spec := create(t, ctx, s, parts, "g")
		var wg sync.WaitGroup
		results := make([]map[string]driver.QueueAppend, writers)
		errs := make([]error, writers)
		for w := range writers {
			results[w] = map[string]driver.QueueAppend{}
			wg.Go(func() {
				order := rand.Perm(ids)
				for len(order) > 0 {
					n := min(len(order), 1+rand.IntN(10))
					var events []driver.QueueEvent
					for _, i := range order[:n] {
						id := fmt.Sprintf("id-%d", i)
						events = append(events, driver.QueueEvent{Partition: (i + w) % parts, ID: id, Payload: []byte(id)})
					}
					order = order[n:]
					res, err := s.AppendQueue(ctx, spec.Name, events)
					if err != nil {
						errs[w] = err
						return
					}
					for i, r := range res {
						results[w][events[i].ID] = r
					}
				}
			})
		}
		wg.Wait()
		for w, err := range errs {
			must(t, err, fmt.Sprintf("writer %d", w))
		}
		at := checkDense(t, ctx, s, spec.Name, parts)
		if len(at) != ids {
			t.Fatalf("%d writers appended the same %d ids: %d events stored, want %d", writers, ids, len(at), ids)
		}
		for i := range ids {
			id := fmt.Sprintf("id-%d", i)
			firsts := 0
			for w := range writers {
				r := results[w][id]
				if (located{r.Partition, r.Seq}) != at[id] {
					t.Fatalf("writer %d: id %s at %+v, stored at %+v", w, id, r, at[id])
				}
				if !r.Duplicate {
					firsts++
				}
			}
			if firsts != 1 {
				t.Fatalf("id %s: %d writers were told they appended it, want exactly 1", id, firsts)
			}
		}
	})
}

// childAppend appends n events with ids of its own and n with ids every child shares,
// in batches, then appends its own ids again and checks each is a duplicate of the
// first append.
func childAppend(ctx context.Context, s driver.Store, env childEnv) error {
	spec, err := s.ReadQueueSpec(ctx, env.name)
	if err != nil {
		return err
	}
	var events []driver.QueueEvent
	for i := range env.n {
		own := fmt.Sprintf("c%d-%d", env.index, i)
		shared := fmt.Sprintf("shared-%d", (i+env.index*7)%env.n)
		events = append(events,
			driver.QueueEvent{Partition: i % spec.Partitions, ID: own, Payload: []byte(own)},
			driver.QueueEvent{Partition: (i + env.index) % spec.Partitions, ID: shared, Payload: []byte(shared)})
	}
	first := map[string]driver.QueueAppend{}
	appendAll := func(events []driver.QueueEvent, check bool) error {
		for len(events) > 0 {
			n := min(len(events), 7)
			res, err := s.AppendQueue(ctx, env.name, events[:n])
			if err != nil {
				return err
			}
			for i, r := range res {
				id := events[i].ID
				if !check {
					if _, dup := first[id]; !dup {
						first[id] = r
					}
					continue
				}
				want := first[id]
				if !r.Duplicate || r.Partition != want.Partition || r.Seq != want.Seq {
					return fmt.Errorf("re-append of %s = %+v, want a duplicate of %+v", id, r, want)
				}
			}
			events = events[n:]
		}
		return nil
	}
	if err := appendAll(events, false); err != nil {
		return err
	}
	var own []driver.QueueEvent
	for _, e := range events {
		if strings.HasPrefix(e.ID, "c") {
			e.Partition = (e.Partition + 1) % spec.Partitions
			own = append(own, e)
		}
	}
	return appendAll(own, true)
}

// runQueueProcesses runs the queue store cases across OS processes.
func runQueueProcesses(t *testing.T, h Harness) {
	t.Run("AppendIsExactAcrossProcesses", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		const procs, each, parts = 4, 40, 3
		spec := create(t, ctx, s, parts, "g")
		spawn(t, h, procs, "append", spec.Name, each, "")
		at := checkDense(t, ctx, s, spec.Name, parts)
		if len(at) != procs*each+each {
			t.Fatalf("%d processes appended %d own ids and %d shared ones each: %d events stored, want %d", procs, each, each, len(at), procs*each+each)
		}
		for c := range procs {
			for i := range each {
				if _, ok := at[fmt.Sprintf("c%d-%d", c, i)]; !ok {
					t.Fatalf("event c%d-%d missing", c, i)
				}
			}
		}
		for i := range each {
			if _, ok := at[fmt.Sprintf("shared-%d", i)]; !ok {
				t.Fatalf("event shared-%d missing", i)
			}
		}
	})
}
