package aerospike_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// inDoubtThen arranges, in proxy, that the next write of the client to the queue spec
// set reaches the server but gets no reply (the client times out, in doubt, and
// tries again), and that meanwhile fn runs once: the proxy runs it, synchronously,
// when the client's next command to the spec set arrives, before forwarding it. fn
// must not go through proxy (the proxy runs it in its request loop, under its lock).
// The returned func reports whether fn has run.
func inDoubtThen(proxy *faultProxy, fn func()) func() bool {
	var dropped, ran atomic.Bool
	proxy.DropResponses(1, func(c command) bool {
		if c.Kind == "write" && c.Set == aerospike.QueueSpecSet {
			dropped.Store(true)
			return true
		}
		return false
	})
	// A busy rule that never matches: the proxy asks it about every command, before
	// the drop rules, which is the hook.
	proxy.BusyResponses(1, func(c command) bool {
		if dropped.Load() && c.Set == aerospike.QueueSpecSet && ran.CompareAndSwap(false, true) {
			fn()
		}
		return false
	})
	return ran.Load
}

// TestAddQueueGroupInDoubtRaces makes an AddQueueGroup's (or CreateQueue's) write to
// the spec record land with its reply lost, and lets another store's AddQueueGroup
// land before the retry looks at the record. The retry must judge by what the
// concurrent call cannot change: a call whose own try landed returns the spec (nil), a
// call whose group another call added returns AlreadyExists. (Before the per-group
// writer ids, qbGroupWriters, the retry compared the spec's single writer bin w, which
// the other AddQueueGroup had overwritten: the first case returned AlreadyExists, as
// TestConformanceTLS/Queue/Spec/ConcurrentAddQueueGroup once saw under load; and
// CreateQueue's retry likewise.)
func TestAddQueueGroupInDoubtRaces(t *testing.T) {
	addr := realServer(t)

	t.Run("OwnTryLandedThenAnotherGroup", func(t *testing.T) {
		proxy := startProxy(t)
		a := queueStore(t, proxy.Addr())
		b := queueStore(t, addr)
		ctx := ctxT(t)
		name := newQueue(t, b, 1, "base").Name
		defer func() { _ = b.DeleteQueue(context.Background(), name) }()
		var saw []string
		var bErr error
		ran := inDoubtThen(proxy, func() {
			sp, err := b.ReadQueueSpec(ctx, name)
			if err != nil {
				bErr = err
				return
			}
			saw = sp.Groups
			_, bErr = b.AddQueueGroup(ctx, name, "c2")
		})
		got, err := a.AddQueueGroup(ctx, name, "c1")
		if !ran() {
			t.Fatal("the other AddQueueGroup did not run between the in-doubt try and its retry")
		}
		must(t, bErr, "the other store's AddQueueGroup c2")
		if !slices.Contains(saw, "c1") {
			t.Fatalf("the in-doubt try had not landed when the other call ran (groups %v): the test set-up failed", saw)
		}
		must(t, err, "AddQueueGroup c1 whose own in-doubt try landed before another group was added")
		if got.GroupIndex("c1") < 0 {
			t.Errorf("AddQueueGroup c1 returned groups %v", got.Groups)
		}
		_, err = b.AddQueueGroup(ctx, name, "c1")
		wantCode(t, err, dcsync.AlreadyExists, "AddQueueGroup c1 again, by another store")
		read, err := b.ReadQueueSpec(ctx, name)
		must(t, err, "ReadQueueSpec")
		if want := []string{"base", "c1", "c2"}; !slices.Equal(read.Groups, want) {
			t.Errorf("groups %v, want %v", read.Groups, want)
		}
	})

	t.Run("OwnTryHeldSameGroupByAnother", func(t *testing.T) {
		// The first try does not reach the server before another store adds the same
		// group; delivered late, it changes nothing (generation).
		proxy := startProxy(t)
		a := queueStore(t, proxy.Addr())
		b := queueStore(t, addr)
		ctx := ctxT(t)
		name := newQueue(t, b, 1, "base").Name
		defer func() { _ = b.DeleteQueue(context.Background(), name) }()
		var held atomic.Bool
		proxy.HoldRequests(1, func(c command) bool {
			if c.Kind == "write" && c.Set == aerospike.QueueSpecSet {
				held.Store(true)
				return true
			}
			return false
		})
		var bErr error
		var ran atomic.Bool
		proxy.BusyResponses(1, func(c command) bool {
			if held.Load() && c.Set == aerospike.QueueSpecSet && ran.CompareAndSwap(false, true) {
				_, bErr = b.AddQueueGroup(ctx, name, "c1")
			}
			return false
		})
		_, err := a.AddQueueGroup(ctx, name, "c1")
		if !ran.Load() {
			t.Fatal("the other AddQueueGroup did not run between the held try and its retry")
		}
		must(t, bErr, "the other store's AddQueueGroup c1")
		wantCode(t, err, dcsync.AlreadyExists, "AddQueueGroup c1 whose try was held while another store added c1")
		codes, err := proxy.Deliver()
		must(t, err, "Deliver")
		t.Logf("the held try was answered with result codes %v", codes)
		read, err := b.ReadQueueSpec(ctx, name)
		must(t, err, "ReadQueueSpec")
		if want := []string{"base", "c1"}; !slices.Equal(read.Groups, want) {
			t.Errorf("groups %v, want %v", read.Groups, want)
		}
	})

	t.Run("CreateQueueLandedThenAGroup", func(t *testing.T) {
		proxy := startProxy(t)
		a := queueStore(t, proxy.Addr())
		b := queueStore(t, addr)
		ctx := ctxT(t)
		spec := driver.QueueSpec{Name: unique("q-create-race"), Partitions: 1, Groups: []string{"base"}}
		defer func() { _ = b.DeleteQueue(context.Background(), spec.Name) }()
		var bErr error
		ran := inDoubtThen(proxy, func() { _, bErr = b.AddQueueGroup(ctx, spec.Name, "c2") })
		err := a.CreateQueue(ctx, spec)
		if !ran() {
			t.Fatal("the AddQueueGroup did not run between the in-doubt create and its retry")
		}
		must(t, bErr, "the other store's AddQueueGroup c2 (the in-doubt create had landed)")
		must(t, err, "CreateQueue whose own in-doubt try landed before a group was added")
		err = b.CreateQueue(ctx, spec)
		wantCode(t, err, dcsync.AlreadyExists, "CreateQueue again, by another store")
	})
}
