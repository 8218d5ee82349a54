package aerospike_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// commitTo is a commit of partition p by token tok to next at version ver.
func commitTo(p int, tok, next, ver uint64) driver.QueueCommit {
	return driver.QueueCommit{P: p, Off: driver.QueueOffset{Token: tok, Next: next, Version: ver}}
}

// mustOffsets reads the offsets of group g of queue q in partitions ps.
func mustOffsets(t *testing.T, s *aerospike.Store, q, g string, ps ...int) []driver.QueueOffset {
	t.Helper()
	offs, err := s.ReadQueueOffsets(ctxT(t), q, g, ps)
	if err != nil {
		t.Fatal(err)
	}
	return offs
}

// TestQueueCommitsOneBatch counts, through the proxy, the commands of
// CommitQueueOffsets: the commits of 8 partitions are one batch command (the server is
// one node: one command per node) and nothing else; the same batch again (each commit
// already stored) is that batch and a read of each record, which finds the commit
// there (nil); bad input sends nothing.
func TestQueueCommitsOneBatch(t *testing.T) {
	p := startProxy(t)
	s := queueStore(t, p.Addr())
	ctx := ctxT(t)
	spec := newQueue(t, s, 8)
	claims := make([]driver.QueueClaim, 8)
	commits := make([]driver.QueueCommit, 8)
	ps := make([]int, 8)
	for i := range claims {
		claims[i] = driver.QueueClaim{P: i, Token: 3}
		commits[i] = commitTo(i, 3, uint64(10+i), 1)
		ps[i] = i
	}
	if _, err := s.ClaimQueuePartitions(ctx, spec.Name, "g", claims); err != nil {
		t.Fatal(err)
	}
	var res []error
	wantTrips(t, "CommitQueueOffsets of 8 partitions", trips(t, p, func() {
		var err error
		res, err = s.CommitQueueOffsets(ctx, spec.Name, "g", commits)
		must(t, err, "CommitQueueOffsets")
	}), 0, 0, 0, 1)
	for i, err := range res {
		must(t, err, fmt.Sprintf("commit of partition %d", i))
	}
	for i, off := range mustOffsets(t, s, spec.Name, "g", ps...) {
		if off != commits[i].Off {
			t.Errorf("partition %d: offset %+v, want %+v", i, off, commits[i].Off)
		}
	}
	wantTrips(t, "CommitQueueOffsets of 8 partitions already stored", trips(t, p, func() {
		var err error
		res, err = s.CommitQueueOffsets(ctx, spec.Name, "g", commits)
		must(t, err, "CommitQueueOffsets again")
	}), 8, 0, 0, 1)
	for i, err := range res {
		must(t, err, fmt.Sprintf("commit again of partition %d", i))
	}
	wantTrips(t, "CommitQueueOffsets with a partition twice", trips(t, p, func() {
		_, err := s.CommitQueueOffsets(ctx, spec.Name, "g", []driver.QueueCommit{commitTo(0, 3, 20, 2), commitTo(0, 3, 21, 3)})
		wantCode(t, err, dcsync.InvalidArgument, "a partition twice")
		_, err = s.CommitQueueOffsets(ctx, spec.Name, "g", []driver.QueueCommit{commitTo(0, 3, 20, 2), commitTo(1, 3, 1<<63, 2)})
		wantCode(t, err, dcsync.InvalidArgument, "next beyond int64")
	}), 0, 0, 0, 0)
	_, err := s.CommitQueueOffsets(ctx, unique("none"), "g", commits)
	wantCode(t, err, dcsync.NotFound, "an unknown queue")
}

// commitCase is a partition's state before a commit, the commit, and what
// CommitQueueOffset answers.
type commitCase struct {
	what  string
	setup func(t *testing.T, s *aerospike.Store, q string, p int)
	off   driver.QueueOffset
	want  dcsync.Code // 0: nil
}

func claimAndCommit(tok uint64, off driver.QueueOffset) func(*testing.T, *aerospike.Store, string, int) {
	return func(t *testing.T, s *aerospike.Store, q string, p int) {
		t.Helper()
		ctx := ctxT(t)
		if _, err := s.ClaimQueuePartition(ctx, q, "g", p, tok); err != nil {
			t.Fatal(err)
		}
		if off.Token != 0 {
			must(t, s.CommitQueueOffset(ctx, q, "g", p, off), "setup commit")
		}
	}
}

