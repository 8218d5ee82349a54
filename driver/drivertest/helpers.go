package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/dcsync/dcsync"
)

// ctxT returns a context that ends after d or when the test ends.
func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails the test unless err carries code.
func wantCode(t *testing.T, err error, code dcsync.Code, what string) {
	t.Helper()
	if dcsync.CodeOf(err) != code {
		t.Fatalf("%s: got error %v (code %v), want code %v", what, err, dcsync.CodeOf(err), code)
	}
}

// must fails the test if err is not nil.
func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
