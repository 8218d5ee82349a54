package aerospike_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/aerospike"
)

// queueStore returns a store on the real server with a short timeout.
func queueStore(t *testing.T, addr string) *aerospike.Store {
	t.Helper()
	return newStore(t, dial(t, addr), aerospike.Config{Timeout: 300 * time.Millisecond, RetryDelay: 5 * time.Millisecond})
}

// newQueue creates a queue of a unique name.
func newQueue(t *testing.T, s *aerospike.Store, parts int, groups ...string) driver.QueueSpec {
	t.Helper()
	if len(groups) == 0 {
		groups = []string{"g"}
	}
	spec := driver.QueueSpec{Name: unique("q#|/x"), Partitions: parts, Groups: groups, Dedup: time.Hour}
	if err := s.CreateQueue(ctxT(t), spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

func qa(p int, seq uint64, dup bool) driver.QueueAppend {
	return driver.QueueAppend{Partition: p, Seq: seq, Duplicate: dup}
}

func isCode(err error, c dcsync.Code) bool {
	var de *dcsync.Error
	return errors.As(err, &de) && de.Code == c
}

func mustRead(t *testing.T, s *aerospike.Store, q string, p int, from uint64, max int) driver.QueueRead {
	t.Helper()
	r, err := s.ReadQueue(ctxT(t), q, p, from, max)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range r.Entries {
		if e.Seq != r.Entries[0].Seq+uint64(i) {
			t.Fatalf("entries not consecutive: %+v", r.Entries)
		}
	}
	return r
}

func TestQueueBasics(t *testing.T) {
	s := queueStore(t, realServer(t))
	ctx := ctxT(t)
	spec := newQueue(t, s, 3, "a", "b#c")
	if err := s.CreateQueue(ctx, spec); !isCode(err, dcsync.AlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	got, err := s.ReadQueueSpec(ctx, spec.Name)
	if err != nil || got.Partitions != 3 || len(got.Groups) != 2 || got.Groups[1] != "b#c" || got.Dedup != time.Hour ||
		time.Since(got.Created) > time.Minute || time.Since(got.Created) < -time.Minute {
		t.Fatalf("spec %+v, %v", got, err)
	}
	if _, err := s.ReadQueueSpec(ctx, unique("missing")); !isCode(err, dcsync.NotFound) {
		t.Fatalf("missing spec: %v", err)
	}
	if _, err := s.ReadQueue(ctx, unique("missing"), 0, 0, 10); !isCode(err, dcsync.NotFound) {
		t.Fatalf("read of a missing queue: %v", err)
	}
	if _, err := s.AppendQueue(ctx, unique("missing"), []driver.QueueEvent{{}}); !isCode(err, dcsync.NotFound) {
		t.Fatalf("append to a missing queue: %v", err)
	}
	got, err = s.AddQueueGroup(ctx, spec.Name, "c")
	if err != nil || len(got.Groups) != 3 || got.Groups[2] != "c" {
		t.Fatalf("add group: %+v %v", got, err)
	}
	if _, err := s.AddQueueGroup(ctx, spec.Name, "a"); !isCode(err, dcsync.AlreadyExists) {
		t.Fatalf("add existing group: %v", err)
	}

	events := []driver.QueueEvent{
		{Partition: 0, Key: "k0", Payload: []byte("zero")},
		{Partition: 1, Payload: []byte("one")},
		{Partition: 0, ID: "id-2", Payload: []byte("two")},
		{Partition: 0, Payload: nil},
		{Partition: 4, Key: "dlq", Payload: []byte("dead")},
	}
	res, err := s.AppendQueue(ctx, spec.Name, events)
	if err != nil {
		t.Fatal(err)
	}
	want := []driver.QueueAppend{qa(0, 0, false), qa(1, 0, false), qa(0, 1, false), qa(0, 2, false), qa(4, 0, false)}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("append = %v, want %v", res, want)
	}
	r := mustRead(t, s, spec.Name, 0, 0, 100)
	if len(r.Entries) != 3 || r.Head != 3 || r.Floor != 0 {
		t.Fatalf("read = %+v", r)
	}
	for i, e := range r.Entries {
		w := events[[]int{0, 2, 3}[i]]
		if e.Key != w.Key || e.ID != w.ID || !bytes.Equal(e.Payload, w.Payload) || e.Aborted || time.Since(e.At) > time.Minute {
			t.Errorf("entry %d = %+v, want %+v", i, e, w)
		}
	}
	if r := mustRead(t, s, spec.Name, 0, 1, 1); len(r.Entries) != 1 || r.Entries[0].Seq != 1 {
		t.Fatalf("read from 1 max 1 = %+v", r)
	}
	// Duplicates: across calls and within one.
	res, err = s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{
		{Partition: 2, ID: "id-2"}, {Partition: 2, ID: "id-new"}, {Partition: 1, ID: "id-new"}})
	if err != nil {
		t.Fatal(err)
	}
	want = []driver.QueueAppend{qa(0, 1, true), qa(2, 0, false), qa(2, 0, true)}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("append with ids = %v, want %v", res, want)
	}
	b, err := s.QueueBounds(ctx, spec.Name, []int{0, 1, 2, 3, 4})
	if err != nil || fmt.Sprint(b) != "[{3 0} {1 0} {1 0} {0 0} {1 0}]" {
		t.Fatalf("bounds = %v, %v", b, err)
	}

	// Offsets.
	if _, err := s.ClaimQueuePartition(ctx, spec.Name, "a", 0, 0); !isCode(err, dcsync.InvalidArgument) {
		t.Fatalf("claim with token 0: %v", err)
	}
	off, err := s.ClaimQueuePartition(ctx, spec.Name, "a", 0, 5)
	if err != nil || off != (driver.QueueOffset{Token: 5}) {
		t.Fatalf("claim = %+v %v", off, err)
	}
	marks, err := driver.EncodeQueueMarks(2, []driver.QueueMark{{Seq: 4, Acked: true}, {Seq: 6, Attempts: 2}})
	if err != nil {
		t.Fatal(err)
	}
	want5 := driver.QueueOffset{Token: 5, Next: 2, Attempts: 1, Held: true, Version: 1, Marks: marks}
	if err := s.CommitQueueOffset(ctx, spec.Name, "a", 0, want5); err != nil {
		t.Fatal(err)
	}
	// The same value again (a retry whose first try landed) is nil; a lower or equal
	// version with another value is LockLost, changing nothing.
	if err := s.CommitQueueOffset(ctx, spec.Name, "a", 0, want5); err != nil {
		t.Fatalf("commit of the stored value: %v", err)
	}
	if err := s.CommitQueueOffset(ctx, spec.Name, "a", 0, driver.QueueOffset{Token: 5, Next: 1, Version: 1}); !isCode(err, dcsync.LockLost) {
		t.Fatalf("commit of another value at the stored version: %v", err)
	}
	if err := s.CommitQueueOffset(ctx, spec.Name, "a", 0, driver.QueueOffset{Token: 5, Next: 7, Version: 0}); !isCode(err, dcsync.LockLost) {
		t.Fatalf("commit below the stored version: %v", err)
	}
	if err := s.CommitQueueOffset(ctx, spec.Name, "a", 0, driver.QueueOffset{Token: 5, Next: 2, Version: 2, Marks: "\x00"}); !isCode(err, dcsync.InvalidArgument) {
		t.Fatalf("commit of bad marks: %v", err)
	}
	if err := s.CommitQueueOffset(ctx, spec.Name, "a", 0, driver.QueueOffset{Token: 4, Next: 3, Version: 9}); !isCode(err, dcsync.LockLost) {
		t.Fatalf("commit with an old token: %v", err)
	}
	if err := s.CommitQueueOffset(ctx, spec.Name, "a", 1, driver.QueueOffset{Token: 4, Next: 3, Version: 1}); !isCode(err, dcsync.LockLost) {
		t.Fatalf("commit to an unclaimed partition: %v", err)
	}
	off, err = s.ClaimQueuePartition(ctx, spec.Name, "a", 0, 4)
	if !isCode(err, dcsync.LockLost) || off != want5 {
		t.Fatalf("claim with a lower token = %+v %v", off, err)
	}
	// An equal token (a retried claim) writes nothing and returns the stored offset.
	off, err = s.ClaimQueuePartition(ctx, spec.Name, "a", 0, 5)
	if err != nil || off != want5 {
		t.Fatalf("claim with the stored token = %+v %v", off, err)
	}
	want7 := want5
	want7.Token = 7
	off, err = s.ClaimQueuePartition(ctx, spec.Name, "a", 0, 7)
	if err != nil || off != want7 {
		t.Fatalf("claim with a higher token = %+v %v", off, err)
	}
	offs, err := s.ReadQueueOffsets(ctx, spec.Name, "a", []int{0, 1})
	if err != nil || fmt.Sprint(offs) != fmt.Sprint([]driver.QueueOffset{want7, {}}) {
		t.Fatalf("offsets = %+v %v", offs, err)
	}
	// A claim writes the token only: Held stays as the last commit wrote it.
	if err := s.CommitQueueOffset(ctx, spec.Name, "a", 0, driver.QueueOffset{Token: 7, Next: 3, Version: 2}); err != nil {
		t.Fatal(err)
	}
	off, err = s.ClaimQueuePartition(ctx, spec.Name, "a", 0, 8)
	if err != nil || off != (driver.QueueOffset{Token: 8, Next: 3, Version: 2}) {
		t.Fatalf("claim after a release = %+v %v", off, err)
	}
	if offs, err := s.ReadQueueOffsets(ctx, spec.Name, "b#c", []int{0}); err != nil || offs[0] != (driver.QueueOffset{}) {
		t.Fatalf("other group's offsets = %+v %v", offs, err)
	}

	// Trim.
	if err := s.TrimQueue(ctx, spec.Name, 0, 4); !isCode(err, dcsync.InvalidArgument) {
		t.Fatalf("trim beyond head: %v", err)
	}
	if err := s.TrimQueue(ctx, spec.Name, 3, 0); err != nil {
		t.Fatalf("trim of an empty partition to 0: %v", err)
	}
	// Every group acked partition 0 below 3 (a is at 3): their offsets do not hold
	// the trims back.
	for _, g := range []string{"b#c", "c"} {
		if _, err := s.ClaimQueuePartition(ctx, spec.Name, g, 0, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.CommitQueueOffset(ctx, spec.Name, g, 0, driver.QueueOffset{Token: 1, Next: 3, Version: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.TrimQueue(ctx, spec.Name, 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.TrimQueue(ctx, spec.Name, 0, 1); err != nil {
		t.Fatal(err)
	}
	r = mustRead(t, s, spec.Name, 0, 0, 100)
	if r.Floor != 2 || r.Head != 3 || len(r.Entries) != 1 || r.Entries[0].Seq != 2 {
		t.Fatalf("read after trim = %+v", r)
	}
	if _, err := s.AbortQueueSeq(ctx, spec.Name, 0, 3); !isCode(err, dcsync.InvalidArgument) {
		t.Fatalf("abort at head: %v", err)
	}
	if ok, err := s.AbortQueueSeq(ctx, spec.Name, 0, 2); ok || err != nil {
		t.Fatalf("abort of a written seq = %t %v", ok, err)
	}
	if ok, err := s.AbortQueueSeq(ctx, spec.Name, 0, 0); ok || err != nil {
		t.Fatalf("abort of a trimmed seq = %t %v", ok, err)
	}
	// The trimmed records are gone.
	c := dial(t, realServer(t))
	for seq := uint64(0); seq < 3; seq++ {
		ok, err := c.Exists(nil, aerospike.QueueEntryKey(s, spec.Name, 0, seq))
		if err != nil || ok != (seq == 2) {
			t.Errorf("entry %d exists = %t %v", seq, ok, err)
		}
	}
	// Bad input.
	for _, err := range []error{
		s.CreateQueue(ctx, driver.QueueSpec{Name: "x", Partitions: 0, Groups: []string{"g"}}),
		func() error { _, err := s.ReadQueue(ctx, spec.Name, -1, 0, 1); return err }(),
		func() error { _, err := s.ReadQueue(ctx, spec.Name, 0, 0, 0); return err }(),
		func() error { _, err := s.AppendQueue(ctx, spec.Name, nil); return err }(),
		func() error {
			_, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Payload: make([]byte, driver.MaxQueuePayload+1)}})
			return err
		}(),
		s.CommitQueueOffset(ctx, spec.Name, "a", 0, driver.QueueOffset{Token: 7, Attempts: -1}),
	} {
		if !isCode(err, dcsync.InvalidArgument) {
			t.Errorf("bad input: %v, want InvalidArgument", err)
		}
	}
}

// TestQueueLargeEvents appends events at the payload limit across command chunks.
func TestQueueLargeEvents(t *testing.T) {
	s := queueStore(t, realServer(t))
	ctx := ctxT(t)
	spec := newQueue(t, s, 1)
	events := make([]driver.QueueEvent, 40) // 10 MiB: two batch commands
	for i := range events {
		events[i].Payload = bytes.Repeat([]byte{byte(i)}, driver.MaxQueuePayload)
		events[i].Key = string(bytes.Repeat([]byte{'k'}, driver.MaxQueueKeyLen))
		events[i].ID = fmt.Sprintf("%0*d", driver.MaxQueueKeyLen, i)
	}
	if _, err := s.AppendQueue(ctx, spec.Name, events); err != nil {
		t.Fatal(err)
	}
	// A read may end early (the contract lets ReadQueue return fewer entries than are
	// there; under load one batch of these 10 MiB came back with 8): read on from the
	// last entry, as a consumer does, until all 40 are in.
	var entries []driver.QueueEntry
	for reads := 0; len(entries) < 40; reads++ {
		r := mustRead(t, s, spec.Name, 0, uint64(len(entries)), 1000)
		if len(r.Entries) == 0 && reads >= 100 {
			t.Fatalf("read %d entries of 40, then nothing in 100 reads", len(entries))
		}
		entries = append(entries, r.Entries...)
	}
	if len(entries) != 40 {
		t.Fatalf("read %d entries", len(entries))
	}
	for i, e := range entries {
		if !bytes.Equal(e.Payload, events[i].Payload) || e.ID != events[i].ID {
			t.Fatalf("entry %d differs", i)
		}
	}
	if _, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 1, Next: 40, Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.TrimQueue(ctx, spec.Name, 0, 40); err != nil { // acked: deleted
		t.Fatal(err)
	}
}

// TestQueueReservationRetry: a reservation retried with its nonce (after an in-doubt
// try that was applied) returns the same seqs and reserves nothing more.
func TestQueueReservationRetry(t *testing.T) {
	s := queueStore(t, realServer(t))
	ctx := ctxT(t)
	spec := newQueue(t, s, 1)
	first, err := aerospike.ReserveQueueSeqs(ctx, s, spec.Name, 0, 5, 42)
	if err != nil || first != 0 {
		t.Fatalf("reserve = %d %v", first, err)
	}
	second, err := aerospike.ReserveQueueSeqs(ctx, s, spec.Name, 0, 3, 43)
	if err != nil || second != 5 {
		t.Fatalf("reserve = %d %v", second, err)
	}
	again, err := aerospike.ReserveQueueSeqs(ctx, s, spec.Name, 0, 5, 42)
	if err != nil || again != 0 {
		t.Fatalf("retried reserve = %d %v", again, err)
	}
	b, err := s.QueueBounds(ctx, spec.Name, []int{0})
	if err != nil || b[0].Head != 8 {
		t.Fatalf("bounds = %v %v", b, err)
	}
}

// TestQueueHoleAbortedThenWritten: a producer stalls between reserving and writing; the
// reader stops at the hole, the consumer aborts it, and the producer's late
// create-only write fails on the tombstone, so it appends the event again.
func TestQueueHoleAbortedThenWritten(t *testing.T) {
	for _, withID := range []bool{false, true} {
		t.Run(fmt.Sprintf("id=%t", withID), func(t *testing.T) {
			s := queueStore(t, realServer(t))
			ctx := ctxT(t)
			spec := newQueue(t, s, 1)
			ev := driver.QueueEvent{Payload: []byte("late")}
			if withID {
				ev.ID = "late-id"
			}
			reserved, release := make(chan struct{}), make(chan struct{})
			var first atomic.Bool
			aerospike.SetQueueTestHook(func(q, stage string) error {
				if q == spec.Name && stage == "ids" && first.CompareAndSwap(false, true) {
					close(reserved)
					<-release
				}
				return nil
			})
			t.Cleanup(func() { aerospike.SetQueueTestHook(nil) })
			type result struct {
				res []driver.QueueAppend
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{ev})
				done <- result{res, err}
			}()
			<-reserved
			// Another producer appends behind the hole.
			if res, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Payload: []byte("next")}}); err != nil || res[0].Seq != 1 {
				t.Fatalf("append behind the hole = %v %v", res, err)
			}
			r := mustRead(t, s, spec.Name, 0, 0, 10)
			if len(r.Entries) != 0 || r.Head != 2 {
				t.Fatalf("read at a hole = %+v", r)
			}
			if ok, err := s.AbortQueueSeq(ctx, spec.Name, 0, 0); !ok || err != nil {
				t.Fatalf("abort = %t %v", ok, err)
			}
			if ok, err := s.AbortQueueSeq(ctx, spec.Name, 0, 0); !ok || err != nil {
				t.Fatalf("second abort = %t %v", ok, err)
			}
			close(release)
			got := <-done
			if got.err != nil || got.res[0] != (driver.QueueAppend{Partition: 0, Seq: 2}) {
				t.Fatalf("late append = %v %v", got.res, got.err)
			}
			r = mustRead(t, s, spec.Name, 0, 0, 10)
			if len(r.Entries) != 3 || !r.Entries[0].Aborted || r.Entries[1].Aborted || string(r.Entries[2].Payload) != "late" {
				t.Fatalf("read after the late append = %+v", r)
			}
			if withID {
				res, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{ev})
				if err != nil || res[0] != (driver.QueueAppend{Partition: 0, Seq: 2, Duplicate: true}) {
					t.Fatalf("append of the id again = %v %v", res, err)
				}
			}
		})
	}
}

