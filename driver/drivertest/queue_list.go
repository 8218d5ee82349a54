package drivertest

import (
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
)

// runQueueList checks driver.QueueLister: every queue is listed once, with the spec
// ReadQueueSpec returns (groups added after creation included), sorted by name, also
// through a second handle on the store; an empty or missing table is no error.
func runQueueList(t *testing.T, h Harness) {
	s := h.open(t)
	_, ok := s.(driver.QueueLister)
	if !ok {
		t.Skip("store does not implement driver.QueueLister")
	}
	ctx := ctxT(t, 5*time.Minute) // scans of a shared server's spec rows or records
	a := create(t, ctx, s, 3, "g1", "g2")
	b := driver.QueueSpec{Name: a.Name + "b", Partitions: 1, Groups: []string{"only"}, Dedup: time.Minute}
	must(t, s.CreateQueue(ctx, b), "CreateQueue")
	_, err := s.AddQueueGroup(ctx, b.Name, "late")
	must(t, err, "AddQueueGroup")
	for i, st := range []driver.Store{s, h.open(t)} {
		got, err := st.(driver.QueueLister).ListQueues(ctx)
		must(t, err, "ListQueues")
		if !sort.SliceIsSorted(got, func(i, j int) bool { return got[i].Name < got[j].Name }) {
			t.Fatalf("handle %d: ListQueues is not sorted by name", i)
		}
		seen := map[string]int{}
		for _, sp := range got {
			seen[sp.Name]++
			if seen[sp.Name] > 1 {
				t.Fatalf("handle %d: ListQueues lists %q twice", i, sp.Name)
			}
		}
		for _, name := range []string{a.Name, b.Name} {
			want, err := s.ReadQueueSpec(ctx, name)
			must(t, err, "ReadQueueSpec")
			j := slices.IndexFunc(got, func(sp driver.QueueSpec) bool { return sp.Name == name })
			if j < 0 {
				t.Fatalf("handle %d: ListQueues does not list queue %q (%d listed)", i, name, len(got))
			}
			g := got[j]
			if g.Partitions != want.Partitions || !slices.Equal(g.Groups, want.Groups) || g.Dedup != want.Dedup || !g.Created.Equal(want.Created) {
				t.Fatalf("handle %d: ListQueues lists %+v, ReadQueueSpec reads %+v", i, g, want)
			}
		}
	}
}
