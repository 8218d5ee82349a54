package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/latch"
	"github.com/dcsync/dcsync/store/sqlite"
)

func open(t *testing.T, path string, opts ...sqlite.Option) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func key(level dcsync.Level, farm, name string) dcsync.Key {
	return dcsync.Key{Level: level, Client: "c", Farm: farm, Name: name}
}

// holdWriteLock takes the file's write lock from another connection, as another
// process would, until the test ends.
func holdWriteLock(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		db.Close()
	})
}

// Issue 8 §1: a Refresh under write contention ignored its context during SQLite's busy
// wait (10 s). Every call now returns when its context ends, with an error matching it.
func TestCallsHonourContextUnderWriteContention(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "busy.db")
	s := open(t, path)
	lk := key(dcsync.DC, "dc1", "job")
	st, err := s.AcquireLock(ctx, lk, "owner-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lt := key(dcsync.DC, "dc1", "latch")
	if err := s.CreateLatch(ctx, lt, 5, time.Hour); err != nil {
		t.Fatal(err)
	}
	holdWriteLock(t, path)

	calls := map[string]func(context.Context) error{
		"RefreshLock": func(ctx context.Context) error { _, err := s.RefreshLock(ctx, lk, st.Owner, time.Minute); return err },
		"AcquireLock": func(ctx context.Context) error {
			_, err := s.AcquireLock(ctx, key(dcsync.DC, "dc1", "other"), "owner-b", time.Minute)
			return err
		},
		"ReleaseLock": func(ctx context.Context) error { return s.ReleaseLock(ctx, lk, st.Owner) },
		"CreateLatch": func(ctx context.Context) error { return s.CreateLatch(ctx, key(dcsync.DC, "dc1", "new"), 1, time.Hour) },
		"EnsureLatch": func(ctx context.Context) error {
			_, err := s.EnsureLatch(ctx, key(dcsync.DC, "dc1", "new"), time.Hour)
			return err
		},
		"AddLatch": func(ctx context.Context) error { _, err := s.AddLatch(ctx, lt, -1); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			err := call(cctx)
			if !errors.Is(err, context.DeadlineExceeded) || dcsync.CodeOf(err) != dcsync.Connection {
				t.Fatalf("%s with a 200ms context under contention: %v; want a Connection error matching context.DeadlineExceeded", name, err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
		})
	}

	// A writer of this process waiting behind another one honours its context too.
	blocked := make(chan error, 1)
	long, cancelLong := context.WithCancel(ctx)
	go func() { _, err := s.AddLatch(long, lt, -1); blocked <- err }()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = s.RefreshLock(cctx, lk, st.Owner, time.Minute)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RefreshLock queued behind this process's writer: %v; want context.DeadlineExceeded", err)
	}
	cancelLong()
	if err := <-blocked; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled AddLatch: %v; want context.Canceled", err)
	}
	// Nothing was written by any of them.
	if c, err := s.ReadLatches(ctx, []dcsync.Key{lt}); err != nil || c[0].Count != 5 {
		t.Fatalf("count after the refused updates = %+v, %v; want 5", c, err)
	}
}

// Without a context deadline a call waits for the busy timeout, then fails with a
// Connection error that is not a context error.
func TestBusyTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.db")
	s := open(t, path, sqlite.WithBusyTimeout(100*time.Millisecond))
	holdWriteLock(t, path)
	_, err := s.AcquireLock(context.Background(), key(dcsync.DC, "dc1", "job"), "owner", time.Minute)
	if dcsync.CodeOf(err) != dcsync.Connection || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireLock past the busy timeout: %v; want Connection", err)
	}
	// Reads do not wait for writers (WAL).
	if _, err := s.InspectLock(context.Background(), key(dcsync.DC, "dc1", "job")); dcsync.CodeOf(err) != dcsync.NotFound {
		t.Fatalf("InspectLock during another process's write: %v; want NotFound", err)
	}
}

