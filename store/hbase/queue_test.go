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

// envQueueTable names the run's queue table for the suite's child processes.
const envQueueTable = "DCSYNC_TEST_HBASE_QUEUE_TABLE"

// queueFixture is the run's one queue table (pre-split tables are costly for the
// small test cluster: every queue test shares it, with unique queue names).
var queueFixture struct {
	once  sync.Once
	table string
	err   error
}

// openQueueStore returns a store on the run's shared client using the run's queue
// table, created on first use.
func openQueueStore(t testing.TB) *Store {
	t.Helper()
	s := openStore(t)
	queueFixture.once.Do(func() {
		queueFixture.table = "dcsync_test_queue_" + randHex(4)
		noteTables(queueFixture.table)
		setQueueTable(s, queueFixture.table)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, _, queueFixture.err = s.qready(ctx, "test")
	})
	if queueFixture.err != nil {
		t.Fatalf("queue table: %v", queueFixture.err)
	}
	setQueueTable(s, queueFixture.table)
	return s
}

func qname(t testing.TB) string { return "q-" + randHex(5) }

func mustCreate(t *testing.T, s *Store, spec driver.QueueSpec) {
	t.Helper()
	must(t, s.CreateQueue(ctxT(t, time.Minute), spec), "CreateQueue")
}

func ev(p int, payload string) driver.QueueEvent {
	return driver.QueueEvent{Partition: p, Payload: []byte(payload)}
}

// readAll reads partition p from from until the read comes back short.
func readAll(t *testing.T, s driver.QueueStore, name string, p int, from uint64) []driver.QueueEntry {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	var out []driver.QueueEntry
	for {
		r, err := s.ReadQueue(ctx, name, p, from, 100)
		must(t, err, "ReadQueue")
		out = append(out, r.Entries...)
		if len(r.Entries) < 100 {
			return out
		}
		from = r.Entries[len(r.Entries)-1].Seq + 1
	}
}

func TestQueueSpec(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	name := qname(t)
	spec := driver.QueueSpec{Name: name, Partitions: 3, Groups: []string{"g1", "a#b|c/d"}, Dedup: time.Hour}
	_, err := s.ReadQueueSpec(ctx, name)
	wantCode(t, err, dcsync.NotFound, "ReadQueueSpec of a missing queue")
	_, err = s.AppendQueue(ctx, name, []driver.QueueEvent{ev(0, "x")})
	wantCode(t, err, dcsync.NotFound, "AppendQueue to a missing queue")
	before := time.Now().Add(-time.Minute)
	mustCreate(t, s, spec)
	wantCode(t, s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: 9, Groups: []string{"x"}}), dcsync.AlreadyExists, "second CreateQueue")
	got, err := s.ReadQueueSpec(ctx, name)
	must(t, err, "ReadQueueSpec")
	if got.Name != name || got.Partitions != 3 || fmt.Sprint(got.Groups) != fmt.Sprint(spec.Groups) || got.Dedup != time.Hour || got.Created.Before(before) {
		t.Fatalf("spec %+v", got)
	}
	got2, err := s.AddQueueGroup(ctx, name, "g3")
	must(t, err, "AddQueueGroup")
	if fmt.Sprint(got2.Groups) != "[g1 a#b|c/d g3]" || !got2.Created.Equal(got.Created) || got2.StoragePartitions() != 6 {
		t.Fatalf("after AddQueueGroup: %+v (created %v)", got2, got.Created)
	}
	got3, err := s.AddQueueGroup(ctx, name, "g3")
	wantCode(t, err, dcsync.AlreadyExists, "AddQueueGroup twice")
	if len(got3.Groups) != 3 {
		t.Fatalf("spec with AlreadyExists: %+v", got3)
	}
	_, err = s.AddQueueGroup(ctx, "nope-"+name, "g")
	wantCode(t, err, dcsync.NotFound, "AddQueueGroup of a missing queue")
	// Names sharing bytes stay apart: "ab"+group vs "a"+...
	mustCreate(t, s, driver.QueueSpec{Name: name + "x", Partitions: 1, Groups: []string{"g"}})
	if sp, _ := s.ReadQueueSpec(ctx, name+"x"); sp.Partitions != 1 {
		t.Fatalf("other queue: %+v", sp)
	}
	// Bad input fails before any I/O.
	for _, bad := range []driver.QueueSpec{{}, {Name: "x", Partitions: 0, Groups: []string{"g"}}, {Name: "x", Partitions: 1}} {
		wantCode(t, s.CreateQueue(ctx, bad), dcsync.InvalidArgument, fmt.Sprintf("CreateQueue(%+v)", bad))
	}
	_, err = s.ReadQueue(ctx, name, -1, 0, 10)
	wantCode(t, err, dcsync.InvalidArgument, "ReadQueue(-1)")
	_, err = s.ReadQueue(ctx, name, 0, 0, 0)
	wantCode(t, err, dcsync.InvalidArgument, "ReadQueue(max 0)")
	_, err = s.AppendQueue(ctx, name, nil)
	wantCode(t, err, dcsync.InvalidArgument, "AppendQueue(nil)")
}

