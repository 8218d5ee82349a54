package aerospike_test

import (
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/layout"
	"github.com/dcsync/dcsync/store/aerospike"
)

// Writes that land late: the proxy holds a write's first try back (the client times out,
// in doubt, and retries), lets the retry and later writes land, then delivers the held
// try. Each test checks that the late try changes nothing (docs/stores/aerospike.md,
// "Writes that land late").

// TestQueueLateCommitCannotRewind is issue 14's defect 1: the first try of a commit of
// Next 5 is held back; its retry lands, then the owner commits Next 9; the held try is
// delivered last. With a filter on the token alone it applied and moved the offset back
// to 5 (the next owner would deliver acked events again); with the version in the
// filter it is filtered out.
func TestQueueLateCommitCannotRewind(t *testing.T) {
	addr := realServer(t)
	proxy := startProxy(t)
	s := queueStore(t, proxy.Addr())
	ctx := ctxT(t)
	spec := newQueue(t, queueStore(t, addr), 1)
	off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	marks, err := driver.EncodeQueueMarks(5, []driver.QueueMark{{Seq: 7, Acked: true}})
	if err != nil {
		t.Fatal(err)
	}
	first := driver.QueueOffset{Token: off.Token, Next: 5, Version: off.Version + 1, Marks: marks}
	proxy.HoldRequests(1, writesTo(aerospike.QueueOffsetSet))
	if err := s.CommitQueueOffset(ctx, spec.Name, "g", 0, first); err != nil {
		t.Fatalf("commit whose first try was held back: %v", err)
	}
	if n := proxy.Held(); n != 1 {
		t.Fatalf("%d requests held, want 1", n)
	}
	next := driver.QueueOffset{Token: off.Token, Next: 9, Version: first.Version + 1}
	if err := s.CommitQueueOffset(ctx, spec.Name, "g", 0, next); err != nil {
		t.Fatalf("the owner's next commit: %v", err)
	}
	codes, err := proxy.Deliver()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the late first try was answered with result code %v (27: filtered out)", codes)
	offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if offs[0] != next {
		t.Fatalf("after the late first try of a commit the offset is %+v, want %+v (it moved back)", offs[0], next)
	}
}

// TestQueueLateClaimChangesNothing: the first try of a claim is held back; its retry
// lands and the owner commits (releasing: Held false); the held claim is delivered
// last and changes nothing: its token is not above the stored one. (A claim filtered on
// "stored token <= token" that set Held, as before issue 14, marked the released
// partition held again.)
func TestQueueLateClaimChangesNothing(t *testing.T) {
	addr := realServer(t)
	proxy := startProxy(t)
	s := queueStore(t, proxy.Addr())
	ctx := ctxT(t)
	spec := newQueue(t, queueStore(t, addr), 1)
	proxy.HoldRequests(1, writesTo(aerospike.QueueOffsetSet))
	off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 3)
	if err != nil || off != (driver.QueueOffset{Token: 3}) {
		t.Fatalf("claim whose first try was held back = %+v %v", off, err)
	}
	if n := proxy.Held(); n != 1 {
		t.Fatalf("%d requests held, want 1", n)
	}
	if err := s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 3, Next: 4, Version: 1}); err != nil {
		t.Fatal(err)
	}
	// An equal-token claim (a retry whose first try landed) returns the stored offset.
	if off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 3); err != nil || off != (driver.QueueOffset{Token: 3, Next: 4, Version: 1}) {
		t.Fatalf("claim again with the stored token = %+v %v", off, err)
	}
	codes, err := proxy.Deliver()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the late first try was answered with result code %v", codes)
	offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
	if err != nil || offs[0] != (driver.QueueOffset{Token: 3, Next: 4, Version: 1}) {
		t.Fatalf("offset after the late claim = %+v %v", offs, err)
	}
}

// lateLockStore is a store through proxy with short tries, and a lock key of its own.
func lateLockStore(t *testing.T, proxy *faultProxy) (*aerospike.Store, dcsync.Key) {
	t.Helper()
	s := newStore(t, dial(t, proxy.Addr()), aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond})
	return s, dcsync.Key{Level: dcsync.DC, Client: "late", Farm: "dc1", Name: unique("l")}
}