// makeReadOnly makes the file unwritable for this process: by its mode, or, for root,
// whom modes do not stop, with the immutable attribute.
func makeReadOnly(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatal(err)
		}
		return
	}
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("running as root and chattr +i failed (%v: %s): cannot make a file read-only for this test", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
}

// Issue 8 §6: a read-only SQLite file blocked even reads, because opening always wrote
// the schema. It opens for reading; writes fail clearly, naming the file.
func TestReadOnlyFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ro.db")
	w, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	lt, lk := key(dcsync.XDC, "dc1", "latch"), key(dcsync.DC, "dc1", "job")
	if err := w.CreateLatch(ctx, lt, 3, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AcquireLock(ctx, lk, "owner", time.Hour); err != nil {
		t.Fatal(err)
	}
	w.Close()
	makeReadOnly(t, path)

	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open of a read-only file: %v", err)
	}
	defer s.Close()
	if !s.ReadOnly() {
		t.Fatal("ReadOnly() = false")
	}
	if c, err := s.ReadLatches(ctx, []dcsync.Key{lt}); err != nil || c[0] != (driver.LatchCount{Found: true, Count: 3}) {
		t.Fatalf("ReadLatches = %+v, %v; want count 3", c, err)
	}
	if st, err := s.InspectLock(ctx, lk); err != nil || st.Owner != "owner" {
		t.Fatalf("InspectLock = %+v, %v", st, err)
	}
	_, err = s.AddLatch(ctx, lt, -1)
	if dcsync.CodeOf(err) != dcsync.NotImplemented || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("AddLatch on a read-only file: %v; want NotImplemented naming the file as read-only", err)
	}

	// A read-only file without the dcsync tables cannot be used at all.
	empty := filepath.Join(t.TempDir(), "empty.db")
	db, err := sql.Open("sqlite", empty)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE other (x)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	makeReadOnly(t, empty)
	_, err = sqlite.Open(ctx, empty)
	if dcsync.CodeOf(err) != dcsync.TableCreation || !strings.Contains(err.Error(), empty) {
		t.Fatalf("Open of a read-only file without tables: %v; want TableCreation naming the file", err)
	}
}

// Opening writes nothing when the tables are there: a second process opening the file
// while another holds the write lock does not wait for it.
func TestOpenWritesNothingWhenTheSchemaExists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	open(t, path)
	holdWriteLock(t, path)
	s, err := sqlite.Open(context.Background(), path, sqlite.WithBusyTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("Open while another process writes: %v", err)
	}
	s.Close()
}

// Issue 8 §6: SQLite open errors did not name the file, and printed the cause twice.
func TestOpenErrorsNameTheFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-dir", "x.db")
	if _, err := sqlite.Open(ctx, missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Open in a missing directory: %v; want an error naming %s", err, missing)
	}
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := sqlite.Open(ctx, garbage)
	if err == nil || !strings.Contains(err.Error(), garbage) {
		t.Fatalf("Open of a file that is not a database: %v; want an error naming it", err)
	}
	if n := strings.Count(err.Error(), "not a database"); n != 1 {
		t.Fatalf("the cause appears %d times in %q", n, err)
	}
}

// '#', '?', '%' and spaces are part of a file name.
func TestPathWithURICharacters(t *testing.T) {
	dir := t.TempDir()
	name := "a#b?c%20d e.db"
	s := open(t, filepath.Join(dir, name))
	if err := s.CreateLatch(context.Background(), key(dcsync.DC, "dc1", "x"), 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
		t.Fatalf("the file was not created under its name: %v", err)
	}
}