var errDied = errors.New("the producer died")

// TestQueueProducerDiesAfterID: a producer dies after writing its id record, before
// its event. A retry of the same id completes the unwritten seq; if the consumer
// aborted the seq first, the retry appends the event again and moves the id record.
func TestQueueProducerDiesAfterID(t *testing.T) {
	for _, aborted := range []bool{false, true} {
		t.Run(fmt.Sprintf("aborted=%t", aborted), func(t *testing.T) {
			s := queueStore(t, realServer(t))
			ctx := ctxT(t)
			spec := newQueue(t, s, 2)
			aerospike.SetQueueTestHook(func(q, stage string) error {
				if q == spec.Name && stage == "ids" {
					return errDied
				}
				return nil
			})
			ev := driver.QueueEvent{Partition: 1, ID: "dying", Payload: []byte("x")}
			if _, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{ev}); !errors.Is(err, errDied) {
				t.Fatalf("dying append: %v", err)
			}
			aerospike.SetQueueTestHook(nil)
			want := driver.QueueAppend{Partition: 1, Seq: 0}
			if aborted {
				if ok, err := s.AbortQueueSeq(ctx, spec.Name, 1, 0); !ok || err != nil {
					t.Fatalf("abort = %t %v", ok, err)
				}
				want.Seq = 1
			}
			res, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{ev})
			if err != nil || res[0] != want {
				t.Fatalf("retry = %v %v, want %v", res, err, want)
			}
			res, err = s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{ev})
			want.Duplicate = true
			if err != nil || res[0] != want {
				t.Fatalf("second retry = %v %v, want %v", res, err, want)
			}
			r := mustRead(t, s, spec.Name, 1, 0, 10)
			if len(r.Entries) != int(want.Seq)+1 || r.Head != want.Seq+1 || string(r.Entries[want.Seq].Payload) != "x" {
				t.Fatalf("read = %+v", r)
			}
		})
	}
}