func TestQueueAppendRead(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	name := qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: 4, Groups: []string{"g"}})
	var evs []driver.QueueEvent
	for i := 0; i < 30; i++ {
		e := ev(i%3, fmt.Sprint("payload-", i))
		e.Key = fmt.Sprint("k", i)
		evs = append(evs, e)
	}
	evs = append(evs, driver.QueueEvent{Partition: 3}) // empty payload
	res, err := s.AppendQueue(ctx, name, evs)
	must(t, err, "AppendQueue")
	next := map[int]uint64{}
	for i, r := range res {
		if r.Partition != evs[i].Partition || r.Seq != next[r.Partition] || r.Duplicate {
			t.Fatalf("result %d = %+v, want partition %d seq %d", i, r, evs[i].Partition, next[r.Partition])
		}
		next[r.Partition]++
	}
	res2, err := s.AppendQueue(ctx, name, []driver.QueueEvent{ev(0, "more")})
	must(t, err, "AppendQueue")
	if res2[0].Seq != 10 {
		t.Fatalf("second append: %+v", res2)
	}
	got := readAll(t, s, name, 0, 0)
	if len(got) != 11 {
		t.Fatalf("partition 0 has %d entries", len(got))
	}
	for k, e := range got {
		want := "more"
		if k < 10 {
			want = fmt.Sprint("payload-", 3*k)
		}
		if e.Seq != uint64(k) || string(e.Payload) != want || e.Aborted || e.At.IsZero() || time.Since(e.At) > time.Hour {
			t.Fatalf("entry %d = %+v, want payload %s", k, e, want)
		}
	}
	r, err := s.ReadQueue(ctx, name, 1, 4, 3)
	must(t, err, "ReadQueue")
	if len(r.Entries) != 3 || r.Entries[0].Seq != 4 || r.Entries[0].Key != "k13" || r.Head != 10 || r.Floor != 0 {
		t.Fatalf("ReadQueue(1, 4, 3) = %+v", r)
	}
	r, err = s.ReadQueue(ctx, name, 3, 0, 10)
	must(t, err, "ReadQueue")
	if len(r.Entries) != 1 || len(r.Entries[0].Payload) != 0 || r.Head != 1 {
		t.Fatalf("partition 3 = %+v", r)
	}
	r, err = s.ReadQueue(ctx, name, 2, 10, 10)
	must(t, err, "ReadQueue at the head")
	if len(r.Entries) != 0 || r.Head != 10 {
		t.Fatalf("read at head = %+v", r)
	}
	b, err := s.QueueBounds(ctx, name, []int{0, 1, 2, 3, 4, 7})
	must(t, err, "QueueBounds")
	if fmt.Sprint(b) != "[{11 0} {10 0} {10 0} {1 0} {0 0} {0 0}]" {
		t.Fatalf("bounds %v", b)
	}

	// Trim: the floor rises, never falls; reads start at it.
	ackAll(t, ctx, s, name, 0, 11)
	must(t, s.TrimQueue(ctx, name, 0, 4), "TrimQueue")
	must(t, s.TrimQueue(ctx, name, 0, 2), "TrimQueue lower")
	r, err = s.ReadQueue(ctx, name, 0, 0, 3)
	must(t, err, "ReadQueue after trim")
	if r.Floor != 4 || len(r.Entries) != 3 || r.Entries[0].Seq != 4 {
		t.Fatalf("after trim: %+v", r)
	}
	wantCode(t, s.TrimQueue(ctx, name, 0, 12), dcsync.InvalidArgument, "TrimQueue beyond head")
	must(t, s.TrimQueue(ctx, name, 0, 11), "TrimQueue to head")
	r, err = s.ReadQueue(ctx, name, 0, 0, 3)
	must(t, err, "ReadQueue after full trim")
	if r.Floor != 11 || r.Head != 11 || len(r.Entries) != 0 {
		t.Fatalf("after full trim: %+v", r)
	}
	// The trimmed events are gone: each row holds the one-byte trimmed mark (which
	// expires with the dedup window), nothing else.
	rows, err := s.client.Scan(ctx, s.QueueTable(), hbaserpc.Scan{StartRow: entryRow(partPrefix(name, 0), 0), StopRow: entryRow(partPrefix(name, 0), 100)})
	must(t, err, "scan")
	if len(rows) != 11 {
		t.Fatalf("%d entry rows after trimming everything, want 11 marks", len(rows))
	}
	for _, r := range rows {
		if len(r.Cells) != 1 || !bytes.Equal(r.Cells[0].Qualifier, qualEntry) || !bytes.Equal(r.Cells[0].Value, []byte{entryTrimmed}) {
			t.Fatalf("trimmed row %x holds %+v, want the trimmed mark alone", r.Key, r.Cells)
		}
	}
}

