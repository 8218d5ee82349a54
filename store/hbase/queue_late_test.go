package hbase

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/hbaserpc"
)

// heldQueue creates a queue of one partition, read by group "g", on a store whose
// writes go through a heldWrites, and returns them with the test's context and stored,
// which reads the group's offset of partition 0.
func heldQueue(t *testing.T) (s *Store, f *heldWrites, ctx context.Context, name string, stored func() driver.QueueOffset) {
	s = openQueueStore(t)
	f = holdWrites(t, s, false)
	ctx = ctxT(t, time.Minute)
	name = qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{"g"}})
	stored = func() driver.QueueOffset {
		t.Helper()
		offs, err := s.ReadQueueOffsets(ctx, name, "g", []int{0})
		must(t, err, "ReadQueueOffsets")
		return offs[0]
	}
	return s, f, ctx, name, stored
}

// landsLate delivers the held first attempt of what, after the writes since (after),
// and fails t if it was applied, or if the stored offset is not want after it (lost:
// what its landing would do).
func landsLate(t *testing.T, f *heldWrites, stored func() driver.QueueOffset, want driver.QueueOffset, what, after, lost string) {
	t.Helper()
	if applied := f.deliver(t); applied[0] {
		t.Errorf("the late first attempt of %s was applied after %s", what, after)
	}
	if got := stored(); got != want {
		t.Fatalf("after the late first attempt of %s (after %s): offset %+v, want %+v (%s)", what, after, got, want, lost)
	}
}

// TestQueueCommitLandsLate is issue 14's defect 1 on the real HBase: a commit whose
// first attempt is held back (in doubt: the store retries it, and the retry applies)
// and delivered after the owner's next commit must change nothing. Before the fix the
// commit was conditioned on the owner's token alone, and the late attempt moved Next
// back from 9 to 5, so the next owner re-delivered acked events.
func TestQueueCommitLandsLate(t *testing.T) {
	s, f, ctx, name, stored := heldQueue(t)
	row := offsetRow(name, "g", 0)
	_, err := s.ClaimQueuePartition(ctx, name, "g", 0, 7)
	must(t, err, "ClaimQueuePartition")

	// Commit v1 (Next 5): its first attempt is held, the store's retry applies it.
	v1 := driver.QueueOffset{Token: 7, Next: 5, Held: true, Version: 1}
	f.holdAfter(0, row)
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, v1), "commit v1 whose first attempt is held")
	if got := stored(); got != v1 {
		t.Fatalf("after commit v1: %+v", got)
	}
	// The owner's next commit, v2 (Next 9), then the first attempt of v1 lands.
	v2 := driver.QueueOffset{Token: 7, Next: 9, Held: true, Version: 2}
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, v2), "commit v2")
	landsLate(t, f, stored, v2, "commit v1", "commit v2", "else Next goes back from 9 to 5")

	// The same with marks: a late attempt must not lose a mark either.
	marks, err := driver.EncodeQueueMarks(9, []driver.QueueMark{{Seq: 11, Acked: true}})
	must(t, err, "EncodeQueueMarks")
	v3 := driver.QueueOffset{Token: 7, Next: 9, Held: true, Version: 3}
	f.holdAfter(0, row)
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, v3), "commit v3 whose first attempt is held")
	v4 := driver.QueueOffset{Token: 7, Next: 9, Held: true, Version: 4, Marks: marks}
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, v4), "commit v4 (entry 11 acked out of order)")
	landsLate(t, f, stored, v4, "commit v3", "commit v4", "else the mark of entry 11 is lost")

	// A commit held until after a new owner's claim: refused too.
	v5 := driver.QueueOffset{Token: 7, Next: 12, Held: true, Version: 5}
	f.holdAfter(0, row)
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, v5), "commit v5 whose first attempt is held")
	off, err := s.ClaimQueuePartition(ctx, name, "g", 0, 8)
	must(t, err, "ClaimQueuePartition 8")
	if off != (driver.QueueOffset{Token: 8, Next: 12, Held: true, Version: 5}) {
		t.Fatalf("claim returned %+v", off)
	}
	landsLate(t, f, stored, off, "commit v5", "a new owner's claim", "else the claim's token is lost")
}

