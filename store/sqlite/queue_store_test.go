package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/store/sqlite"
)

func createQueue(t *testing.T, s *sqlite.Store, name string, partitions int, groups ...string) driver.QueueSpec {
	t.Helper()
	spec := driver.QueueSpec{Name: name, Partitions: partitions, Groups: groups}
	if err := s.CreateQueue(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

func appendQ(t *testing.T, s *sqlite.Store, name string, events ...driver.QueueEvent) []driver.QueueAppend {
	t.Helper()
	out, err := s.AppendQueue(context.Background(), name, events)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(events) {
		t.Fatalf("%d results for %d events", len(out), len(events))
	}
	return out
}

func qa(p int, seq uint64, dup bool) driver.QueueAppend {
	return driver.QueueAppend{Partition: p, Seq: seq, Duplicate: dup}
}

func TestQueueSpec(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	s := open(t, filepath.Join(t.TempDir(), "q.db"), sqlite.WithClock(func() time.Time { return now }))
	if _, err := s.ReadQueueSpec(ctx, "q#1/a|b"); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("ReadQueueSpec before any queue: %v, want NotFound", err)
	}
	if _, err := s.ReadQueue(ctx, "q#1/a|b", 0, 0, 10); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("ReadQueue before any queue: %v, want NotFound", err)
	}
	spec := driver.QueueSpec{Name: "q#1/a|b", Partitions: 3, Groups: []string{"g1", "g_2"}, Dedup: 90 * time.Second}
	if err := s.CreateQueue(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateQueue(ctx, driver.QueueSpec{Name: spec.Name, Partitions: 7, Groups: []string{"x"}}); !errors.Is(err, dcsync.ErrAlreadyExists) {
		t.Fatalf("second CreateQueue: %v, want AlreadyExists", err)
	}
	got, err := s.ReadQueueSpec(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != spec.Name || got.Partitions != 3 || fmt.Sprint(got.Groups) != "[g1 g_2]" || got.Dedup != spec.Dedup || !got.Created.Equal(now) {
		t.Fatalf("spec %+v", got)
	}
	if _, err := s.ReadQueueSpec(ctx, "q#1/a|"); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("ReadQueueSpec of another name: %v, want NotFound", err)
	}
	got, err = s.AddQueueGroup(ctx, spec.Name, "g3")
	if err != nil || fmt.Sprint(got.Groups) != "[g1 g_2 g3]" {
		t.Fatalf("AddQueueGroup: %+v, %v", got, err)
	}
	got, err = s.AddQueueGroup(ctx, spec.Name, "g1")
	if !errors.Is(err, dcsync.ErrAlreadyExists) || fmt.Sprint(got.Groups) != "[g1 g_2 g3]" {
		t.Fatalf("AddQueueGroup of an existing group: %+v, %v", got, err)
	}
	if _, err := s.AddQueueGroup(ctx, "nope", "g1"); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("AddQueueGroup of a missing queue: %v", err)
	}
	for i := len(got.Groups); i < driver.MaxQueueGroups; i++ {
		if _, err := s.AddQueueGroup(ctx, spec.Name, fmt.Sprintf("extra%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AddQueueGroup(ctx, spec.Name, "one-too-many"); !errors.Is(err, dcsync.ErrInvalidArgument) {
		t.Fatalf("AddQueueGroup beyond the limit: %v", err)
	}
	if got, _ := s.ReadQueueSpec(ctx, spec.Name); len(got.Groups) != driver.MaxQueueGroups {
		t.Fatalf("%d groups", len(got.Groups))
	}
	// A second store on the file sees the queue.
	s2 := open(t, s.Path())
	if got, err := s2.ReadQueueSpec(ctx, spec.Name); err != nil || got.Partitions != 3 {
		t.Fatalf("second store: %+v, %v", got, err)
	}
}

func TestQueueAppendReadTrim(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "q.db"))
	createQueue(t, s, "q", 2, "g")
	res := appendQ(t, s, "q",
		driver.QueueEvent{Partition: 0, Key: "k", Payload: []byte("a")},
		driver.QueueEvent{Partition: 1, Payload: []byte("b")},
		driver.QueueEvent{Partition: 0, ID: "id1", Payload: []byte("c")},
		driver.QueueEvent{Partition: 1, ID: "id1", Payload: []byte("dup in batch")},
		driver.QueueEvent{Partition: 0},
	)
	want := []driver.QueueAppend{qa(0, 0, false), qa(1, 0, false), qa(0, 1, false), qa(0, 1, true), qa(0, 2, false)}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("append: %v, want %v", res, want)
	}
	res = appendQ(t, s, "q", driver.QueueEvent{Partition: 1, ID: "id1"}, driver.QueueEvent{Partition: 1, ID: "id2"})
	if want := []driver.QueueAppend{qa(0, 1, true), qa(1, 1, false)}; fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("append: %v, want %v", res, want)
	}
	r, err := s.ReadQueue(ctx, "q", 0, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if r.Head != 3 || r.Floor != 0 || len(r.Entries) != 3 {
		t.Fatalf("read %+v", r)
	}
	e := r.Entries[1]
	if e.Seq != 1 || e.ID != "id1" || string(e.Payload) != "c" || e.Aborted || e.At.IsZero() || r.Entries[0].Key != "k" {
		t.Fatalf("entry %+v", e)
	}
	if len(r.Entries[2].Payload) != 0 {
		t.Fatalf("empty payload read as %#v", r.Entries[2].Payload)
	}
	if r, _ := s.ReadQueue(ctx, "q", 0, 1, 1); len(r.Entries) != 1 || r.Entries[0].Seq != 1 {
		t.Fatalf("read from 1 max 1: %+v", r)
	}
	if r, _ := s.ReadQueue(ctx, "q", 0, 9, 1); len(r.Entries) != 0 || r.Head != 3 {
		t.Fatalf("read beyond head: %+v", r)
	}
	if r, _ := s.ReadQueue(ctx, "q", 7, 0, 1); len(r.Entries) != 0 || r.Head != 0 {
		t.Fatalf("read of an unused partition: %+v", r)
	}
	if err := s.TrimQueue(ctx, "q", 0, 4); !errors.Is(err, dcsync.ErrInvalidArgument) {
		t.Fatalf("trim above head: %v", err)
	}
	// The group acked partition 0 below 3: its offset does not hold the trims back.
	if _, err := s.ClaimQueuePartition(ctx, "q", "g", 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitQueueOffset(ctx, "q", "g", 0, driver.QueueOffset{Token: 1, Next: 3, Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.TrimQueue(ctx, "q", 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.TrimQueue(ctx, "q", 0, 1); err != nil { // never lowers the floor
		t.Fatal(err)
	}
	r, _ = s.ReadQueue(ctx, "q", 0, 0, 100)
	if r.Floor != 2 || r.Head != 3 || len(r.Entries) != 1 || r.Entries[0].Seq != 2 {
		t.Fatalf("read after trim: %+v", r)
	}
	b, err := s.QueueBounds(ctx, "q", []int{1, 0, 5, 0})
	if err != nil {
		t.Fatal(err)
	}
	if want := []driver.QueueBounds{{Head: 2}, {Head: 3, Floor: 2}, {}, {Head: 3, Floor: 2}}; fmt.Sprint(b) != fmt.Sprint(want) {
		t.Fatalf("bounds %v, want %v", b, want)
	}
	// Ids stay remembered after their event is trimmed.
	if res := appendQ(t, s, "q", driver.QueueEvent{Partition: 0, ID: "id1"}); !res[0].Duplicate || res[0].Seq != 1 {
		t.Fatalf("append of a trimmed id: %v", res)
	}
	// Abort: nothing to abort in a store without holes.
	if ok, err := s.AbortQueueSeq(ctx, "q", 0, 2); ok || err != nil {
		t.Fatalf("abort of a written seq: %v, %v", ok, err)
	}
	if ok, err := s.AbortQueueSeq(ctx, "q", 0, 0); ok || err != nil {
		t.Fatalf("abort of a trimmed seq: %v, %v", ok, err)
	}
	if _, err := s.AbortQueueSeq(ctx, "q", 0, 3); !errors.Is(err, dcsync.ErrInvalidArgument) {
		t.Fatalf("abort at head: %v", err)
	}
	if _, err := s.AppendQueue(ctx, "nope", []driver.QueueEvent{{}}); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("append to a missing queue: %v", err)
	}
}

func TestQueueDedupExpires(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(1_700_000_000_000)
	s := open(t, filepath.Join(t.TempDir(), "q.db"), sqlite.WithClock(func() time.Time { return time.UnixMilli(now.Load()) }))
	s.CreateQueue(ctx, driver.QueueSpec{Name: "q", Partitions: 1, Groups: []string{"g"}, Dedup: 10 * time.Minute})
	appendQ(t, s, "q", driver.QueueEvent{ID: "a"})
	now.Add((10*time.Minute - time.Millisecond).Milliseconds())
	if r := appendQ(t, s, "q", driver.QueueEvent{ID: "a"}); !r[0].Duplicate {
		t.Fatalf("within the window: %v", r)
	}
	now.Add(time.Millisecond.Milliseconds())
	if r := appendQ(t, s, "q", driver.QueueEvent{ID: "a"}); r[0].Duplicate || r[0].Seq != 1 {
		t.Fatalf("after the window: %v", r)
	}
	appendQ(t, s, "q", driver.QueueEvent{ID: "b"})
	// Both ids expire; the next append (more than a minute after the last sweep)
	// deletes them.
	now.Add((11 * time.Minute).Milliseconds())
	appendQ(t, s, "q", driver.QueueEvent{})
	var n int
	if err := s.DB().QueryRow(`SELECT COUNT(*) FROM dcsync_queue_dedup`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d ids remembered after the sweep (%v)", n, err)
	}
}

func TestQueueOffsets(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "q.db"))
	createQueue(t, s, "q", 4, "g", "h")
	offs, err := s.ReadQueueOffsets(ctx, "q", "g", []int{0, 1})
	if err != nil || fmt.Sprint(offs) != fmt.Sprint([]driver.QueueOffset{{}, {}}) {
		t.Fatalf("offsets before any claim: %v, %v", offs, err)
	}
	off, err := s.ClaimQueuePartition(ctx, "q", "g", 1, 5)
	if err != nil || off != (driver.QueueOffset{Token: 5}) {
		t.Fatalf("first claim: %+v, %v", off, err)
	}
	if err := s.CommitQueueOffset(ctx, "q", "g", 1, driver.QueueOffset{Token: 5, Next: 7, Attempts: 2, Held: true, Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitQueueOffset(ctx, "q", "g", 1, driver.QueueOffset{Token: 4, Next: 9, Version: 2}); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("commit with a stale token: %v", err)
	}
	if err := s.CommitQueueOffset(ctx, "q", "g", 2, driver.QueueOffset{Token: 4, Next: 9, Version: 1}); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("commit to an unclaimed partition: %v", err)
	}
	// Claimed again by 5 (a retried claim): the stored offset, nothing written.
	if off, err = s.ClaimQueuePartition(ctx, "q", "g", 1, 5); err != nil || off != (driver.QueueOffset{Token: 5, Next: 7, Attempts: 2, Held: true, Version: 1}) {
		t.Fatalf("retried claim: %+v, %v", off, err)
	}
	off, err = s.ClaimQueuePartition(ctx, "q", "g", 1, 3)
	if !errors.Is(err, dcsync.ErrLockLost) || off != (driver.QueueOffset{Token: 5, Next: 7, Attempts: 2, Held: true, Version: 1}) {
		t.Fatalf("lower claim: %+v, %v", off, err)
	}
	if err := s.CommitQueueOffset(ctx, "q", "g", 1, driver.QueueOffset{Token: 5, Next: 8, Version: 2}); err != nil {
		t.Fatal(err)
	}
	if off, err = s.ClaimQueuePartition(ctx, "q", "g", 1, 6); err != nil || off != (driver.QueueOffset{Token: 6, Next: 8, Version: 2}) {
		t.Fatalf("claim after a release: %+v, %v", off, err)
	}
	if err := s.CommitQueueOffset(ctx, "q", "g", 1, driver.QueueOffset{Token: 5, Next: 100, Version: 3}); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("zombie commit: %v", err)
	}
	offs, err = s.ReadQueueOffsets(ctx, "q", "g", []int{1, 0, 1})
	want := []driver.QueueOffset{{Token: 6, Next: 8, Version: 2}, {}, {Token: 6, Next: 8, Version: 2}}
	if err != nil || fmt.Sprint(offs) != fmt.Sprint(want) {
		t.Fatalf("offsets %v, want %v (%v)", offs, want, err)
	}
	if offs, _ := s.ReadQueueOffsets(ctx, "q", "h", []int{1}); offs[0] != (driver.QueueOffset{}) {
		t.Fatalf("another group's offset: %+v", offs[0])
	}
	// Token 0 matches the missing record.
	if err := s.CommitQueueOffset(ctx, "q", "h", 3, driver.QueueOffset{Next: 2, Version: 1}); err != nil {
		t.Fatal(err)
	}
	if offs, _ := s.ReadQueueOffsets(ctx, "q", "h", []int{3}); offs[0] != (driver.QueueOffset{Next: 2, Version: 1}) {
		t.Fatalf("offset committed with token 0: %+v", offs[0])
	}
}