func TestQueueOffsets(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	name := qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: 2, Groups: []string{"g", "h"}})
	offs, err := s.ReadQueueOffsets(ctx, name, "g", []int{0, 1, 2})
	must(t, err, "ReadQueueOffsets")
	if fmt.Sprint(offs) != fmt.Sprint(make([]driver.QueueOffset, 3)) {
		t.Fatalf("fresh offsets %v", offs)
	}
	o, err := s.ClaimQueuePartition(ctx, name, "g", 1, 5)
	must(t, err, "Claim")
	if o != (driver.QueueOffset{Token: 5}) {
		t.Fatalf("first claim %+v", o)
	}
	must(t, s.CommitQueueOffset(ctx, name, "g", 1, driver.QueueOffset{Token: 5, Next: 7, Attempts: 2, Held: true, Version: 1}), "Commit")
	wantCode(t, s.CommitQueueOffset(ctx, name, "g", 1, driver.QueueOffset{Token: 4, Next: 9, Version: 2}), dcsync.LockLost, "Commit with an old token")
	o, err = s.ClaimQueuePartition(ctx, name, "g", 1, 5)
	must(t, err, "retried Claim")
	if o != (driver.QueueOffset{Token: 5, Next: 7, Attempts: 2, Held: true, Version: 1}) {
		t.Fatalf("retried claim %+v", o)
	}
	o, err = s.ClaimQueuePartition(ctx, name, "g", 1, 3)
	wantCode(t, err, dcsync.LockLost, "Claim with a lower token")
	if o.Token != 5 || o.Next != 7 {
		t.Fatalf("stored offset with LockLost: %+v", o)
	}
	o, err = s.ClaimQueuePartition(ctx, name, "g", 1, 8)
	must(t, err, "Claim by a new owner")
	if o != (driver.QueueOffset{Token: 8, Next: 7, Attempts: 2, Held: true, Version: 1}) {
		t.Fatalf("takeover claim %+v", o)
	}
	wantCode(t, s.CommitQueueOffset(ctx, name, "g", 1, driver.QueueOffset{Token: 5, Next: 20, Version: 2}), dcsync.LockLost, "zombie commit")
	must(t, s.CommitQueueOffset(ctx, name, "g", 1, driver.QueueOffset{Token: 8, Next: 9, Version: 2}), "release")
	offs, err = s.ReadQueueOffsets(ctx, name, "g", []int{1, 0})
	must(t, err, "ReadQueueOffsets")
	if offs[0] != (driver.QueueOffset{Token: 8, Next: 9, Version: 2}) || offs[1] != (driver.QueueOffset{}) {
		t.Fatalf("offsets %v", offs)
	}
	offs, err = s.ReadQueueOffsets(ctx, name, "h", []int{1})
	must(t, err, "ReadQueueOffsets of another group")
	if offs[0] != (driver.QueueOffset{}) {
		t.Fatalf("group h: %v", offs)
	}
	// Concurrent claims with distinct tokens: the highest ends up stored, each winner
	// saw a consistent predecessor.
	var wg sync.WaitGroup
	for tok := uint64(10); tok < 20; tok++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.ClaimQueuePartition(ctx, name, "h", 0, tok)
			if err != nil && dcsync.CodeOf(err) != dcsync.LockLost {
				t.Errorf("claim %d: %v", tok, err)
			}
		}()
	}
	wg.Wait()
	offs, err = s.ReadQueueOffsets(ctx, name, "h", []int{0})
	must(t, err, "ReadQueueOffsets")
	if offs[0] != (driver.QueueOffset{Token: 19}) {
		t.Fatalf("after concurrent claims: %+v", offs[0])
	}
}