// TestQueueClaimLandsLate: a claim whose first attempt is held back and delivered
// after the owner's first commit (or after a higher token's claim) changes nothing; a
// claim that finds its own token stored after an in-doubt attempt reports success with
// the stored offset.
func TestQueueClaimLandsLate(t *testing.T) {
	s, f, ctx, name, stored := heldQueue(t)
	row := offsetRow(name, "g", 0)
	f.holdAfter(0, row)
	off, err := s.ClaimQueuePartition(ctx, name, "g", 0, 3)
	must(t, err, "claim whose first attempt is held")
	if off != (driver.QueueOffset{Token: 3}) {
		t.Fatalf("claim returned %+v", off)
	}
	v1 := driver.QueueOffset{Token: 3, Next: 4, Held: true, Version: 1}
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, v1), "commit v1")
	landsLate(t, f, stored, v1, "the claim", "the owner's commit", "else the commit is lost")
	// A claim of token 4 whose first attempt is held (its retry applies), then token
	// 6 claims, then token 4's first attempt lands: refused.
	f.holdAfter(0, row)
	off, err = s.ClaimQueuePartition(ctx, name, "g", 0, 4)
	must(t, err, "claim 4 whose first attempt is held")
	if want := (driver.QueueOffset{Token: 4, Next: 4, Held: true, Version: 1}); off != want {
		t.Fatalf("claim 4 returned %+v, want %+v", off, want)
	}
	_, err = s.ClaimQueuePartition(ctx, name, "g", 0, 6)
	must(t, err, "claim 6")
	landsLate(t, f, stored, driver.QueueOffset{Token: 6, Next: 4, Held: true, Version: 1}, "claim 4", "claim 6", "else token 6 is lost")
	// A claim whose attempt applied with its reply lost: the retry finds the token.
	lost := &queueFaults{queueOps: s.client, plan: map[string]int{"CheckAndMutate": 1}, hit: map[string]int{}}
	s.queue().db = lost
	off, err = s.ClaimQueuePartition(ctx, name, "g", 0, 9)
	must(t, err, "claim with a lost reply")
	if want := (driver.QueueOffset{Token: 9, Next: 4, Held: true, Version: 1}); off != want || lost.hit["CheckAndMutate"] != 1 {
		t.Fatalf("claim with a lost reply returned %+v (faults %v), want %+v", off, lost.hit, want)
	}
}

// oldOffsetCell is an offset cell in the first, 21-byte format: token | next |
// attempts | held.
func oldOffsetCell(token, next uint64, attempts uint32, held bool) []byte {
	b := binary.BigEndian.AppendUint64(nil, token)
	b = binary.BigEndian.AppendUint64(b, next)
	b = binary.BigEndian.AppendUint32(b, attempts)
	if held {
		return append(b, 1)
	}
	return append(b, 0)
}

func TestQueueOffsetCellFormats(t *testing.T) {
	marks, err := driver.EncodeQueueMarks(3, []driver.QueueMark{{Seq: 4, Acked: true}, {Seq: 9, Attempts: 2}})
	must(t, err, "EncodeQueueMarks")
	for _, o := range []driver.QueueOffset{{}, {Token: 1<<64 - 1, Next: 1<<64 - 1, Attempts: 1<<31 - 1, Held: true, Version: 1<<64 - 1}, {Token: 2, Next: 3, Version: 4, Marks: marks}} {
		got, err := decodeOffset(encodeOffset(o))
		if err != nil || got != o {
			t.Fatalf("round trip of %+v: %+v, %v", o, got, err)
		}
	}
	got, err := decodeOffset(oldOffsetCell(5, 7, 2, true))
	if err != nil || got != (driver.QueueOffset{Token: 5, Next: 7, Attempts: 2, Held: true}) {
		t.Fatalf("21-byte cell decoded as %+v, %v", got, err)
	}
	bad := [][]byte{nil, make([]byte, 20), make([]byte, 22), make([]byte, 28), append(oldOffsetCell(1, 1, 1, false)[:20], 2),
		make([]byte, offsetLen+driver.MaxQueueMarksLen+1)}
	for _, v := range bad {
		if o, err := decodeOffset(v); err == nil {
			t.Fatalf("decodeOffset of %d bytes %x: %+v, want an error", len(v), v[:min(len(v), 24)], o)
		}
	}
}