// leaseEnd is the end of k's lease as the server reports it.
func leaseEnd(t *testing.T, s *aerospike.Store, k dcsync.Key) time.Time {
	t.Helper()
	st, err := s.InspectLock(ctxT(t), k)
	if err != nil {
		t.Fatal(err)
	}
	return st.Expires
}

// fenceSet is the fence set of dc1Locks.
const fenceSet = aerospike.FenceSetPrefix + dc1Locks

// batches matches batch commands (a refresh is one: the lease write and the fence read).
func batches(c command) bool { return c.Kind == "batch" }

// fenceOf reads the fence record of k raw: its counter and its numbers by acquisition.
func fenceOf(t *testing.T, c *as.Client, k dcsync.Key) (int, map[any]any) {
	t.Helper()
	rec, err := c.Get(nil, key(t, fenceSet, layout.IdentityKey(k)))
	must(t, err, "raw get of the fence record")
	m, _ := rec.Bins[aerospike.AcqsBin].(map[any]any)
	n, _ := rec.Bins[aerospike.FenceBin].(int)
	return n, m
}

// TestLockLateFenceIncrement: the first try of an acquire's fence increment is held
// back; its retry lands and numbers the acquisition; the held try is delivered last.
// Unconditioned, it added 1 again and entered the new number for the same acquisition,
// so the holder's token (returned by the acquire) and the stored one (what InspectLock
// and every reader see) differed. Conditioned on the acquisition having no number yet
// it is filtered out.
func TestLockLateFenceIncrement(t *testing.T) {
	proxy := startProxy(t)
	s, k := lateLockStore(t, proxy)
	c := realClient(t)
	ctx := ctxT(t)
	proxy.HoldRequests(1, writesTo(fenceSet))
	st, err := s.AcquireLock(ctx, k, "me", 20*time.Second)
	must(t, err, "acquire whose fence increment was held back")
	if proxy.Held() != 1 || st.Token != 1 {
		t.Fatalf("held %d requests; acquired %+v, want token 1", proxy.Held(), st)
	}
	codes, err := proxy.Deliver()
	must(t, err, "deliver")
	t.Logf("the late fence increment was answered with result code %v (27: filtered out)", codes)
	got, err := s.InspectLock(ctx, k)
	must(t, err, "inspect")
	if got.Owner != "me" || got.Token != st.Token {
		t.Fatalf("after the late fence increment the lock reads %+v, the holder has token %d", got, st.Token)
	}
	if n, m := fenceOf(t, c, k); n != 1 || len(m) != 1 {
		t.Fatalf("fence record: counter %d, numbers %v; want 1 and one acquisition", n, m)
	}
	must(t, s.ReleaseLock(ctx, k, "me"), "release")
}