func TestQueueDedup(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	name := qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: 2, Groups: []string{"g"}, Dedup: time.Minute})
	e := func(p int, id string) driver.QueueEvent {
		return driver.QueueEvent{Partition: p, ID: id, Payload: []byte(id)}
	}
	res, err := s.AppendQueue(ctx, name, []driver.QueueEvent{e(0, "a"), e(0, "b"), e(1, "a"), e(1, "c")})
	must(t, err, "AppendQueue")
	want := []driver.QueueAppend{{Partition: 0, Seq: 0, Duplicate: false}, {Partition: 0, Seq: 1, Duplicate: false}, {Partition: 0, Seq: 0, Duplicate: true}, {Partition: 1, Seq: 0, Duplicate: false}}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("results %v, want %v", res, want)
	}
	res, err = s.AppendQueue(ctx, name, []driver.QueueEvent{e(1, "c"), e(0, "d"), e(1, "b"), e(0, "e")})
	must(t, err, "AppendQueue")
	want = []driver.QueueAppend{{Partition: 1, Seq: 0, Duplicate: true}, {Partition: 0, Seq: 2, Duplicate: false}, {Partition: 0, Seq: 1, Duplicate: true}, {Partition: 0, Seq: 3, Duplicate: false}}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("results %v, want %v", res, want)
	}
	if got := readAll(t, s, name, 0, 0); len(got) != 4 {
		t.Fatalf("partition 0: %d entries", len(got))
	}
	// Concurrent appends of one id: exactly one stores it.
	var wg sync.WaitGroup
	out := make([]driver.QueueAppend, 8)
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.AppendQueue(ctx, name, []driver.QueueEvent{e(i%2, "race")})
			if err != nil {
				t.Errorf("append %d: %v", i, err)
				return
			}
			out[i] = r[0]
		}()
	}
	wg.Wait()
	stored := 0
	for _, r := range out {
		if !r.Duplicate {
			stored++
		}
		if r.Partition != out[0].Partition || r.Seq != out[0].Seq {
			t.Fatalf("racing appends disagree: %v", out)
		}
	}
	if stored != 1 {
		t.Fatalf("%d racing appends stored the id: %v", stored, out)
	}
	n := 0
	for p := 0; p < 2; p++ {
		for _, x := range readAll(t, s, name, p, 0) {
			if x.ID == "race" && !x.Aborted {
				n++
			}
		}
	}
	if n != 1 {
		t.Fatalf("id stored %d times", n)
	}
}