// An offset cell written in the first format (by an earlier release) reads as Version
// 0 with no marks; a claim and a commit on it work, and the commit's late first
// attempt changes nothing.
func TestQueueOffsetOldCell(t *testing.T) {
	s, f, ctx, name, stored := heldQueue(t)
	row := offsetRow(name, "g", 0)
	ok, _, err := s.client.CheckAndMutate(ctx, s.QueueTable(), row, hbaserpc.IfAbsent(famQueue, qualOffset), &hbaserpc.Put{Values: []hbaserpc.Value{
		{Family: famQueue, Qualifier: qualOffTok, Value: be64(5)},
		{Family: famQueue, Qualifier: qualOffset, Value: oldOffsetCell(5, 7, 2, true)},
	}})
	if err != nil || !ok {
		t.Fatalf("writing an old offset cell: %v, %v", ok, err)
	}
	old := driver.QueueOffset{Token: 5, Next: 7, Attempts: 2, Held: true}
	if got := stored(); got != old {
		t.Fatalf("old cell read as %+v; want %+v", got, old)
	}
	f.holdAfter(0, row)
	v1 := driver.QueueOffset{Token: 5, Next: 8, Attempts: 0, Held: true, Version: 1}
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, v1), "commit over an old cell, first attempt held")
	off, err := s.ClaimQueuePartition(ctx, name, "g", 0, 6)
	must(t, err, "claim")
	if want := (driver.QueueOffset{Token: 6, Next: 8, Held: true, Version: 1}); off != want {
		t.Fatalf("claim returned %+v, want %+v", off, want)
	}
	landsLate(t, f, stored, off, "the commit over the old cell", "a claim", "else the claim is lost")
}

// TestQueueAbortLandsAfterTrim: a consumer's abort of a seq (a hole) is in doubt and its
// first attempt held; the producer's event lands at the seq, so the abort's read-back
// finds it (not aborted); the event is delivered, acked and trimmed; then the abort's
// first attempt lands. It must change nothing: were it to tombstone the trimmed seq, a
// retried append of the event's id would take the id over and append the event again.
func TestQueueAbortLandsAfterTrim(t *testing.T) {
	s, f, ctx, name, _ := heldQueue(t)
	table := s.QueueTable()
	// A producer that has claimed its id, reserved its seq and placed the id there,
	// and not yet written: a hole.
	a := newAppender(s, s.client, table, name, "test", time.Hour, []driver.QueueEvent{{Partition: 0, ID: "x", Payload: []byte("event")}})
	must(t, a.claim(ctx, []int{0}), "claim")
	must(t, a.reserve(ctx, []int{0}), "reserve")
	ready, err := a.place(ctx, []int{0})
	must(t, err, "place")
	seq := a.seq[0]
	// The abort's first attempt is held; the producer writes meanwhile.
	f.holdAfter(0, entryRow(partPrefix(name, 0), seq))
	f.onHold = func() { must(t, a.write(ctx, ready), "the producer's write") }
	aborted, err := s.AbortQueueSeq(ctx, name, 0, seq)
	must(t, err, "AbortQueueSeq whose first attempt is held")
	if aborted || !a.done[0] {
		t.Fatalf("abort after the event was written: aborted %v, producer done %v", aborted, a.done[0])
	}
	// Delivered, acked, trimmed.
	r, err := s.ReadQueue(ctx, name, 0, 0, 10)
	must(t, err, "ReadQueue")
	if len(r.Entries) != 1 || r.Entries[0].Seq != seq || r.Entries[0].Aborted {
		t.Fatalf("entries %+v", r.Entries)
	}
	_, err = s.ClaimQueuePartition(ctx, name, "g", 0, 1)
	must(t, err, "ClaimQueuePartition")
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 1, Next: seq + 1, Held: true, Version: 1}), "CommitQueueOffset")
	must(t, s.TrimQueue(ctx, name, 0, seq+1), "TrimQueue")
	// The abort's first attempt lands.
	if applied := f.deliver(t); applied[0] {
		t.Errorf("the abort's late first attempt tombstoned the trimmed seq %d", seq)
	}
	ok, err := s.AbortQueueSeq(ctx, name, 0, seq)
	if err != nil || ok {
		t.Fatalf("AbortQueueSeq of the trimmed seq: %v, %v; want false (an event was there)", ok, err)
	}
	// The producer's retry of the id (its reply lost, say): a duplicate.
	res, err := s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, ID: "x", Payload: []byte("event")}})
	must(t, err, "AppendQueue of the id again")
	if res[0] != (driver.QueueAppend{Partition: 0, Seq: seq, Duplicate: true}) {
		t.Fatalf("append of the trimmed event's id again: %+v, want a duplicate of seq %d (else delivered twice)", res[0], seq)
	}
}

