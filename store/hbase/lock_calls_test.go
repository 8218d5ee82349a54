package hbase

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/internal/hbaserpc"
	"github.com/dcsync/dcsync/layout"
)

// sumCalls is the number of calls of a counting.take.
func sumCalls(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// TestLockCalls (real HBase) counts the calls of each lock operation exactly: the first
// acquire of a row 2 (a read of its counter and the earlier layout's, then the take,
// which creates the counter: readFence; 3 before, when the counter was moved after the
// take by a read and a conditional put), every later acquire 1 and a release
// 1 (from the memory of the acquire), a refresh 1; a release whose memory is out of
// date (another store refreshed the lease) reads the row and still frees it.
func TestLockCalls(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	cnt := countCalls(s)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc1")
	step := func(what string, want int, f func() error) {
		t.Helper()
		cnt.take()
		must(t, f(), what)
		got := cnt.take()
		if n := sumCalls(got); n != want {
			t.Errorf("%s: %d calls %v, want %d", what, n, got, want)
		}
	}
	var last uint64
	acquire := func(owner string, want int) {
		t.Helper()
		step("acquire by "+owner, want, func() error {
			st, err := s.AcquireLock(ctx, k, owner, 20*time.Second)
			if err == nil && st.Token <= last {
				err = fmt.Errorf("token %d after %d", st.Token, last)
			}
			last = st.Token
			return err
		})
	}
	acquire("o1", 2)
	step("release", 1, func() error { return s.ReleaseLock(ctx, k, "o1") })
	for i := 2; i < 5; i++ {
		o := fmt.Sprint("o", i)
		acquire(o, 1)
		step("refresh", 1, func() error { _, err := s.RefreshLock(ctx, k, o, 30*time.Second); return err })
		step("release", 1, func() error { return s.ReleaseLock(ctx, k, o) })
	}
	if n := s.held.size(); n != 0 {
		t.Errorf("%d locks remembered after every release", n)
	}

	// Out of date: another store refreshes the lease (a new D:E); this store's release,
	// conditioned on the D:E it remembers, is not applied, reads, and frees the lock.
	other := openStore(t)
	defer other.Close()
	acquire("o9", 1)
	_, err := other.RefreshLock(ctx, k, "o9", 40*time.Second)
	must(t, err, "refresh by the other store")
	cnt.take()
	must(t, s.ReleaseLock(ctx, k, "o9"), "release with a memory out of date")
	if got := cnt.take(); sumCalls(got) != 3 {
		t.Errorf("release with a memory out of date: %v, want 3 calls (write, read, write)", got)
	}
	if _, err := s.InspectLock(ctx, k); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("after the release the lock is %v, want free", err)
	}
}

// TestLockTokenSurvivesJavaRelease (real HBase): a Java release is a row delete
// stamped with the server's time; it hides every cell of the row at or before it, but
// not the fencing counter (its version is above fenceBase): the next acquire's token
// is still larger. And a contender whose take fails does not bump the counter (it is
// bumped in the same atomic write as the take): after the failed takes the counter
// still reads the holder's token. (The next holder's token is not checked to be the
// previous + 1: an acquire in the same millisecond as the Java delete has its cells
// hidden and takes again, bumping the counter twice, which keeps tokens increasing.)
func TestLockTokenSurvivesJavaRelease(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	c := shared(t)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc1")
	row := layout.HBaseLockRow(k)
	var last uint64
	for i := 0; i < 3; i++ {
		st, err := s.AcquireLock(ctx, k, "me", 20*time.Second)
		must(t, err, "acquire")
		if st.Token <= last {
			t.Fatalf("round %d: token %d after %d (a Java release in between)", i, st.Token, last)
		}
		last = st.Token
		for j := 0; j < 3; j++ {
			_, err := s.AcquireLock(ctx, k, "contender", 20*time.Second)
			wantCode(t, err, dcsync.LockUnavailable, "contender")
		}
		cells, err := c.Get(ctx, s.lockTable, row, hbaserpc.Column{Family: famLock, Qualifier: qualFence})
		must(t, err, "read the counter")
		if len(cells) != 1 || len(cells[0].Value) != 8 {
			t.Fatalf("round %d: counter cells %v, want one 8-byte counter", i, cells)
		}
		if n := binary.BigEndian.Uint64(cells[0].Value); n != st.Token {
			t.Fatalf("round %d: counter %d after the failed takes, want the holder's token %d: the failed takes bumped the counter", i, n, st.Token)
		}
		// The Java release: Delete(row), stamped by the server (HBaseStore.java:103).
		must(t, c.Delete(ctx, s.lockTable, &hbaserpc.Delete{Row: row}), "Java release")
		s.held.forget(row, "me")
	}
	st, err := s.AcquireLock(ctx, k, "next", 20*time.Second)
	must(t, err, "acquire after the contenders")
	if st.Token <= last {
		t.Fatalf("token %d after %d (a Java release in between)", st.Token, last)
	}
	must(t, s.ReleaseLock(ctx, k, "next"), "release")
}

