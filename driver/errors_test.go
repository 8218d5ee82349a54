package driver_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

func TestErrorsMatchByCode(t *testing.T) {
	base := driver.Errorf(dcsync.NotFound, "store.Read", "latch %s does not exist", "x")
	wrapped := fmt.Errorf("outer: %w", driver.Wrap(base, dcsync.Internal, "latch.Count"))
	if !errors.Is(wrapped, dcsync.ErrNotFound) {
		t.Fatal("errors.Is lost the NotFound code through wrapping")
	}
	if errors.Is(wrapped, dcsync.ErrInternal) {
		t.Fatal("Wrap replaced the original code with its fallback")
	}
	if dcsync.CodeOf(wrapped) != dcsync.NotFound {
		t.Fatalf("CodeOf = %v", dcsync.CodeOf(wrapped))
	}
	var e *dcsync.Error
	if !errors.As(wrapped, &e) || e.Op != "latch.Count" {
		t.Fatalf("errors.As = %+v", e)
	}
	if got := wrapped.Error(); got != "outer: latch.Count: store.Read: not found: latch x does not exist" {
		t.Fatalf("message = %q", got)
	}
	plain := driver.Wrap(context.DeadlineExceeded, dcsync.Connection, "hbase.Get")
	if dcsync.CodeOf(plain) != dcsync.Connection || !errors.Is(plain, context.DeadlineExceeded) {
		t.Fatalf("Wrap of a plain error: %v", plain)
	}
	cause := errors.New("socket closed")
	withCause := driver.Errorf(dcsync.Connection, "op", "dial %s: %w", "h:1", cause)
	if !errors.Is(withCause, cause) || withCause.Error() != "op: connection: dial h:1: socket closed" {
		t.Fatalf("Errorf with %%w: %q", withCause)
	}
	if dcsync.CodeOf(nil) != 0 || driver.Wrap(nil, dcsync.Internal, "x") != nil {
		t.Fatal("nil handling")
	}
	if dcsync.CodeOf(errors.New("x")) != dcsync.Internal {
		t.Fatal("uncoded errors are Internal")
	}
}

func TestValidateIDs(t *testing.T) {
	// Every id the Java libraries accept and their docs use, '_' and '#' included.
	for _, ok := range []string{"a", "svc-payments", "dc1", "phx.v2", "A-Z.0-9", "CLIENT_ID", "MY_SERVICE", "a_b", "a#b", "a b", "ü", "a/b"} {
		if err := driver.ValidateID("client", ok); err != nil {
			t.Errorf("ValidateID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a\x00b", "a\nb", "\xff", "a\u0085", string(make([]byte, dcsync.MaxIDLen+1))} {
		if err := driver.ValidateID("client", bad); !errors.Is(err, dcsync.ErrInvalidArgument) {
			t.Errorf("ValidateID(%q) = %v, want InvalidArgument", bad, err)
		}
	}
	// The offending character is named as a character, not as one of its bytes.
	if err := driver.ValidateID("client", "é\x01"); err == nil || !strings.Contains(err.Error(), "U+0001 at byte 2") {
		t.Errorf("ValidateID(é\\x01) = %v, want U+0001 at byte 2", err)
	}
	if _, err := dcsync.ParseLevel("XDC"); err != nil {
		t.Error(err)
	}
	if _, err := dcsync.ParseLevel("global"); !errors.Is(err, dcsync.ErrInvalidArgument) {
		t.Error("ParseLevel accepted global")
	}
}

// A cause is printed once: "%w" alone, a message that already ends with its cause, and
// an error built as a literal all read "op: code: cause", not "...: cause: cause".
func TestErrorSaysCauseOnce(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{driver.Errorf(dcsync.Connection, "sqlite.AcquireLock", "%w", context.Canceled),
			"sqlite.AcquireLock: connection: context canceled"},
		{&dcsync.Error{Code: dcsync.Connection, Op: "op", Msg: "context canceled", Err: context.Canceled},
			"op: connection: context canceled"},
		{&dcsync.Error{Code: dcsync.Connection, Op: "op", Msg: "dial h:1: context canceled", Err: context.Canceled},
			"op: connection: dial h:1: context canceled"},
		{&dcsync.Error{Code: dcsync.Connection, Op: "op", Msg: "dial", Err: context.Canceled},
			"op: connection: dial: context canceled"},
		// Not a whole part: the cause is still printed.
		{&dcsync.Error{Code: dcsync.Internal, Op: "op", Msg: "not canceled", Err: errors.New("canceled")},
			"op: internal: not canceled: canceled"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		if !errors.Is(tc.err, context.Canceled) && tc.want != "op: internal: not canceled: canceled" {
			t.Errorf("%q lost its cause", tc.err)
		}
	}
}

func TestAddCountAndSumCounts(t *testing.T) {
	if n, err := driver.AddCount("t", 5, -6); err != nil || n != -1 {
		t.Fatalf("AddCount(5, -6) = %d, %v", n, err)
	}
	for _, tc := range [][2]int64{{math.MaxInt64, 1}, {math.MinInt64, -1}, {math.MaxInt64 - 1, 2}} {
		if _, err := driver.AddCount("t", tc[0], tc[1]); !errors.Is(err, dcsync.ErrInvalidArgument) {
			t.Errorf("AddCount(%d, %d) = %v, want InvalidArgument", tc[0], tc[1], err)
		}
	}
	if n := driver.SumCounts(math.MaxInt64, 1, 1); n != math.MaxInt64 {
		t.Errorf("saturating sum = %d", n)
	}
	if n := driver.SumCounts(math.MinInt64, -5); n != math.MinInt64 {
		t.Errorf("saturating sum = %d", n)
	}
	if n := driver.SumCounts(3, -2, 4); n != 5 {
		t.Errorf("sum = %d", n)
	}
	// Exact, then saturated: a sum that passes the bound on its way but ends inside it.
	if n, ok := driver.SumFits(math.MaxInt64, 1, -5); !ok || n != math.MaxInt64-4 {
		t.Errorf("SumFits(Max, 1, -5) = %d, %v", n, ok)
	}
	if !driver.SumUpdateFits([]int64{math.MaxInt64, 5}, -1) || driver.SumUpdateFits([]int64{math.MaxInt64}, 1) || !driver.SumUpdateFits([]int64{math.MaxInt64, -1}, 1) {
		t.Error("SumUpdateFits")
	}
}