// TestQueueHoles: a seq reserved and not written stops readers; the consumer's abort
// tombstones it; the producer's late write then fails on the tombstone and the event is
// appended again at a fresh seq.
func TestQueueHoles(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	name := qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: 1, Groups: []string{"g"}})
	_, err := s.AppendQueue(ctx, name, []driver.QueueEvent{ev(0, "a0"), ev(0, "a1")})
	must(t, err, "AppendQueue")

	// A bare reservation (a producer that died after reserving).
	table, db, err := s.qready(ctx, "test")
	must(t, err, "qready")
	a := newAppender(s, db, table, name, "test", time.Hour, []driver.QueueEvent{ev(0, "lost")})
	must(t, a.reserve(ctx, []int{0}), "reserve")
	if a.seq[0] != 2 {
		t.Fatalf("reserved seq %d, want 2", a.seq[0])
	}
	_, err = s.AppendQueue(ctx, name, []driver.QueueEvent{ev(0, "a3")})
	must(t, err, "AppendQueue after the hole")
	r, err := s.ReadQueue(ctx, name, 0, 0, 10)
	must(t, err, "ReadQueue")
	if len(r.Entries) != 2 || r.Head != 4 {
		t.Fatalf("read over a hole: %+v (want 2 entries, head 4)", r)
	}
	r, err = s.ReadQueue(ctx, name, 0, 2, 10)
	must(t, err, "ReadQueue at the hole")
	if len(r.Entries) != 0 {
		t.Fatalf("read at the hole: %+v", r)
	}
	_, err = s.AbortQueueSeq(ctx, name, 0, 4)
	wantCode(t, err, dcsync.InvalidArgument, "AbortQueueSeq at head")
	aborted, err := s.AbortQueueSeq(ctx, name, 0, 1)
	must(t, err, "AbortQueueSeq of a written seq")
	if aborted {
		t.Fatalf("a written seq reported aborted")
	}
	aborted, err = s.AbortQueueSeq(ctx, name, 0, 2)
	must(t, err, "AbortQueueSeq")
	if !aborted {
		t.Fatalf("the hole was not aborted")
	}
	aborted, err = s.AbortQueueSeq(ctx, name, 0, 2)
	if err != nil || !aborted {
		t.Fatalf("second abort: %v, %v", aborted, err)
	}
	r, err = s.ReadQueue(ctx, name, 0, 0, 10)
	must(t, err, "ReadQueue")
	if len(r.Entries) != 4 || !r.Entries[2].Aborted || r.Entries[2].Payload != nil || r.Entries[3].Aborted || string(r.Entries[3].Payload) != "a3" {
		t.Fatalf("read over the tombstone: %+v", r)
	}
	// The dead producer comes back and writes: its if-absent put fails on the
	// tombstone, and it appends the event again.
	must(t, a.write(ctx, []int{0}), "late write")
	if a.done[0] {
		t.Fatalf("late write over a tombstone reported done: %+v", a.res[0])
	}
	must(t, a.run(ctx), "producer's next rounds")
	if !a.done[0] || a.res[0].Seq != 4 {
		t.Fatalf("re-append: %+v", a.res[0])
	}
	got := readAll(t, s, name, 0, 0)
	var payloads []string
	for _, e := range got {
		if !e.Aborted {
			payloads = append(payloads, string(e.Payload))
		}
	}
	if fmt.Sprint(payloads) != "[a0 a1 a3 lost]" {
		t.Fatalf("payloads %v", payloads)
	}

	// Through AppendQueue: the seq of the first round is aborted between the
	// reservation and the write (by a consumer that timed out on it).
	hook := func(a *appender, round int, idx []int) {
		if a.name != name || round != 0 {
			return
		}
		for _, i := range idx {
			ok, err := s.AbortQueueSeq(context.Background(), name, a.events[i].Partition, a.seq[i])
			if err != nil || !ok {
				t.Errorf("abort in hook: %v, %v", ok, err)
			}
		}
	}
	appendTestHook.Store(&hook)
	defer appendTestHook.Store(nil)
	res, err := s.AppendQueue(ctx, name, []driver.QueueEvent{ev(0, "x"), {Partition: 0, ID: "idx", Payload: []byte("y")}})
	must(t, err, "AppendQueue with aborted seqs")
	if res[0].Seq != 7 || res[1].Seq != 8 || res[1].Duplicate {
		t.Fatalf("re-appended at %+v, want seqs 7, 8", res)
	}
	appendTestHook.Store(nil)
	res, err = s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, ID: "idx", Payload: []byte("y")}})
	must(t, err, "AppendQueue of the id again")
	if !res[0].Duplicate || res[0].Seq != 8 {
		t.Fatalf("dedup after takeover: %+v", res[0])
	}
	got = readAll(t, s, name, 0, 0)
	if len(got) != 9 || !got[5].Aborted || !got[6].Aborted || string(got[7].Payload) != "x" || got[8].ID != "idx" {
		t.Fatalf("entries %+v", got)
	}
	// Trim over tombstones keeps them (a late writer must still fail), deletes events.
	ackAll(t, ctx, s, name, 0, 9)
	must(t, s.TrimQueue(ctx, name, 0, 9), "TrimQueue")
	a2, err := s.AbortQueueSeq(ctx, name, 0, 5)
	if err != nil || !a2 {
		t.Fatalf("abort below floor of a tombstone: %v, %v", a2, err)
	}
	a2, err = s.AbortQueueSeq(ctx, name, 0, 3)
	if err != nil || a2 {
		t.Fatalf("abort below floor of a trimmed event: %v, %v", a2, err)
	}
}