// TestLockFenceMoved (real HBase): a key whose tokens came from the counter of the
// earlier layout (its own row, fenceRow) continues above it once the counter moves into
// the lock row: tokens keep increasing across the upgrade.
func TestLockFenceMoved(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	c := shared(t)
	ctx := ctxT(t, time.Minute)
	k := key(dcsync.DC, "dc1")
	_, err := c.Increment(ctx, s.lockTable, &hbaserpc.Increment{Row: fenceRow(k),
		Deltas: []hbaserpc.Delta{{Family: famLock, Qualifier: qualFence, Amount: 57}}})
	must(t, err, "the earlier layout's counter")
	for want := uint64(58); want < 61; want++ {
		st, err := s.AcquireLock(ctx, k, "me", 20*time.Second)
		must(t, err, "acquire")
		if st.Token != want {
			t.Fatalf("token %d, want %d (above the earlier counter's 57)", st.Token, want)
		}
		in, err := s.InspectLock(ctx, k)
		must(t, err, "inspect")
		if in.Token != st.Token {
			t.Fatalf("inspect token %d, acquired %d", in.Token, st.Token)
		}
		must(t, s.ReleaseLock(ctx, k, "me"), "release")
	}
}

// TestLockSharedRowTokens (real HBase): keys that share a Java lock row keep counters of
// their own (the earlier layout, tokens recorded in D:T): each key's tokens increase,
// and Inspect and the calls of the memory path agree with them.
func TestLockSharedRowTokens(t *testing.T) {
	s := openStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	id := randHex(4)
	k1 := dcsync.Key{Level: dcsync.DC, Client: "a#" + id, Farm: "dc1", Name: "c"}
	k2 := dcsync.Key{Level: dcsync.DC, Client: "a", Farm: "dc1", Name: id + "#c"}
	last := map[dcsync.Key]uint64{}
	for i := 0; i < 6; i++ {
		k := []dcsync.Key{k1, k2}[i%2]
		st, err := s.AcquireLock(ctx, k, "me", 20*time.Second)
		must(t, err, "acquire")
		if st.Token <= last[k] {
			t.Fatalf("%v: token %d after %d", k, st.Token, last[k])
		}
		last[k] = st.Token
		for _, kk := range []dcsync.Key{k1, k2} {
			in, err := s.InspectLock(ctx, kk)
			must(t, err, "inspect")
			if in.Token != st.Token {
				t.Fatalf("inspect %v: token %d, acquired %d", kk, in.Token, st.Token)
			}
		}
		_, err = s.RefreshLock(ctx, k, "me", 30*time.Second)
		must(t, err, "refresh")
		must(t, s.ReleaseLock(ctx, k, "me"), "release")
	}
	t.Logf("tokens: %v", last)
}
