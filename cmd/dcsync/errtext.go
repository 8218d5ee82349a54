package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/lock"
)

// How the CLI words its errors. By default an error is what went wrong in the user's
// words: the library's call path ("lock.Acquire: sqlite.AcquireLock: ") is left out,
// and the two errors a lock user meets most are sentences about the lock, the same on
// every store:
//
//	lock "nightly" is held by <owner> for 12s more
//	lock "nightly" is not held by <owner>
//
// --verbose prints the whole chain, call path and every cause. Either way the error is
// one line.

// said is an error the CLI has put in the user's words; err is what the library said.
type said struct {
	msg string
	err error
}

func (s *said) Error() string { return s.msg }
func (s *said) Unwrap() error { return s.err }

// errorText renders err for stderr: in the user's words, or with --verbose the whole
// chain; on one line either way.
func errorText(err error, verbose bool) string {
	if verbose {
		var s *said
		if errors.As(err, &s) && s.err != nil {
			return errorLine(err) + " (" + errorLine(s.err) + ")"
		}
		return errorLine(err)
	}
	return errorLine(plainError(err))
}

// errorLine renders err on one line: the lines of a multi-line error (errors.Join, the
// Aerospike client's error chains) joined with "; ".
func errorLine(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// plainError returns err without the library's call path: every *dcsync.Error in the
// chain loses its Op, and a wrapper that only prefixes its cause keeps its prefix.
func plainError(err error) error {
	var s *said
	switch e := err.(type) {
	case nil:
		return nil
	case *said:
		return e
	case *exitErr:
		return plainError(e.err)
	case *dcsync.Error:
		c := *e
		c.Op = ""
		c.Err = plainError(e.Err)
		return &c
	default:
		if inner := errors.Unwrap(err); inner != nil {
			if msg, innerMsg := err.Error(), inner.Error(); strings.HasSuffix(msg, innerMsg) {
				return fmt.Errorf("%s%w", strings.TrimSuffix(msg, innerMsg), plainError(inner))
			}
		}
		if errors.As(err, &s) {
			return s
		}
		return err
	}
}

// heldBy words a refused acquisition of lock name: who holds it and for how long, as
// the store tells (one more read). Other errors are returned as they are.
func heldBy(ctx context.Context, m *lock.Manager, name string, opts []lock.CallOption, err error) error {
	if dcsync.CodeOf(err) != dcsync.LockUnavailable || errors.Is(err, context.Canceled) {
		return err
	}
	st, ierr := m.Inspect(ctx, name, opts...)
	if ierr != nil {
		return &said{msg: fmt.Sprintf("lock %q is held by another", name), err: err}
	}
	msg := fmt.Sprintf("lock %q is held by %s", name, ownerName(st.Owner))
	if !st.Expires.IsZero() {
		msg += fmt.Sprintf(" for %s more", max(time.Until(st.Expires), 0).Round(time.Second))
	}
	return &said{msg: msg, err: err}
}

// notHeldBy words a release or refresh refused because owner does not hold lock name.
func notHeldBy(name, owner string, err error) error {
	if dcsync.CodeOf(err) != dcsync.LockLost {
		return err
	}
	return &said{msg: fmt.Sprintf("lock %q is not held by %s", name, ownerName(owner)), err: err}
}

// ownerName names an owner for a message: a Java client records none.
func ownerName(owner string) string {
	if owner == "" {
		return "a Java client"
	}
	return owner
}