// TestLockFenceAfterLapse: every try of A's fence increment is held back until A's 1 s
// lease has lapsed and B has taken the lock over (and its token); then they are
// delivered, and A's increment lands after B's, with a larger number. A must not report
// the lock acquired (its reply came after its lease could have lapsed): two holders,
// and the later one with the smaller token. B keeps the lock; its number is no longer
// the fence's latest, so readers see its token as 0 (unknown), never A's number, until
// the next acquisition, whose token is above A's and reads right.
func TestLockFenceAfterLapse(t *testing.T) {
	proxy := startProxy(t)
	s := newStore(t, dial(t, proxy.Addr()), aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond, Attempts: 1000})
	direct := newStore(t, realClient(t), aerospike.Config{})
	ctx := ctxT(t)
	k := dcsync.Key{Level: dcsync.DC, Client: "late", Farm: "dc1", Name: unique("lapse")}
	proxy.HoldRequests(1<<30, writesTo(fenceSet))
	type result struct {
		st  driver.LockState
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := s.AcquireLock(ctx, k, "a", time.Second)
		done <- result{st, err}
	}()
	for proxy.Held() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	var b driver.LockState
	for {
		var err error
		if b, err = direct.AcquireLock(ctx, k, "b", time.Minute); err == nil {
			break
		}
		wantCode(t, err, dcsync.LockUnavailable, "B's acquire while A's lease runs")
		time.Sleep(50 * time.Millisecond)
	}
	proxy.ClearDrops()
	codes, err := proxy.Deliver()
	must(t, err, "deliver")
	t.Logf("A's held increments were answered with result codes %v", codes)
	a := <-done
	if a.err == nil {
		t.Fatalf("A acquired %+v after its lease lapsed and B took the lock with token %d", a.st, b.Token)
	}
	wantCode(t, a.err, dcsync.LockUnavailable, "A's acquire")
	got, err := direct.InspectLock(ctx, k)
	must(t, err, "inspect")
	if got.Owner != "b" || (got.Token != b.Token && got.Token != 0) {
		t.Fatalf("after A's late increment the lock reads %+v, want B's owner and token %d or 0 (unknown)", got, b.Token)
	}
	must(t, direct.ReleaseLock(ctx, k, "b"), "B's release")
	last, _ := fenceOf(t, realClient(t), k) // A's late number: above B's
	c, err := direct.AcquireLock(ctx, k, "c", time.Minute)
	must(t, err, "C's acquire")
	if c.Token <= uint64(last) {
		t.Fatalf("C's token %d not above the fence's last number %d (A's late one)", c.Token, last)
	}
	got, err = direct.InspectLock(ctx, k)
	must(t, err, "inspect")
	if got.Owner != "c" || got.Token != c.Token {
		t.Fatalf("the lock reads %+v, want C's owner and token %d", got, c.Token)
	}
	must(t, direct.ReleaseLock(ctx, k, "c"), "C's release")
}

// TestLockTokenAfterLateTake: every try of C's take (the put of the lock record) is
// held back while A acquires and releases the lock; then they are delivered and C
// takes it. C's token must be above A's: C takes its number only after its take landed.
// Taking the number before the take (or beside it in one batch, unordered) gave C the
// smaller number, for the later holding.
func TestLockTokenAfterLateTake(t *testing.T) {
	proxy := startProxy(t)
	s := newStore(t, dial(t, proxy.Addr()), aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond, Attempts: 1000})
	direct := newStore(t, realClient(t), aerospike.Config{})
	ctx := ctxT(t)
	k := dcsync.Key{Level: dcsync.DC, Client: "late", Farm: "dc1", Name: unique("take")}
	proxy.HoldRequests(1<<30, writesTo(dc1Locks))
	type result struct {
		st  driver.LockState
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := s.AcquireLock(ctx, k, "c", time.Minute)
		done <- result{st, err}
	}()
	for proxy.Held() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	a, err := direct.AcquireLock(ctx, k, "a", time.Minute)
	must(t, err, "A's acquire while C's take is held")
	must(t, direct.ReleaseLock(ctx, k, "a"), "A's release")
	proxy.ClearDrops()
	codes, err := proxy.Deliver()
	must(t, err, "deliver")
	t.Logf("C's held takes were answered with result codes %v", codes)
	c := <-done
	must(t, c.err, "C's acquire")
	if c.st.Token <= a.Token {
		t.Fatalf("C holds the lock after A with token %d, not above A's %d", c.st.Token, a.Token)
	}
	must(t, s.ReleaseLock(ctx, k, "c"), "C's release")
}