// TestQueueConcurrentSameID: appends of one id racing: exactly one is appended, the
// others are duplicates of it, and no seq is reserved for them (the id is claimed
// before the reservation).
func TestQueueConcurrentSameID(t *testing.T) {
	s := queueStore(t, realServer(t))
	ctx := ctxT(t)
	spec := newQueue(t, s, 1)
	const n = 8
	res := make([]driver.QueueAppend, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{ID: "same", Payload: []byte{byte(i)}}})
			if err == nil {
				res[i] = r[0]
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	appended := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !res[i].Duplicate {
			appended++
		}
	}
	if appended != 1 {
		t.Fatalf("results %v: %d appended, want 1", res, appended)
	}
	r := mustRead(t, s, spec.Name, 0, 0, 100)
	if len(r.Entries) != 1 || r.Head != 1 || r.Entries[0].Aborted {
		t.Fatalf("read = %+v: want one event, no tombstone, no hole", r)
	}
}

// TestQueueInDoubtAppend: the proxy drops the reply of the reservation, of the id
// records' write or of the entries' write (each applied by the server; the client
// times out, in doubt); the append still stores every event exactly once, and
// reserves no seq twice.
func TestQueueInDoubtAppend(t *testing.T) {
	addr := realServer(t)
	// The append's batches: 1 claims the ids, 2 reserves, 3 points the id records at
	// the seqs, 4 writes the entries.
	for _, drop := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("drop-batch-%d", drop), func(t *testing.T) {
			proxy := startProxy(t)
			s := queueStore(t, proxy.Addr())
			ctx := ctxT(t)
			spec := newQueue(t, queueStore(t, addr), 2)
			// Warm the spec cache through the proxy so that the drops hit the append.
			if _, err := s.ReadQueueSpec(ctx, spec.Name); err != nil {
				t.Fatal(err)
			}
			seen := 0
			proxy.DropResponses(1, func(c command) bool {
				if c.Kind == "batch" {
					seen++
					return seen == drop
				}
				return false
			})
			events := make([]driver.QueueEvent, 20)
			for i := range events {
				events[i] = driver.QueueEvent{Partition: i % 2, ID: fmt.Sprint("e", i), Payload: []byte{byte(i)}}
			}
			res, err := s.AppendQueue(ctx, spec.Name, events)
			if err != nil {
				t.Fatal(err)
			}
			if st := proxy.Stats(); st.Dropped != 1 {
				t.Fatalf("dropped %d replies", st.Dropped)
			}
			for i, r := range res {
				if r.Duplicate || r.Partition != i%2 || r.Seq != uint64(i/2) {
					t.Errorf("result %d = %+v", i, r)
				}
			}
			for p := range 2 {
				r := mustRead(t, s, spec.Name, p, 0, 100)
				if r.Head != 10 || len(r.Entries) != 10 {
					t.Fatalf("partition %d: %+v", p, r)
				}
				for _, e := range r.Entries {
					if e.Aborted || e.Payload[0] != byte(2*e.Seq)+byte(p) {
						t.Errorf("partition %d entry %+v", p, e)
					}
				}
			}
		})
	}
}

