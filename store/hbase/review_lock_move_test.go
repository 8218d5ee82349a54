package hbase

import (
	"testing"

	"github.com/dcsync/dcsync/driver/drivertest"
)

// Review: batched acquires and releases the conformance suite leaves out are the
// single operations' (drivertest.ReviewLockMoveLikeSingle).
func TestReviewLockMoveLikeSingle(t *testing.T) {
	s := openQueueStore(t)
	defer s.Close()
	drivertest.ReviewLockMoveLikeSingle(t, s, "dc1")
}