// TestQueueDedupDeadWriter: the first append of an id reserved and claimed the id,
// then died before writing. A retry completes that seq (Duplicate of it); if the seq
// was aborted meanwhile, the retry takes the id over with a fresh seq.
func TestQueueDedupDeadWriter(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	name := qname(t)
	mustCreate(t, s, driver.QueueSpec{Name: name, Partitions: 2, Groups: []string{"g"}})
	table, db, err := s.qready(ctx, "test")
	must(t, err, "qready")
	// A writer that dies after claiming its id, reserving and placing its seq.
	dead := func(id string) *appender {
		a := newAppender(s, db, table, name, "test", time.Hour, []driver.QueueEvent{{Partition: 1, ID: id, Payload: []byte("first")}})
		must(t, a.claim(ctx, []int{0}), "claim")
		must(t, a.reserve(ctx, []int{0}), "reserve")
		ready, err := a.place(ctx, []int{0})
		must(t, err, "place")
		if len(ready) != 1 || !a.claimed[0] {
			t.Fatalf("place: %v", ready)
		}
		return a
	}
	a := dead("u1")
	res, err := s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, ID: "u1", Payload: []byte("retry")}})
	must(t, err, "retry of a dead writer's id")
	if !res[0].Duplicate || res[0].Partition != 1 || res[0].Seq != a.seq[0] {
		t.Fatalf("retry result %+v, want a duplicate of 1/%d", res[0], a.seq[0])
	}
	got := readAll(t, s, name, 1, 0)
	if len(got) != 1 || got[0].ID != "u1" || string(got[0].Payload) != "retry" {
		t.Fatalf("partition 1: %+v", got)
	}
	// The first writer wakes up: its write finds the id's event at its seq: done.
	must(t, a.write(ctx, []int{0}), "late write")
	if !a.done[0] || a.res[0].Seq != got[0].Seq {
		t.Fatalf("late writer: %+v", a.res[0])
	}

	b := dead("u2")
	ok, err := s.AbortQueueSeq(ctx, name, 1, b.seq[0])
	if err != nil || !ok {
		t.Fatalf("abort: %v, %v", ok, err)
	}
	res, err = s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 0, ID: "u2", Payload: []byte("again")}})
	must(t, err, "retry after the abort")
	if res[0].Duplicate || res[0].Partition != 0 || res[0].Seq != 0 {
		t.Fatalf("takeover result %+v", res[0])
	}
	res, err = s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 1, ID: "u2"}})
	must(t, err, "third append")
	if !res[0].Duplicate || res[0].Partition != 0 || res[0].Seq != 0 {
		t.Fatalf("after takeover: %+v", res[0])
	}
	// The dead writer's late write fails on the tombstone and re-appends (taking the
	// id over would lose to the new owner: it is a duplicate then).
	must(t, b.write(ctx, []int{0}), "late write")
	must(t, b.run(ctx), "late writer's rounds")
	if !b.done[0] || !b.res[0].Duplicate || b.res[0].Partition != 0 {
		t.Fatalf("late writer after takeover: %+v", b.res[0])
	}

	// A writer that dies after claiming its id, before reserving: a retry waits
	// claimTimeout for it, then takes the id over.
	defer func(d time.Duration) { claimTimeout = d }(claimTimeout)
	claimTimeout = 300 * time.Millisecond
	c := newAppender(s, db, table, name, "test", time.Hour, []driver.QueueEvent{{Partition: 1, ID: "u3", Payload: []byte("first")}})
	must(t, c.claim(ctx, []int{0}), "claim")
	t0 := time.Now()
	res, err = s.AppendQueue(ctx, name, []driver.QueueEvent{{Partition: 1, ID: "u3", Payload: []byte("retry")}})
	must(t, err, "retry of a claim left pending")
	if res[0].Duplicate || res[0].Partition != 1 {
		t.Fatalf("retry of a pending claim: %+v", res[0])
	}
	if d := time.Since(t0); d < claimTimeout/2 {
		t.Fatalf("the pending claim was taken over after %v, before the claim timeout %v", d, claimTimeout)
	}
	// The first writer comes back: its claim was taken over: its seq is tombstoned and
	// the id is a duplicate.
	must(t, c.reserve(ctx, []int{0}), "reserve")
	ready, err := c.place(ctx, []int{0})
	must(t, err, "place")
	if len(ready) != 0 || c.claimed[0] || len(c.unused) != 1 {
		t.Fatalf("place after the takeover: %v, %+v", ready, c)
	}
	must(t, c.write(ctx, nil), "tombstone")
	must(t, c.run(ctx), "rounds")
	if !c.res[0].Duplicate || c.res[0] != (driver.QueueAppend{Partition: 1, Seq: res[0].Seq, Duplicate: true}) {
		t.Fatalf("late writer: %+v, want a duplicate of %+v", c.res[0], res[0])
	}
	r, err := s.ReadQueue(ctx, name, 1, res[0].Seq, 10)
	must(t, err, "ReadQueue")
	if len(r.Entries) != 2 || string(r.Entries[0].Payload) != "retry" || !r.Entries[1].Aborted {
		t.Fatalf("entries %+v", r.Entries)
	}
}

