package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/sqlite"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func rows(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestExpiredRowsAreSwept(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sweep.db")
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	s, err := sqlite.Open(ctx, path, sqlite.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	for i, name := range []string{"a", "b", "c"} {
		k := dcsync.Key{Level: dcsync.DC, Client: "c", Farm: "dc1", Name: name}
		if err := s.CreateLatch(ctx, k, int64(i), time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLock(ctx, k, "owner", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if rows(t, db, "dcsync_latch_cells") != 3 || rows(t, db, "dcsync_locks") != 3 {
		t.Fatal("setup did not write the rows")
	}
	clock.Add(2 * time.Minute) // past the TTLs and the sweep interval
	keep := dcsync.Key{Level: dcsync.DC, Client: "c", Farm: "dc1", Name: "keep"}
	if err := s.CreateLatch(ctx, keep, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := rows(t, db, "dcsync_latch_cells"); n != 1 {
		t.Fatalf("%d latch rows after the sweep, want 1 (the live one)", n)
	}
	if n := rows(t, db, "dcsync_locks"); n != 0 {
		t.Fatalf("%d lock rows after the sweep, want 0", n)
	}
	// Fences never expire: the next token still goes up.
	st, err := s.AcquireLock(ctx, dcsync.Key{Level: dcsync.DC, Client: "c", Farm: "dc1", Name: "a"}, "owner2", time.Second)
	if err != nil || st.Token != 2 {
		t.Fatalf("token after sweep = %d, %v; want 2", st.Token, err)
	}
}
