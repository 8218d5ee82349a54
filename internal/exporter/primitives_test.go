package exporter_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/internal/exporter"
	"github.com/dcsync/dcsync/lock"
	"github.com/dcsync/dcsync/rwlock"
	"github.com/dcsync/dcsync/semaphore"
	"github.com/dcsync/dcsync/store/memory"
)

// countingStore counts the lock listings and register reads a scrape makes; with
// failRegs set its register reads fail.
type countingStore struct {
	*memory.Store
	lists, regReads atomic.Int32
	failRegs        bool
}

func (s *countingStore) ListLocks(ctx context.Context, client string) ([]driver.LockInfo, error) {
	s.lists.Add(1)
	return s.Store.ListLocks(ctx, client)
}

func (s *countingStore) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	s.regReads.Add(1)
	if s.failRegs {
		return nil, driver.Errorf(dcsync.Connection, "test", "register read refused")
	}
	return s.Store.ReadRegisters(ctx, keys)
}

// primitives holds, for clients app and ops: app's elections sched (DC, published) and
// pend (its lock taken, nothing published), ops's election glob (XDC), app's semaphore
// pool (3 permits, 2 held), app's read-write locks rd (2 readers of 4 slots, a writer
// waiting: W taken by hand) and wr (a writer holding).
func primitives(t *testing.T, st *countingStore) {
	t.Helper()
	ctx := context.Background()
	for _, c := range []struct {
		client, name string
		level        dcsync.Level
	}{{"app", "sched", dcsync.DC}, {"ops", "glob", dcsync.XDC}} {
		em, err := election.New(st, c.client, "dc1", election.WithTTL(time.Hour), election.WithLevel(c.level))
		if err != nil {
			t.Fatal(err)
		}
		ld, err := em.Campaign(ctx, c.name, "v")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ld.Resign(context.Background()) })
	}
	lm, _ := lock.New(st, "app", "dc1", lock.WithTTL(time.Hour))
	if _, err := lm.TryAcquire(ctx, election.LockName("pend")); err != nil {
		t.Fatal(err)
	}
	sm, _ := semaphore.New(st, "app", "dc1", semaphore.WithTTL(time.Hour))
	sem, err := sm.Open(ctx, "pool", 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	rm, _ := rwlock.New(st, "app", "dc1", rwlock.WithTTL(time.Hour), rwlock.WithReaders(4))
	for range 2 {
		if _, err := rm.AcquireRead(ctx, "rd"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.AcquireLock(ctx, dcsync.Key{Level: dcsync.DC, Client: "app", Farm: "dc1", Name: "rwlock:2:rd/w"}, "waiting-writer", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := rm.AcquireWrite(ctx, "wr"); err != nil {
		t.Fatal(err)
	}
}

// The election, semaphore and read-write lock gauges, exactly, from one lock listing
// per client and ONE register read per scrape.
func TestCollectorReportsPrimitives(t *testing.T) {
	st := &countingStore{Store: memory.New()}
	primitives(t, st)
	col := exporter.New(exporter.Config{Store: st, Clients: []string{"app", "ops"}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	st.lists.Store(0)
	st.regReads.Store(0)
	want := `
# HELP dcsync_election_leader_token Fencing token of an election's leader (the holder of its lock).
# TYPE dcsync_election_leader_token gauge
dcsync_election_leader_token{client="app",farm="dc1",level="DC",name="pend"} 1
dcsync_election_leader_token{client="app",farm="dc1",level="DC",name="sched"} 1
dcsync_election_leader_token{client="ops",farm="",level="XDC",name="glob"} 1
# HELP dcsync_election_leader_published 1 when the election's leader has published its value, 0 while pending.
# TYPE dcsync_election_leader_published gauge
dcsync_election_leader_published{client="app",farm="dc1",level="DC",name="pend"} 0
dcsync_election_leader_published{client="app",farm="dc1",level="DC",name="sched"} 1
dcsync_election_leader_published{client="ops",farm="",level="XDC",name="glob"} 1
# HELP dcsync_semaphore_permits N, the number of permits of a semaphore with permits held.
# TYPE dcsync_semaphore_permits gauge
dcsync_semaphore_permits{client="app",farm="dc1",level="DC",name="pool"} 3
# HELP dcsync_semaphore_permits_held Permit slots of a semaphore held (live leases).
# TYPE dcsync_semaphore_permits_held gauge
dcsync_semaphore_permits_held{client="app",farm="dc1",level="DC",name="pool"} 2
# HELP dcsync_rwlock_writer_held 1 when a read-write lock's writer lock is held (by a writer holding or waiting for readers).
# TYPE dcsync_rwlock_writer_held gauge
dcsync_rwlock_writer_held{client="app",farm="dc1",level="DC",name="rd"} 1
dcsync_rwlock_writer_held{client="app",farm="dc1",level="DC",name="wr"} 1
# HELP dcsync_rwlock_writer_waiting 1 when a read-write lock's writer holds its writer lock and waits for readers to leave.
# TYPE dcsync_rwlock_writer_waiting gauge
dcsync_rwlock_writer_waiting{client="app",farm="dc1",level="DC",name="rd"} 1
dcsync_rwlock_writer_waiting{client="app",farm="dc1",level="DC",name="wr"} 0
# HELP dcsync_rwlock_readers_held Reader slots of a read-write lock held.
# TYPE dcsync_rwlock_readers_held gauge
dcsync_rwlock_readers_held{client="app",farm="dc1",level="DC",name="rd"} 2
dcsync_rwlock_readers_held{client="app",farm="dc1",level="DC",name="wr"} 0
# HELP dcsync_rwlock_reader_slots M, the number of reader slots of a read-write lock.
# TYPE dcsync_rwlock_reader_slots gauge
dcsync_rwlock_reader_slots{client="app",farm="dc1",level="DC",name="rd"} 4
dcsync_rwlock_reader_slots{client="app",farm="dc1",level="DC",name="wr"} 4
# HELP dcsync_exporter_up 1 when every store read of the scrape succeeded, else 0.
# TYPE dcsync_exporter_up gauge
dcsync_exporter_up 1
`
	names := []string{"dcsync_election_leader_token", "dcsync_election_leader_published", "dcsync_semaphore_permits",
		"dcsync_semaphore_permits_held", "dcsync_rwlock_writer_held", "dcsync_rwlock_writer_waiting",
		"dcsync_rwlock_readers_held", "dcsync_rwlock_reader_slots", "dcsync_exporter_up"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if l, r := st.lists.Load(), st.regReads.Load(); l != 2 || r != 1 {
		t.Fatalf("one scrape made %d lock listings and %d register reads, want 2 (one per client) and 1", l, r)
	}
	// The locks they are made of keep their lock series: 3 elections, 2 permits, 2 readers, 2 Ws.
	if n := testutil.CollectAndCount(col, "dcsync_lock_token"); n != 9 {
		t.Fatalf("%d dcsync_lock_token series, want 9", n)
	}
}

// A scrape whose register read fails reports what the locks tell, not N, M or
// published, and is down.
func TestCollectorPrimitivesRegisterReadFails(t *testing.T) {
	st := &countingStore{Store: memory.New()}
	primitives(t, st)
	st.failRegs = true
	col := exporter.New(exporter.Config{Store: st, Clients: []string{"app"}})
	want := `
# HELP dcsync_semaphore_permits_held Permit slots of a semaphore held (live leases).
# TYPE dcsync_semaphore_permits_held gauge
dcsync_semaphore_permits_held{client="app",farm="dc1",level="DC",name="pool"} 2
# HELP dcsync_exporter_up 1 when every store read of the scrape succeeded, else 0.
# TYPE dcsync_exporter_up gauge
dcsync_exporter_up 0
# HELP dcsync_exporter_read_errors_total Store reads of a scrape that failed, by what was read.
# TYPE dcsync_exporter_read_errors_total counter
dcsync_exporter_read_errors_total{what="registers"} 1
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "dcsync_semaphore_permits_held", "dcsync_semaphore_permits",
		"dcsync_rwlock_reader_slots", "dcsync_election_leader_published", "dcsync_exporter_up", "dcsync_exporter_read_errors_total"); err != nil {
		t.Fatal(err)
	}
}