// Issue 8 §6: counts wrapped silently (MaxInt64 + 1 became MinInt64), and an XDC sum
// past int64 made the latch unreadable (SQL SUM overflow).
func TestLatchOverflow(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "big.db"))
	count := func(k dcsync.Key) int64 {
		t.Helper()
		c, err := s.ReadLatches(ctx, []dcsync.Key{k})
		if err != nil {
			t.Fatalf("ReadLatches %s: %v", k, err)
		}
		return c[0].Count
	}
	wantRefused := func(k dcsync.Key, delta int64, before int64) {
		t.Helper()
		_, err := s.AddLatch(ctx, k, delta)
		if dcsync.CodeOf(err) != dcsync.InvalidArgument || !strings.Contains(err.Error(), "overflow") {
			t.Fatalf("AddLatch(%s, %d): %v; want InvalidArgument (overflow)", k, delta, err)
		}
		if n := count(k); n != before {
			t.Fatalf("count after a refused update = %d, want %d", n, before)
		}
	}

	big := key(dcsync.DC, "dc1", "big")
	if err := s.CreateLatch(ctx, big, math.MaxInt64, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantRefused(big, 1, math.MaxInt64)
	if n, err := s.AddLatch(ctx, big, -1); err != nil || n != math.MaxInt64-1 {
		t.Fatalf("count-down from MaxInt64 = %d, %v", n, err)
	}

	low := key(dcsync.DC, "dc1", "low")
	if err := s.CreateLatch(ctx, low, 0, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddLatch(ctx, low, math.MinInt64); err != nil {
		t.Fatal(err)
	}
	wantRefused(low, -1, math.MinInt64)

	// XDC: dc1 holds MaxInt64; an XDC count-up from dc2 would overflow the sum.
	x1, x2 := key(dcsync.XDC, "dc1", "sum"), key(dcsync.XDC, "dc2", "sum")
	if err := s.CreateLatch(ctx, x1, math.MaxInt64, time.Hour); err != nil {
		t.Fatal(err)
	}
	wantRefused(x2, 1, math.MaxInt64)
	// A DC latch of the same name in dc2 shares the cells: the XDC sum now exceeds
	// int64. It stays readable, saturated, and XDC updates towards zero work.
	if err := s.CreateLatch(ctx, key(dcsync.DC, "dc2", "sum"), math.MaxInt64, time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := count(x1); n != math.MaxInt64 {
		t.Fatalf("XDC sum of two MaxInt64 cells reads %d, want MaxInt64 (saturated)", n)
	}
	wantRefused(x1, 1, math.MaxInt64)
	if n, err := s.AddLatch(ctx, x1, math.MinInt64); err != nil || n != math.MaxInt64-1 {
		t.Fatalf("XDC count-down into range = %d, %v; want MaxInt64-1", n, err)
	}
}

// Close ends calls in progress and refuses later ones with Connection, and closes Done,
// so that latch waits on the store end at once (issue 8 §3: a Wait on a closed SQLite
// store retried forever).
func TestClose(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "close.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	lt := key(dcsync.DC, "dc1", "latch")
	if err := s.CreateLatch(ctx, lt, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	m, err := latch.New(s, "c", "dc1", latch.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.GetCountDown("latch")
	if err != nil {
		t.Fatal(err)
	}
	holdWriteLock(t, path)
	waited := make(chan error, 1)
	go func() { waited <- l.Wait(ctx) }()
	busy := make(chan error, 1)
	go func() { _, err := s.AddLatch(ctx, lt, -1); busy <- err }()
	time.Sleep(200 * time.Millisecond) // both are waiting now
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed by Close")
	}
	for what, ch := range map[string]chan error{"Wait": waited, "AddLatch waiting for the lock": busy} {
		select {
		case err := <-ch:
			if dcsync.CodeOf(err) != dcsync.Connection {
				t.Errorf("%s on a closed store: %v, want Connection", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not end when the store closed", what)
		}
	}
	if _, err := s.ReadLatches(ctx, []dcsync.Key{lt}); dcsync.CodeOf(err) != dcsync.Connection || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("ReadLatches after Close: %v, want Connection (closed)", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
