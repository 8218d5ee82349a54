// Package suitekit holds the small test helpers the exported conformance suites
// (store/storetest and queue/queuetest) share.
package suitekit

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// Context returns a context that ends after d or when the test ends.
func Context(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// WantCode fails the test unless err carries code.
func WantCode(t *testing.T, err error, code dcsync.Code, what string) {
	t.Helper()
	if dcsync.CodeOf(err) != code {
		t.Fatalf("%s: got error %v (code %v), want code %v", what, err, dcsync.CodeOf(err), code)
	}
}

// Must fails the test if err is not nil.
func Must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
