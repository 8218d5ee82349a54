package queuetest

import "testing"

// runFront runs the cases of package queue.
func runFront(t *testing.T, h Harness) {
	t.Skip("the front-end cases are not written yet")
}
