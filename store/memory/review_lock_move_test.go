package memory_test

import (
	"testing"

	"github.com/dcsync/dcsync/driver/drivertest"
	"github.com/dcsync/dcsync/store/memory"
)

// Review: batched acquires and releases the conformance suite leaves out are the
// single operations' (drivertest.ReviewLockMoveLikeSingle).
func TestReviewLockMoveLikeSingle(t *testing.T) {
	drivertest.ReviewLockMoveLikeSingle(t, memory.New(), "dc1")
}