// TestQueueCommitsAsSingleCommits: one batch of commits each in another state (applied,
// refused for another owner, already stored, a rewind, token 0, a version not above the
// stored one, no record, a version skipping ahead with marks) gives each commit what
// CommitQueueOffset gives it on a twin queue in the same state, and leaves the same
// offsets: a commit refused in the batch changes nothing of the others.
func TestQueueCommitsAsSingleCommits(t *testing.T) {
	s := queueStore(t, realServer(t))
	ctx := ctxT(t)
	marks, err := driver.EncodeQueueMarks(9, []driver.QueueMark{{Seq: 11, Acked: true}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []commitCase{
		{"applied", claimAndCommit(3, driver.QueueOffset{Token: 3, Next: 2, Version: 1}),
			driver.QueueOffset{Token: 3, Next: 5, Version: 2}, 0},
		{"another owner", func(t *testing.T, s *aerospike.Store, q string, p int) {
			claimAndCommit(3, driver.QueueOffset{})(t, s, q, p)
			claimAndCommit(4, driver.QueueOffset{})(t, s, q, p)
		}, driver.QueueOffset{Token: 3, Next: 5, Version: 1}, dcsync.LockLost},
		{"already stored", claimAndCommit(3, driver.QueueOffset{Token: 3, Next: 4, Held: true, Version: 1}),
			driver.QueueOffset{Token: 3, Next: 4, Held: true, Version: 1}, 0},
		{"rewind", claimAndCommit(3, driver.QueueOffset{Token: 3, Next: 6, Version: 1}),
			driver.QueueOffset{Token: 3, Next: 2, Attempts: 1, Held: true, Version: 2}, 0},
		{"token 0", claimAndCommit(3, driver.QueueOffset{}), driver.QueueOffset{Next: 5, Version: 1}, dcsync.LockLost},
		{"version not above", claimAndCommit(3, driver.QueueOffset{Token: 3, Next: 4, Version: 2}),
			driver.QueueOffset{Token: 3, Next: 7, Version: 2}, dcsync.LockLost},
		{"no record", func(*testing.T, *aerospike.Store, string, int) {}, driver.QueueOffset{Token: 3, Next: 1, Version: 1}, dcsync.LockLost},
		{"skips ahead with marks", claimAndCommit(3, driver.QueueOffset{Token: 3, Next: 8, Version: 1}),
			driver.QueueOffset{Token: 3, Next: 9, Version: 5, Marks: marks}, 0},
	}
	batch, single := newQueue(t, s, len(cases)), newQueue(t, s, len(cases))
	commits := make([]driver.QueueCommit, len(cases))
	ps := make([]int, len(cases))
	for p, c := range cases {
		c.setup(t, s, batch.Name, p)
		c.setup(t, s, single.Name, p)
		commits[p], ps[p] = driver.QueueCommit{P: p, Off: c.off}, p
	}
	res, err := s.CommitQueueOffsets(ctx, batch.Name, "g", commits)
	must(t, err, "CommitQueueOffsets")
	for p, c := range cases {
		serr := s.CommitQueueOffset(ctx, single.Name, "g", p, c.off)
		if dcsync.CodeOf(res[p]) != dcsync.CodeOf(serr) || dcsync.CodeOf(res[p]) != c.want {
			t.Errorf("%s: batch %v, single %v; want code %v", c.what, res[p], serr, c.want)
		}
	}
	got, want := mustOffsets(t, s, batch.Name, "g", ps...), mustOffsets(t, s, single.Name, "g", ps...)
	for p, c := range cases {
		if got[p] != want[p] {
			t.Errorf("%s: batch left %+v, single %+v", c.what, got[p], want[p])
		}
		if c.want == 0 && got[p] != c.off {
			t.Errorf("%s: stored %+v, want the commit %+v", c.what, got[p], c.off)
		}
	}
}

// TestQueueCommitsLateBatchChangesNothing: the batch of a CommitQueueOffsets is held
// back (the client times out, in doubt, and writes each commit alone); the owner then
// commits the next versions; the held batch is delivered last and changes nothing:
// each record is filtered on the state it replaces (a lower version).
func TestQueueCommitsLateBatchChangesNothing(t *testing.T) {
	addr := realServer(t)
	proxy := startProxy(t)
	s := queueStore(t, proxy.Addr())
	direct := queueStore(t, addr)
	ctx := ctxT(t)
	spec := newQueue(t, direct, 2)
	for p := range 2 {
		if _, err := direct.ClaimQueuePartition(ctx, spec.Name, "g", p, 3); err != nil {
			t.Fatal(err)
		}
	}
	first := []driver.QueueCommit{commitTo(0, 3, 5, 1), commitTo(1, 3, 6, 1)}
	proxy.HoldRequests(1, batches)
	res, err := s.CommitQueueOffsets(ctx, spec.Name, "g", first)
	must(t, err, "CommitQueueOffsets whose batch was held back")
	for p, err := range res {
		must(t, err, fmt.Sprintf("held-back commit of partition %d", p))
	}
	if n := proxy.Held(); n != 1 {
		t.Fatalf("%d requests held, want 1", n)
	}
	next := []driver.QueueCommit{commitTo(0, 3, 9, 2), commitTo(1, 3, 10, 2)}
	res, err = s.CommitQueueOffsets(ctx, spec.Name, "g", next)
	must(t, err, "the owner's next commits")
	for _, err := range res {
		must(t, err, "the owner's next commit")
	}
	codes, err := proxy.Deliver()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the late batch was answered with result code %v (27: filtered out)", codes)
	for p, off := range mustOffsets(t, direct, spec.Name, "g", 0, 1) {
		if off != next[p].Off {
			t.Errorf("partition %d after the late batch: %+v, want %+v (it moved back)", p, off, next[p].Off)
		}
	}
}

// TestQueueCommitsInDoubtThenTakenOver: the batch of a CommitQueueOffsets and every
// try after it are held back; the batch is delivered (applied) after the client gave
// up on it, and a new owner claims both partitions before the client's next tries,
// which the filter refuses. The claim keeps Next and Version, so nothing stored tells
// whether the commits landed: each is Connection (outcome unknown), as
// CommitQueueOffset's is (TestQueueCommitInDoubtThenTakenOver), not LockLost, also for
// the commit whose only try in doubt was the batch's.
func TestQueueCommitsInDoubtThenTakenOver(t *testing.T) {
	addr := realServer(t)
	proxy := startProxy(t)
	s := newStore(t, dial(t, proxy.Addr()), aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond, Attempts: 100})
	direct := queueStore(t, addr)
	ctx := ctxT(t)
	spec := newQueue(t, direct, 2)
	for p := range 2 {
		if _, err := direct.ClaimQueuePartition(ctx, spec.Name, "g", p, 3); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ReadQueueSpec(ctx, spec.Name); err != nil { // the spec read goes first
		t.Fatal(err)
	}
	commits := []driver.QueueCommit{
		{P: 0, Off: driver.QueueOffset{Token: 3, Next: 5, Held: true, Version: 1}},
		{P: 1, Off: driver.QueueOffset{Token: 3, Next: 6, Held: true, Version: 1}},
	}
	proxy.HoldRequests(1, batches)
	proxy.HoldRequests(1000, writesTo(aerospike.QueueOffsetSet))
	type result struct {
		res []error
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.CommitQueueOffsets(ctx, spec.Name, "g", commits)
		done <- result{res, err}
	}()
	for proxy.Held() < 2 {
		select {
		case r := <-done:
			t.Fatalf("CommitQueueOffsets returned %v %v before the batch and a try were held", r.res, r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	codes, err := proxy.Deliver()
	if err != nil {
		t.Fatal(err)
	}
	if len(codes) < 1 || codes[0] != 0 {
		t.Fatalf("the held requests were answered %v, want the batch applied (0)", codes)
	}
	for p := range 2 {
		if _, err := direct.ClaimQueuePartition(ctx, spec.Name, "g", p, 8); err != nil {
			t.Fatal(err)
		}
	}
	proxy.ClearDrops()
	r := <-done
	must(t, r.err, "CommitQueueOffsets")
	for p, err := range r.res {
		if dcsync.CodeOf(err) != dcsync.Connection {
			t.Errorf("partition %d: commit applied in doubt, then taken over: %v, want Connection (outcome unknown; it did land)", p, err)
		}
	}
	for p, off := range mustOffsets(t, direct, spec.Name, "g", 0, 1) {
		if off.Next != commits[p].Off.Next || off.Token != 8 {
			t.Errorf("partition %d: offset %+v, want the commit's Next %d under token 8", p, off, commits[p].Off.Next)
		}
	}
}
