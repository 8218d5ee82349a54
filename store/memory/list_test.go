package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/store/memory"
)

// TestListSkipsExpired: expired locks and cells are not listed, nor deletable.
func TestListSkipsExpired(t *testing.T) {
	now := time.Now()
	s := memory.New(memory.WithClock(func() time.Time { return now }))
	defer s.Close()
	ctx := context.Background()
	k := dcsync.Key{Level: dcsync.DC, Client: "c", Farm: "f", Name: "n"}
	if _, err := s.AcquireLock(ctx, k, "o", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateLatch(ctx, k, 1, time.Second); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if l, err := s.ListLocks(ctx, "c"); err != nil || len(l) != 0 {
		t.Fatalf("ListLocks = %+v, %v", l, err)
	}
	if l, err := s.ListLatches(ctx, "c"); err != nil || len(l) != 0 {
		t.Fatalf("ListLatches = %+v, %v", l, err)
	}
	if err := s.DeleteLatch(ctx, k); !errors.Is(err, dcsync.ErrNotFound) {
		t.Fatalf("DeleteLatch of an expired latch = %v", err)
	}
}