// TestQueueCommitRoundTrips: while one store owns a partition, each commit is one
// round trip (a compare-and-set on the cell it last wrote); a commit whose guess is
// stale (another store wrote) costs one more, and decides on the cell read back.
func TestQueueCommitRoundTrips(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	other := openQueueStore(t)
	defer other.Close()
	c := countCalls(s)
	ctx := ctxT(t, time.Minute)
	name := qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{"g"}})
	off, err := s.ClaimQueuePartition(ctx, name, "g", 0, 1)
	must(t, err, "ClaimQueuePartition")
	c.take()
	for i := 1; i <= 5; i++ {
		off.Next, off.Version = uint64(10*i), uint64(i)
		must(t, s.CommitQueueOffset(ctx, name, "g", 0, off), "CommitQueueOffset")
	}
	if got := c.take(); got["CheckAndMutateRead"] != 5 || len(got) != 1 {
		t.Fatalf("5 commits of the owner made calls %v, want 5 CheckAndMutateRead and nothing else", got)
	}
	// Another store claims: this store's guess is stale; its commit is refused after
	// one compare-and-set and the cell read back with it.
	_, err = other.ClaimQueuePartition(ctx, name, "g", 0, 2)
	must(t, err, "ClaimQueuePartition by another store")
	off.Version++
	wantCode(t, s.CommitQueueOffset(ctx, name, "g", 0, off), dcsync.LockLost, "commit after another store's claim")
	if got := c.take(); got["CheckAndMutateRead"] != 1 || len(got) != 1 {
		t.Fatalf("a commit on a stale guess made calls %v, want one CheckAndMutateRead", got)
	}
	// The refused commit's read-back refreshed the guess: a commit of token 2 through
	// this store is one round trip again.
	o2 := driver.QueueOffset{Token: 2, Next: 60, Held: true, Version: off.Version}
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, o2), "commit of token 2 after the read-back")
	if got := c.take(); got["CheckAndMutateRead"] != 1 || len(got) != 1 {
		t.Fatalf("a commit after a read-back made calls %v, want one CheckAndMutateRead", got)
	}
	// The other store's guess is stale now: its next commit costs one more round trip
	// (refused, the cell read back with it), then applies.
	o2.Version++
	o2.Next++
	oc := countCalls(other)
	must(t, other.CommitQueueOffset(ctx, name, "g", 0, o2), "commit through a store whose guess is stale")
	if got := oc.take(); got["CheckAndMutateRead"] != 2 || len(got) != 1 {
		t.Fatalf("a commit on a stale guess made calls %v, want two CheckAndMutateRead", got)
	}
	offs, err := s.ReadQueueOffsets(ctx, name, "g", []int{0})
	must(t, err, "ReadQueueOffsets")
	if offs[0] != o2 {
		t.Fatalf("offset %+v, want %+v", offs[0], o2)
	}
}

// TestQueueCommitInDoubtThenTakenOver: a commit's first attempt is applied but its
// reply lost, and a new owner claims the partition before the store reads back. The
// claim keeps Next and Version, so nothing stored tells whether the commit landed: the
// outcome is unknown (Connection), not refused. A LockLost there told the consumer its
// ack was refused while the offset had moved past the acked events, so the successor
// never delivered them and nobody acked them (found by the queue chaos checker on
// Aerospike).
func TestQueueCommitInDoubtThenTakenOver(t *testing.T) {
	s, f, ctx, name, stored := heldQueue(t)
	row := offsetRow(name, "g", 0)
	_, err := s.ClaimQueuePartition(ctx, name, "g", 0, 7)
	must(t, err, "ClaimQueuePartition 7")
	off := driver.QueueOffset{Token: 7, Next: 5, Held: true, Version: 1}
	f.holdAfter(0, row)
	f.onHold = func() {
		// The held attempt reaches the region server (its reply is lost), then the
		// successor claims.
		if applied := f.deliver(t); !applied[0] {
			t.Errorf("the commit's first attempt was not applied")
		}
		_, err := s.ClaimQueuePartition(ctx, name, "g", 0, 8)
		must(t, err, "ClaimQueuePartition 8")
	}
	err = s.CommitQueueOffset(ctx, name, "g", 0, off)
	if dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("commit applied in doubt, then taken over: %v, want Connection (outcome unknown; it did land)", err)
	}
	if got := stored(); got.Next != 5 || got.Token != 8 {
		t.Fatalf("offset %+v, want the commit's Next 5 under token 8", got)
	}
}