var _ = as.TTLDontExpire

// TestQueueInDoubtSingleWrites: the proxy drops the reply of AbortQueueSeq's
// tombstone, of a claim, of a commit and of a trim (each applied by the server): the
// retries report what the first try did.
func TestQueueInDoubtSingleWrites(t *testing.T) {
	addr := realServer(t)
	proxy := startProxy(t)
	s := queueStore(t, proxy.Addr())
	ctx := ctxT(t)
	spec := newQueue(t, queueStore(t, addr), 1)
	if _, err := aerospike.ReserveQueueSeqs(ctx, s, spec.Name, 0, 1, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendQueue(ctx, spec.Name, []driver.QueueEvent{{Payload: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	proxy.DropResponses(1, writesTo(aerospike.QueueEntrySet))
	if ok, err := s.AbortQueueSeq(ctx, spec.Name, 0, 0); !ok || err != nil {
		t.Fatalf("in-doubt abort = %t %v", ok, err)
	}
	proxy.DropResponses(1, writesTo(aerospike.QueueOffsetSet))
	off, err := s.ClaimQueuePartition(ctx, spec.Name, "g", 0, 3)
	if err != nil || off.Token != 3 || off.Next != 0 {
		t.Fatalf("in-doubt claim = %+v %v", off, err)
	}
	proxy.DropResponses(1, writesTo(aerospike.QueueOffsetSet))
	if err := s.CommitQueueOffset(ctx, spec.Name, "g", 0, driver.QueueOffset{Token: 3, Next: 2, Version: 1}); err != nil {
		t.Fatalf("in-doubt commit: %v", err)
	}
	proxy.DropResponses(1, writesTo(aerospike.QueueHeadSet))
	if err := s.TrimQueue(ctx, spec.Name, 0, 2); err != nil {
		t.Fatalf("in-doubt trim: %v", err)
	}
	if st := proxy.Stats(); st.Dropped != 4 {
		t.Fatalf("dropped %d replies, want 4", st.Dropped)
	}
	offs, err := s.ReadQueueOffsets(ctx, spec.Name, "g", []int{0})
	if err != nil || offs[0] != (driver.QueueOffset{Token: 3, Next: 2, Version: 1}) {
		t.Fatalf("offsets = %+v %v", offs, err)
	}
	r := mustRead(t, s, spec.Name, 0, 0, 10)
	if r.Floor != 2 || r.Head != 2 || len(r.Entries) != 0 {
		t.Fatalf("read = %+v", r)
	}
}