// queueFaults wraps the client's queue calls: the planned MultiMutate and
// CheckAndMutate calls are applied and then report a lost reply.
type queueFaults struct {
	queueOps
	mu   sync.Mutex
	plan map[string]int // method -> calls still to fail after applying
	hit  map[string]int
}

func (f *queueFaults) take(m string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.plan[m] > 0 {
		f.plan[m]--
		f.hit[m]++
		return true
	}
	return false
}

func (f *queueFaults) set(m string, n int) {
	f.mu.Lock()
	f.plan[m] = n
	f.mu.Unlock()
}

var errLost = driver.Errorf(dcsync.Connection, "test", "outcome unknown: injected lost reply")

// lostReplies is what a MultiMutate of n actions returns when its reply is lost: every
// action's outcome unknown.
func lostReplies(n int) ([]hbaserpc.ActionResult, error) {
	out := make([]hbaserpc.ActionResult, n)
	for i := range out {
		out[i] = hbaserpc.ActionResult{Err: errLost}
	}
	return out, errLost
}

func (f *queueFaults) MultiMutate(ctx context.Context, table string, acts []hbaserpc.Action) ([]hbaserpc.ActionResult, error) {
	conditional, reads, incs := false, false, false
	for _, a := range acts {
		conditional = conditional || a.Cond != nil
		reads = reads || a.Read != nil
		_, inc := a.Mutation.(*hbaserpc.Increment)
		incs = incs || inc
	}
	if incs && f.take("MultiMutate-resent") {
		// As if each Increment's reply had been lost after it applied: resent, and
		// answered with the current value (here: its own, which the store cannot know).
		res, err := f.queueOps.MultiMutate(ctx, table, acts)
		for i := range res {
			res[i].Resent = true
		}
		return res, err
	}
	if reads && f.take("MultiMutate-put") {
		res, err := f.queueOps.MultiMutate(ctx, table, acts)
		if res == nil {
			return nil, err
		}
		return lostReplies(len(res))
	}
	if conditional && f.take("MultiMutate-drop") {
		return lostReplies(len(acts))
	}
	if conditional && f.take("MultiMutate") {
		res, err := f.queueOps.MultiMutate(ctx, table, acts)
		if res == nil {
			return nil, err
		}
		return lostReplies(len(res))
	}
	return f.queueOps.MultiMutate(ctx, table, acts)
}

func (f *queueFaults) CheckAndMutate(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts ...hbaserpc.Mutation) (bool, []hbaserpc.Cell, error) {
	if f.take("CheckAndMutate") {
		f.queueOps.CheckAndMutate(ctx, table, row, cond, muts...)
		return false, nil, errLost
	}
	return f.queueOps.CheckAndMutate(ctx, table, row, cond, muts...)
}

func (f *queueFaults) CheckAndMutateRead(ctx context.Context, table string, row []byte, cond hbaserpc.Condition, muts []hbaserpc.Mutation, cols ...hbaserpc.Column) (bool, []hbaserpc.Cell, []hbaserpc.Cell, error) {
	if f.take("CheckAndMutate") {
		f.queueOps.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
		return false, nil, nil, errLost
	}
	return f.queueOps.CheckAndMutateRead(ctx, table, row, cond, muts, cols...)
}

