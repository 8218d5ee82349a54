package drivertest

import (
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// runTrimHeldBack checks that TrimQueue stops at the offsets as they stand when it
// runs, not at the below its caller computed: the lowest Next of the groups that read
// the partition (every group for an event partition, the owning group alone for a
// dead-letter partition, 0 for a group with no offset), and that a rewind
// (CommitQueueOffset moving Next back) is refused below the Floor, writing nothing,
// and holds back the trims after it.
//
// A store that trims to below without reading the offsets fails "held by the slowest
// group"; one that reads every group's offset for a dead-letter partition fails "dead
// letters"; one that lets a rewind go below the Floor fails "rewind below the floor".
func runTrimHeldBack(t *testing.T, h Harness) {
	s := h.open(t)
	ctx := ctxT(t, time.Minute)
	spec := create(t, ctx, s, 1, "a", "b")
	deadA := spec.Partitions // group a's dead-letter partition
	var evs []driver.QueueEvent
	for i := range 10 {
		evs = append(evs, driver.QueueEvent{Partition: 0, Payload: []byte{byte(i)}})
	}
	for i := range 5 {
		evs = append(evs, driver.QueueEvent{Partition: deadA, Payload: []byte{byte(i)}})
	}
	_, err := s.AppendQueue(ctx, spec.Name, evs)
	must(t, err, "AppendQueue")
	floor := func(p int) uint64 { t.Helper(); return bounds(t, ctx, s, spec.Name, p).Floor }
	offset := func(g string, p int) driver.QueueOffset {
		t.Helper()
		offs, err := s.ReadQueueOffsets(ctx, spec.Name, g, []int{p})
		must(t, err, "ReadQueueOffsets")
		return offs[0]
	}
	ver := map[string]uint64{}
	commit := func(g string, p int, next uint64) error {
		t.Helper()
		ver[g]++
		return s.CommitQueueOffset(ctx, spec.Name, g, p, driver.QueueOffset{Token: 1, Next: next, Held: true, Version: ver[g]})
	}
	for _, g := range spec.Groups {
		_, err := s.ClaimQueuePartition(ctx, spec.Name, g, 0, 1)
		must(t, err, "ClaimQueuePartition "+g)
	}

	// No group has an offset: nothing is trimmed.
	must(t, s.TrimQueue(ctx, spec.Name, 0, 10), "TrimQueue below 10, no offsets")
	if f := floor(0); f != 0 {
		t.Fatalf("held by the slowest group: trim below 10 with no offset stored raised the floor to %d, want 0", f)
	}
	must(t, commit("a", 0, 10), "commit a 10")
	must(t, commit("b", 0, 3), "commit b 3")
	must(t, s.TrimQueue(ctx, spec.Name, 0, 10), "TrimQueue below 10, b at 3")
	if f := floor(0); f != 3 {
		t.Fatalf("held by the slowest group: trim below 10 with group b at 3 raised the floor to %d, want 3", f)
	}
	must(t, commit("b", 0, 8), "commit b 8")
	must(t, s.TrimQueue(ctx, spec.Name, 0, 6), "TrimQueue below 6, offsets 10 and 8")
	if f := floor(0); f != 6 {
		t.Fatalf("trim below 6 with the groups at 10 and 8: floor %d, want 6", f)
	}

	// Rewinds: to the floor and above are stored and hold the next trims back; below
	// the floor is refused, writing nothing.
	must(t, commit("b", 0, 7), "rewind b from 8 to 7 (above the floor 6)")
	must(t, s.TrimQueue(ctx, spec.Name, 0, 10), "TrimQueue below 10 after b's rewind to 7")
	if f := floor(0); f != 7 {
		t.Fatalf("a trim after group b moved back to 7 raised the floor to %d, want 7", f)
	}
	before := offset("b", 0)
	err = commit("b", 0, 5)
	wantCode(t, err, dcsync.InvalidArgument, "rewind below the floor: b from 7 to 5, floor 7")
	if got := offset("b", 0); got != before {
		t.Fatalf("rewind below the floor: a refused rewind changed the offset from %+v to %+v", before, got)
	}
	must(t, commit("b", 0, 7), "commit b 7 again (at the floor, not back)")
	must(t, commit("a", 0, 7), "rewind a from 10 to 7 (at the floor)")
	must(t, commit("a", 0, 7), "commit a 7 again (neither back nor forward)")
	if f := floor(0); f != 7 {
		t.Fatalf("floor %d after rewinds, want 7", f)
	}
	es, _ := readAll(t, ctx, s, spec.Name, 0, 7)
	if len(es) != 3 || es[0].Seq != 7 || es[0].Payload[0] != 7 {
		t.Fatalf("entries from the rewound offset 7: %+v, want seqs 7 to 9", es)
	}

	// A group added later has no offset: it holds back the trims of event partitions.
	_, err = s.AddQueueGroup(ctx, spec.Name, "c")
	must(t, err, "AddQueueGroup c")
	must(t, commit("a", 0, 10), "commit a 10")
	must(t, commit("b", 0, 10), "commit b 10")
	must(t, s.TrimQueue(ctx, spec.Name, 0, 10), "TrimQueue below 10, c without an offset")
	if f := floor(0); f != 7 {
		t.Fatalf("held by the slowest group: a trim with group c added (no offset) raised the floor to %d, want 7", f)
	}

	// Dead letters: group a's dead-letter partition is read by a alone.
	_, err = s.ClaimQueuePartition(ctx, spec.Name, "a", deadA, 1)
	must(t, err, "ClaimQueuePartition a dead")
	must(t, s.CommitQueueOffset(ctx, spec.Name, "a", deadA, driver.QueueOffset{Token: 1, Next: 2, Version: 1}), "commit a dead 2")
	must(t, s.TrimQueue(ctx, spec.Name, deadA, 5), "TrimQueue dead letters below 5, a at 2")
	if f := floor(deadA); f != 2 {
		t.Fatalf("dead letters: trim of group a's dead-letter partition below 5 with a at 2 raised the floor to %d, want 2 (the other groups do not read it)", f)
	}
}