// Every call refuses bad input with InvalidArgument before any write: the file's write
// lock is held by another connection, so a call that tried to write would wait and
// fail with a Connection error instead.
func TestQueueValidation(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	s := open(t, path)
	createQueue(t, s, "q", 1, "g")
	holdWriteLock(t, path)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	bad := map[string]func() error{
		"spec no groups":  func() error { return s.CreateQueue(ctx, driver.QueueSpec{Name: "x", Partitions: 1}) },
		"spec partitions": func() error { return s.CreateQueue(ctx, driver.QueueSpec{Name: "x", Groups: []string{"g"}}) },
		"spec name": func() error {
			return s.CreateQueue(ctx, driver.QueueSpec{Name: "a\nb", Partitions: 1, Groups: []string{"g"}})
		},
		"spec dup group": func() error {
			return s.CreateQueue(ctx, driver.QueueSpec{Name: "x", Partitions: 1, Groups: []string{"g", "g"}})
		},
		"read spec name": func() error { _, err := s.ReadQueueSpec(ctx, ""); return err },
		"add group name": func() error { _, err := s.AddQueueGroup(ctx, "q", "\x00"); return err },
		"append none":    func() error { _, err := s.AppendQueue(ctx, "q", nil); return err },
		"append partition": func() error {
			_, err := s.AppendQueue(ctx, "q", []driver.QueueEvent{{Partition: -1}})
			return err
		},
		"append payload": func() error {
			_, err := s.AppendQueue(ctx, "q", []driver.QueueEvent{{Payload: make([]byte, driver.MaxQueuePayload+1)}})
			return err
		},
		"append key": func() error {
			_, err := s.AppendQueue(ctx, "q", []driver.QueueEvent{{Key: string(make([]byte, driver.MaxQueueKeyLen+1))}})
			return err
		},
		"append batch": func() error {
			_, err := s.AppendQueue(ctx, "q", make([]driver.QueueEvent, driver.MaxQueueBatch+1))
			return err
		},
		"read max": func() error { _, err := s.ReadQueue(ctx, "q", 0, 0, 0); return err },
		"read partition": func() error {
			_, err := s.ReadQueue(ctx, "q", driver.MaxQueuePartitions+driver.MaxQueueGroups, 0, 1)
			return err
		},
		"abort seq":   func() error { _, err := s.AbortQueueSeq(ctx, "q", 0, 1<<63); return err },
		"bounds":      func() error { _, err := s.QueueBounds(ctx, "q", []int{0, -1}); return err },
		"claim group": func() error { _, err := s.ClaimQueuePartition(ctx, "q", "", 0, 1); return err },
		"claim token": func() error { _, err := s.ClaimQueuePartition(ctx, "q", "g", 0, 1<<63); return err },
		"commit attempts": func() error {
			return s.CommitQueueOffset(ctx, "q", "g", 0, driver.QueueOffset{Token: 1, Attempts: -1})
		},
		"commit next": func() error { return s.CommitQueueOffset(ctx, "q", "g", 0, driver.QueueOffset{Next: 1 << 63}) },
		"commit tx type": func() error {
			return s.CommitQueueOffsetTx(ctx, "not a tx", "q", "g", 0, driver.QueueOffset{})
		},
		"commit nil tx": func() error {
			return s.CommitQueueOffsetTx(ctx, (*sql.Tx)(nil), "q", "g", 0, driver.QueueOffset{})
		},
		"offsets group":  func() error { _, err := s.ReadQueueOffsets(ctx, "q", "a\tb", []int{0}); return err },
		"trim partition": func() error { return s.TrimQueue(ctx, "q", -2, 0) },
		"trim below":     func() error { return s.TrimQueue(ctx, "q", 0, 1<<63) },
	}
	for name, call := range bad {
		if err := call(); !errors.Is(err, dcsync.ErrInvalidArgument) {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}

// Issue 8 §1 for the queue: calls waiting for another connection's write lock return
// when their context ends, with an error matching it, having written nothing.
func TestQueueHonoursContextUnderWriteContention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s := open(t, path, sqlite.WithBusyTimeout(time.Hour))
	createQueue(t, s, "q", 1, "g")
	appendQ(t, s, "q", driver.QueueEvent{Payload: []byte("x")})
	if _, err := s.ClaimQueuePartition(context.Background(), "q", "g", 0, 1); err != nil {
		t.Fatal(err)
	}
	holdWriteLock(t, path)
	calls := map[string]func(ctx context.Context) error{
		"AppendQueue": func(ctx context.Context) error {
			_, err := s.AppendQueue(ctx, "q", []driver.QueueEvent{{Payload: []byte("y")}})
			return err
		},
		"CreateQueue": func(ctx context.Context) error {
			return s.CreateQueue(ctx, driver.QueueSpec{Name: "q2", Partitions: 1, Groups: []string{"g"}})
		},
		"AddQueueGroup":       func(ctx context.Context) error { _, err := s.AddQueueGroup(ctx, "q", "h"); return err },
		"ClaimQueuePartition": func(ctx context.Context) error { _, err := s.ClaimQueuePartition(ctx, "q", "g", 0, 2); return err },
		"CommitQueueOffset": func(ctx context.Context) error {
			return s.CommitQueueOffset(ctx, "q", "g", 0, driver.QueueOffset{Token: 1, Next: 1, Version: 1})
		},
		"TrimQueue": func(ctx context.Context) error { return s.TrimQueue(ctx, "q", 0, 1) },
		"WriteTx":   func(ctx context.Context) error { return s.WriteTx(ctx, func(*sql.Tx) error { return nil }) },
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := call(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dcsync.ErrConnection) {
			t.Errorf("%s: %v, want a Connection error matching DeadlineExceeded", name, err)
		}
	}
	// Reads go on (WAL), and nothing was written.
	r, err := s.ReadQueue(context.Background(), "q", 0, 0, 10)
	if err != nil || len(r.Entries) != 1 || r.Floor != 0 {
		t.Fatalf("read under contention: %+v, %v", r, err)
	}
	offs, err := s.ReadQueueOffsets(context.Background(), "q", "g", []int{0})
	if err != nil || offs[0] != (driver.QueueOffset{Token: 1}) {
		t.Fatalf("offset: %+v, %v", offs, err)
	}
	if spec, err := s.ReadQueueSpec(context.Background(), "q"); err != nil || len(spec.Groups) != 1 {
		t.Fatalf("spec: %+v, %v", spec, err)
	}
}

// Appends from many goroutines through several stores on one file: every partition's
// seqs are 0..n-1 with no hole and no event twice, and ids are appended once.
func TestQueueConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "q.db")
	stores := []*sqlite.Store{open(t, path), open(t, path), open(t, path)}
	createQueue(t, stores[0], "q", 3, "g")
	const workers, batches, per = 6, 10, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%len(stores)]
			for b := range batches {
				evs := make([]driver.QueueEvent, per)
				for i := range evs {
					// Every worker appends the same ids: only one of each is stored.
					evs[i] = driver.QueueEvent{Partition: (b + i) % 3, ID: fmt.Sprintf("id-%d-%d", b, i),
						Payload: []byte(fmt.Sprintf("%d/%d/%d", w, b, i))}
				}
				if _, err := s.AppendQueue(ctx, "q", evs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	ids := map[string]bool{}
	for p := range 3 {
		r, err := stores[1].ReadQueue(ctx, "q", p, 0, driver.MaxQueueBatch)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(len(r.Entries)) != r.Head {
			t.Fatalf("partition %d: %d entries, head %d", p, len(r.Entries), r.Head)
		}
		for i, e := range r.Entries {
			if e.Seq != uint64(i) || ids[e.ID] {
				t.Fatalf("partition %d entry %d: %+v", p, i, e)
			}
			ids[e.ID] = true
		}
		total += len(r.Entries)
	}
	if total != batches*per {
		t.Fatalf("%d events stored, want %d", total, batches*per)
	}
}

const envQueueChild = "DCSYNC_TEST_SQLITE_QUEUE_CHILD"

// TestQueueChildProcess is the child part of TestQueueProcesses (it does nothing in
// a normal run).
func TestQueueChildProcess(t *testing.T) {
	path := os.Getenv(envQueueChild)
	if path == "" {
		t.Skip("child process of TestQueueProcesses only")
	}
	s := open(t, path)
	id, _ := strconv.Atoi(os.Getenv(envQueueChild + "_ID"))
	for b := range 20 {
		evs := make([]driver.QueueEvent, 10)
		for i := range evs {
			evs[i] = driver.QueueEvent{Partition: i % 2, ID: fmt.Sprintf("%d-%d-%d", id, b, i)}
		}
		if _, err := s.AppendQueue(context.Background(), "q", evs); err != nil {
			t.Fatal(err)
		}
	}
}

// Processes sharing the file append without holes or lost events.
func TestQueueProcesses(t *testing.T) {
	if os.Getenv(envQueueChild) != "" {
		t.Skip()
	}
	path := filepath.Join(t.TempDir(), "q.db")
	s := open(t, path)
	createQueue(t, s, "q", 2, "g")
	const procs = 4
	var wg sync.WaitGroup
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestQueueChildProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), envQueueChild+"="+path, fmt.Sprintf("%s_ID=%d", envQueueChild, i))
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range procs {
		if errs[i] != nil {
			t.Fatalf("child %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	ids := map[string]bool{}
	for p := range 2 {
		r, err := s.ReadQueue(context.Background(), "q", p, 0, driver.MaxQueueBatch)
		if err != nil {
			t.Fatal(err)
		}
		if r.Head != procs*20*5 || len(r.Entries) != int(r.Head) {
			t.Fatalf("partition %d: head %d, %d entries", p, r.Head, len(r.Entries))
		}
		for i, e := range r.Entries {
			if e.Seq != uint64(i) || ids[e.ID] {
				t.Fatalf("partition %d: entry %d is %+v", p, i, e)
			}
			ids[e.ID] = true
		}
	}
}

// oldOffsetsTable is dcsync_queue_offsets as the first release created it, without
// the version and marks columns.
const oldOffsetsTable = `CREATE TABLE dcsync_queue_offsets (
	q INTEGER NOT NULL, g TEXT NOT NULL, p INTEGER NOT NULL,
	token INTEGER NOT NULL, next INTEGER NOT NULL, attempts INTEGER NOT NULL, held INTEGER NOT NULL,
	PRIMARY KEY (q, g, p)) WITHOUT ROWID`

// oldFile writes a file whose offsets table is the first release's, holding group g's
// offset of partition 0 (token 5, next 7, attempts 2, held) of queue "q".
func oldFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	createQueue(t, s, "q", 2, "g")
	for _, q := range []string{`DROP TABLE dcsync_queue_offsets`, oldOffsetsTable,
		`INSERT INTO dcsync_queue_offsets SELECT id, 'g', 0, 5, 7, 2, 1 FROM dcsync_queues WHERE name = 'q'`} {
		if _, err := s.DB().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	return path
}

// A file written by the first release (no version or marks columns) is read as
// version 0 with no marks, also by a read-only store; the first claim or commit adds
// the columns, keeping the stored offsets.
func TestQueueOffsetsOldFile(t *testing.T) {
	ctx := context.Background()
	old := driver.QueueOffset{Token: 5, Next: 7, Attempts: 2, Held: true}

	path := oldFile(t)
	makeReadOnly(t, path)
	ro := open(t, path)
	if !ro.ReadOnly() {
		t.Fatal("store on a read-only file is not read-only")
	}
	offs, err := ro.ReadQueueOffsets(ctx, "q", "g", []int{0, 1})
	if err != nil || offs[0] != old || offs[1] != (driver.QueueOffset{}) {
		t.Fatalf("read-only store on an old file: %+v, %v; want %+v and none", offs, err, old)
	}

	for _, first := range []string{"claim", "commit", "commit in tx"} {
		t.Run(first, func(t *testing.T) {
			s := open(t, oldFile(t))
			offs, err := s.ReadQueueOffsets(ctx, "q", "g", []int{0})
			if err != nil || offs[0] != old {
				t.Fatalf("old offset read as %+v, %v; want %+v", offs, err, old)
			}
			next := old
			next.Version, next.Next = 1, 8
			next.Marks, err = driver.EncodeQueueMarks(8, []driver.QueueMark{{Seq: 10, Acked: true}})
			if err != nil {
				t.Fatal(err)
			}
			switch first {
			case "claim":
				off, err := s.ClaimQueuePartition(ctx, "q", "g", 0, 6)
				if want := (driver.QueueOffset{Token: 6, Next: 7, Attempts: 2, Held: true}); err != nil || off != want {
					t.Fatalf("claim on an old file: %+v, %v; want %+v", off, err, want)
				}
				next.Token = 6
				if err := s.CommitQueueOffset(ctx, "q", "g", 0, next); err != nil {
					t.Fatal(err)
				}
			case "commit":
				if err := s.CommitQueueOffset(ctx, "q", "g", 0, next); err != nil {
					t.Fatalf("commit on an old file: %v", err)
				}
			case "commit in tx":
				if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
					return s.CommitQueueOffsetTx(ctx, tx, "q", "g", 0, next)
				}); err != nil {
					t.Fatalf("commit in tx on an old file: %v", err)
				}
			}
			offs, err = s.ReadQueueOffsets(ctx, "q", "g", []int{0})
			if err != nil || offs[0] != next {
				t.Fatalf("after the first write: %+v, %v; want %+v", offs, err, next)
			}
			// The late first attempt of that commit is refused now.
			stale := next
			stale.Version, stale.Next, stale.Marks = 0, 7, ""
			if err := s.CommitQueueOffset(ctx, "q", "g", 0, stale); !errors.Is(err, dcsync.ErrLockLost) {
				t.Fatalf("a version-0 commit after the migration: %v, want LockLost", err)
			}
			// Another store on the file (a fresh process) sees the columns.
			other := open(t, s.Path())
			if offs, err := other.ReadQueueOffsets(ctx, "q", "g", []int{0}); err != nil || offs[0] != next {
				t.Fatalf("another store after the migration: %+v, %v; want %+v", offs, err, next)
			}
		})
	}

	// A claim refused with LockLost on an old file still adds the columns (in their
	// own transaction), and reads go on working.
	s := open(t, oldFile(t))
	if _, err := s.ClaimQueuePartition(ctx, "q", "g", 0, 4); !errors.Is(err, dcsync.ErrLockLost) {
		t.Fatalf("lower claim on an old file: %v", err)
	}
	if offs, err := s.ReadQueueOffsets(ctx, "q", "g", []int{0}); err != nil || offs[0] != old {
		t.Fatalf("after a refused claim: %+v, %v", offs, err)
	}
	var n int
	if err := s.DB().QueryRow(`SELECT COUNT(*) FROM pragma_table_info('dcsync_queue_offsets') WHERE name IN ('version', 'marks')`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("columns added: %d, %v", n, err)
	}
}