// TestQueueInDoubt: lost replies of the conditional writes (entries, dedup claims,
// tombstones, specs, offsets) are recognised: every event is stored once, every
// operation applied once.
func TestQueueInDoubt(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	ctx := ctxT(t, 2*time.Minute)
	f := &queueFaults{queueOps: s.client, plan: map[string]int{}, hit: map[string]int{}}
	s.queue().db = f
	name := qname(t)

	f.set("CheckAndMutate", 1)
	must(t, s.CreateQueue(ctx, driver.QueueSpec{Name: name, Partitions: 2, Groups: []string{"g"}}), "CreateQueue with a lost reply")
	f.set("CheckAndMutate", 1)
	_, err := s.AddQueueGroup(ctx, name, "h")
	must(t, err, "AddQueueGroup with a lost reply")

	for n, plan := range []map[string]int{
		{"MultiMutate-put": 1},                   // the entries' (no id in the batch)
		{"MultiMutate": 1},                       // the claims'
		{"MultiMutate": 1, "MultiMutate-put": 2}, // the claims', then the entries' twice
		{"MultiMutate-drop": 2},                  // not applied: the claims' twice
	} {
		for m, k := range plan {
			f.set(m, k)
		}
		evs := []driver.QueueEvent{ev(0, "p"), {Partition: 1, ID: fmt.Sprint("id", n), Payload: []byte("i")}, ev(1, "q")}
		if n == 0 {
			evs[1].ID = ""
		}
		res, err := s.AppendQueue(ctx, name, evs)
		must(t, err, fmt.Sprint("AppendQueue with lost replies ", plan))
		for i, r := range res {
			if r.Duplicate || r.Partition != evs[i].Partition || r.Seq != uint64(n*(1+evs[i].Partition)+i/2) {
				t.Fatalf("plan %v: results %+v", plan, res)
			}
		}
		for m := range plan {
			if f.plan[m] != 0 {
				t.Fatalf("plan %v: %d faults left", plan, f.plan[m])
			}
		}
	}
	for p := 0; p < 2; p++ {
		got := readAll(t, s, name, p, 0)
		if len(got) != 4*(p+1) {
			t.Fatalf("partition %d: %d entries, want %d (each event once): %+v", p, len(got), 4*(p+1), got)
		}
		for _, e := range got {
			if e.Aborted {
				t.Fatalf("partition %d: unexpected tombstone %+v", p, e)
			}
		}
	}

	// A reservation resent after a lost reply: its range is unknown, so it is left as
	// holes and the events reserved again.
	f.set("MultiMutate-resent", 1)
	res, err := s.AppendQueue(ctx, name, []driver.QueueEvent{ev(0, "r1"), ev(0, "r2")})
	must(t, err, "AppendQueue with a resent reservation")
	if res[0].Seq != 6 || res[1].Seq != 7 {
		t.Fatalf("after a resent reservation: %+v, want seqs 6, 7 (4 and 5 left as holes)", res)
	}
	r, err := s.ReadQueue(ctx, name, 0, 4, 10)
	must(t, err, "ReadQueue")
	if len(r.Entries) != 0 || r.Head != 8 {
		t.Fatalf("read at the holes: %+v", r)
	}
	for seq := uint64(4); seq < 6; seq++ {
		if ok, err := s.AbortQueueSeq(ctx, name, 0, seq); err != nil || !ok {
			t.Fatalf("abort %d: %v, %v", seq, ok, err)
		}
	}

	f.set("CheckAndMutate", 1)
	o, err := s.ClaimQueuePartition(ctx, name, "g", 0, 3)
	must(t, err, "Claim with a lost reply")
	if o != (driver.QueueOffset{Token: 3}) {
		t.Fatalf("claim %+v", o)
	}
	f.set("CheckAndMutate", 1)
	must(t, s.CommitQueueOffset(ctx, name, "g", 0, driver.QueueOffset{Token: 3, Next: 2, Version: 1}), "Commit with a lost reply")
	offs, err := s.ReadQueueOffsets(ctx, name, "g", []int{0})
	must(t, err, "ReadQueueOffsets")
	if offs[0] != (driver.QueueOffset{Token: 3, Next: 2, Version: 1}) {
		t.Fatalf("offset %+v", offs[0])
	}
	// An abort whose reply is lost: aborted, once.
	table, db, err := s.qready(ctx, "test")
	must(t, err, "qready")
	a := newAppender(s, db, table, name, "test", time.Hour, []driver.QueueEvent{ev(0, "hole")})
	must(t, a.reserve(ctx, []int{0}), "reserve")
	f.set("CheckAndMutate", 1)
	ok, err := s.AbortQueueSeq(ctx, name, 0, a.seq[0])
	if err != nil || !ok {
		t.Fatalf("abort with a lost reply: %v, %v", ok, err)
	}
	if f.hit["CheckAndMutate"] != 5 || f.hit["MultiMutate"] != 2 || f.hit["MultiMutate-put"] != 3 || f.hit["MultiMutate-drop"] != 2 || f.hit["MultiMutate-resent"] != 1 {
		t.Fatalf("faults injected: %v", f.hit)
	}
}