// TestLockLateRefresh: the first try of a 20 s refresh is held back; its retry lands,
// then a 2 minute refresh; the held try is delivered last. Filtered on the owner alone
// it applied and shortened the lease to 20 s from its landing, ending it before the
// deadline the second refresh reported; since a refresh is filtered out when more than
// its TTL is left, it changes nothing.
func TestLockLateRefresh(t *testing.T) {
	proxy := startProxy(t)
	s, k := lateLockStore(t, proxy)
	ctx := ctxT(t)
	_, err := s.AcquireLock(ctx, k, "me", 10*time.Second)
	must(t, err, "acquire")
	proxy.HoldRequests(1, batches)
	_, err = s.RefreshLock(ctx, k, "me", 20*time.Second)
	must(t, err, "refresh whose first try was held back")
	if proxy.Held() != 1 {
		t.Fatalf("held %d requests, want 1", proxy.Held())
	}
	ref, err := s.RefreshLock(ctx, k, "me", 2*time.Minute)
	must(t, err, "second refresh")
	// A shorter refresh now writes nothing and reports its own (earlier) deadline.
	short, err := s.RefreshLock(ctx, k, "me", 20*time.Second)
	must(t, err, "shorter refresh")
	if short.Expires.After(ref.Expires) || short.Token != ref.Token {
		t.Fatalf("shorter refresh = %+v after %+v", short, ref)
	}
	codes, err := proxy.Deliver()
	must(t, err, "deliver")
	t.Logf("the late refresh was answered with result code %v (27: filtered out)", codes)
	if end := leaseEnd(t, s, k); end.Before(ref.Expires.Add(-time.Second)) {
		t.Fatalf("after the late refresh the lease ends at %v, %v before the deadline the second refresh reported",
			end.Format(time.StampMilli), ref.Expires.Sub(end))
	}
	must(t, s.ReleaseLock(ctx, k, "me"), "release")
}

// TestLatchLateDelete: the first try of a DeleteLatch is held back; its retry deletes
// the latch, and a new latch of the same name is created; the held try is delivered
// last. Filtered on the latch being alive it deleted the new latch; filtered on the
// end of the latch it read (which names the incarnation), it changes nothing.
func TestLatchLateDelete(t *testing.T) {
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		t.Run(level.String(), func(t *testing.T) {
			proxy := startProxy(t)
			s := newStore(t, dial(t, proxy.Addr()), aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond})
			ctx := ctxT(t)
			k := dcsync.Key{Level: level, Client: "late", Farm: "dc1", Name: unique("d")}
			must(t, s.CreateLatch(ctx, k, 3, time.Minute), "create")
			proxy.HoldRequests(1, func(c command) bool {
				return c.Set == latchSet && (c.Kind == "delete" || c.Kind == "write")
			})
			must(t, s.DeleteLatch(ctx, k), "delete whose first try was held back")
			if proxy.Held() != 1 {
				t.Fatalf("held %d requests, want 1", proxy.Held())
			}
			must(t, s.CreateLatch(ctx, k, 7, time.Minute), "create again")
			codes, err := proxy.Deliver()
			must(t, err, "deliver")
			t.Logf("the late delete was answered with result code %v (27: filtered out)", codes)
			got, err := s.ReadLatches(ctx, []dcsync.Key{k})
			must(t, err, "read")
			if !got[0].Found || got[0].Count != 7 {
				t.Fatalf("after the late delete the new latch reads %+v, want count 7", got[0])
			}
		})
	}
}

// TestLatchLateUpdate: the first try of a count-down is held back; its retry lands
// (3 -> 2), the latch is deleted and created again with 3; the held try is delivered
// last. Filtered on its update id alone it applied to the new latch (the new record
// has no entry of its writer): 2 instead of 3. Filtered on the incarnation too, it
// changes nothing.
func TestLatchLateUpdate(t *testing.T) {
	for _, level := range []dcsync.Level{dcsync.DC, dcsync.XDC} {
		t.Run(level.String(), func(t *testing.T) {
			proxy := startProxy(t)
			s := newStore(t, dial(t, proxy.Addr()), aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond})
			other := newStore(t, realClient(t), aerospike.Config{})
			ctx := ctxT(t)
			k := dcsync.Key{Level: level, Client: "late", Farm: "dc1", Name: unique("u")}
			must(t, s.CreateLatch(ctx, k, 3, time.Minute), "create")
			proxy.HoldRequests(1, writesTo(latchSet))
			n, err := s.AddLatch(ctx, k, -1)
			if err != nil || n != 2 {
				t.Fatalf("count-down whose first try was held back = %d, %v", n, err)
			}
			if proxy.Held() != 1 {
				t.Fatalf("held %d requests, want 1", proxy.Held())
			}
			must(t, other.DeleteLatch(ctx, k), "delete")
			must(t, other.CreateLatch(ctx, k, 3, time.Minute), "create again")
			codes, err := proxy.Deliver()
			must(t, err, "deliver")
			t.Logf("the late count-down was answered with result code %v (27: filtered out)", codes)
			got, err := s.ReadLatches(ctx, []dcsync.Key{k})
			must(t, err, "read")
			if !got[0].Found || got[0].Count != 3 {
				t.Fatalf("after the late count-down the new latch reads %+v, want count 3", got[0])
			}
			// This store's next update goes to the new latch.
			if n, err := s.AddLatch(ctx, k, -1); err != nil || n != 2 {
				t.Fatalf("count-down of the new latch = %d, %v; want 2", n, err)
			}
		})
	}
}

