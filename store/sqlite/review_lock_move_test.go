package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/sqlite"
)

// Review: batched acquires and releases the conformance suite leaves out are the
// single operations' (drivertest.ReviewLockMoveLikeSingle).
func TestReviewLockMoveLikeSingle(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	drivertest.ReviewLockMoveLikeSingle(t, s, "dc1")
}