// TestQueueOffsetWithoutVersionBins: an offset record written before Version and Marks
// existed (bins tok, next, att, held only) reads as Version 0 and no marks, and takes
// the owner's next commit (Version 1); a claim keeps its Next, Attempts and Held.
func TestQueueOffsetWithoutVersionBins(t *testing.T) {
	c := realClient(t)
	s := queueStore(t, realServer(t))
	ctx := ctxT(t)
	spec := newQueue(t, s, 1)
	key := aerospike.QueueOffsetKey(s, spec.Name, "g", 0)
	if err := c.Put(nil, key, as.BinMap{"tok": 4, "next": 6, "att": 1, "held": 1}); err != nil {
		t.Fatal(err)
	}
	old := driver.QueueOffset{Token: 4, Next: 6, Attempts: 1, Held: true}
	offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
	if err != nil || offs[0] != old {
		t.Fatalf("old record reads %+v %v, want %+v", offs, err, old)
	}
	next := driver.QueueOffset{Token: 4, Next: 8, Version: 1}
	must(t, s.CommitQueueOffset(ctx, spec.Name, "g", 0, next), "commit of version 1 over an old record")
	off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 5)
	want := next
	want.Token = 5
	if err != nil || off != want {
		t.Fatalf("claim = %+v %v, want %+v", off, err, want)
	}
}

// TestQueueCommitInDoubtThenTakenOver: a commit's tries are held back; the first is
// delivered (applied) after the client gave up on it, and a new owner claims before the
// client's next try, which the filter refuses. The claim keeps Next and Version, so
// nothing stored tells whether the commit landed: the outcome is unknown (Connection),
// not refused. A LockLost there told the consumer its ack was refused while the offset
// had moved past the acked events, so nobody ever acked them (found by the queue chaos
// checker).
func TestQueueCommitInDoubtThenTakenOver(t *testing.T) {
	addr := realServer(t)
	proxy := startProxy(t)
	s := newStore(t, dial(t, proxy.Addr()), aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond, Attempts: 100})
	direct := queueStore(t, addr)
	ctx := ctxT(t)
	spec := newQueue(t, direct, 1)
	if _, err := direct.ClaimQueuePartition(ctx, spec.Name, "g", 0, 3); err != nil {
		t.Fatal(err)
	}
	off := driver.QueueOffset{Token: 3, Next: 5, Held: true, Version: 1}
	proxy.HoldRequests(1000, writesTo(aerospike.QueueOffsetSet))
	errc := make(chan error, 1)
	go func() { errc <- s.CommitQueueOffset(ctx, spec.Name, "g", 0, off) }()
	for proxy.Held() < 2 {
		select {
		case err := <-errc:
			t.Fatalf("commit returned %v before two tries were held", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	codes, err := proxy.Deliver()
	if err != nil {
		t.Fatal(err)
	}
	if len(codes) < 1 || codes[0] != 0 {
		t.Fatalf("the held tries were answered %v, want the first applied (0)", codes)
	}
	if _, err := direct.ClaimQueuePartition(ctx, spec.Name, "g", 0, 8); err != nil {
		t.Fatal(err)
	}
	proxy.ClearDrops()
	err = <-errc
	if dcsync.CodeOf(err) != dcsync.Connection {
		t.Fatalf("commit applied in doubt, then taken over: %v, want Connection (outcome unknown; it did land)", err)
	}
	offs, err := direct.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if offs[0].Next != 5 || offs[0].Token != 8 {
		t.Fatalf("offset %+v, want the commit's Next 5 under token 8", offs[0])
	}
}
