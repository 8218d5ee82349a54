package dcsync

import (
	"errors"
	"fmt"
	"strings"
)

// Code classifies an [Error]. The first six mirror the error codes of the Java lock and
// latch libraries; the rest are dcsync's own.
type Code int

// The error codes. The zero Code is not used.
const (
	// Internal is an unexpected failure: a malformed reply, a broken invariant.
	Internal Code = iota + 1
	// NotImplemented means the store does not support the operation.
	NotImplemented
	// LockUnavailable means the lock is held by someone else.
	LockUnavailable
	// TableCreation means the store could not create a table (or set) it needs.
	TableCreation
	// Connection means the store could not be reached, or the request's outcome is unknown.
	Connection
	// RetriesExhausted means every attempt allowed by the retry policy failed.
	RetriesExhausted
	// InvalidArgument means the caller passed bad input; nothing was written.
	InvalidArgument
	// NotFound means the latch or lock does not exist (never created, or expired).
	NotFound
	// AlreadyExists means a create found the latch already there; its count is unchanged.
	AlreadyExists
	// LockLost means the caller no longer holds the lock: its lease lapsed or another
	// owner holds it. The other owner's lock is left untouched.
	LockLost
	// Unauthenticated means the two ends of a connection did not accept each other: the
	// store refused the client's credentials (a wrong password or keytab, an expired
	// ticket, a server without security that was sent some), or the client refused the
	// server's certificate (an untrusted CA, a wrong TLS name). Nothing was done, and
	// retrying does not help until the configuration changes. The message names what
	// failed, never a secret.
	Unauthenticated
	// Conflict means a compare-and-set found the record at another version than the
	// one the caller named (someone else wrote it first); nothing was written. Read the
	// record again and decide anew.
	Conflict
)

var codeNames = map[Code]string{
	Internal:         "internal",
	NotImplemented:   "not implemented",
	LockUnavailable:  "lock unavailable",
	TableCreation:    "table creation",
	Connection:       "connection",
	RetriesExhausted: "retries exhausted",
	InvalidArgument:  "invalid argument",
	NotFound:         "not found",
	AlreadyExists:    "already exists",
	LockLost:         "lock lost",
	Unauthenticated:  "unauthenticated",
	Conflict:         "conflict",
}

// String returns the code's name, such as "lock unavailable".
func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("code(%d)", int(c))
}

// Error is the one error type of dcsync. Match it by code with errors.Is against the
// Err* sentinels, or take it apart with errors.As.
type Error struct {
	// Code classifies the failure.
	Code Code
	// Op names what failed, such as "latch.CountDown" or "hbase.CheckAndMutate".
	Op string
	// Msg says what went wrong, in words.
	Msg string
	// Err is the underlying cause, if any.
	Err error
}

// Sentinels for errors.Is: errors.Is(err, dcsync.ErrNotFound) is true for every
// *Error whose Code is NotFound, however deeply wrapped.
var (
	ErrInternal         = &Error{Code: Internal}
	ErrNotImplemented   = &Error{Code: NotImplemented}
	ErrLockUnavailable  = &Error{Code: LockUnavailable}
	ErrTableCreation    = &Error{Code: TableCreation}
	ErrConnection       = &Error{Code: Connection}
	ErrRetriesExhausted = &Error{Code: RetriesExhausted}
	ErrInvalidArgument  = &Error{Code: InvalidArgument}
	ErrNotFound         = &Error{Code: NotFound}
	ErrAlreadyExists    = &Error{Code: AlreadyExists}
	ErrLockLost         = &Error{Code: LockLost}
	ErrUnauthenticated  = &Error{Code: Unauthenticated}
	ErrConflict         = &Error{Code: Conflict}
)

// Error formats the error as "op: code: msg: cause". Each part is said once: a cause
// that the message already ends with ("dial h:1: refused" with cause "refused") is not
// repeated, nor is the code of a pure annotation of an error with the same code.
func (e *Error) Error() string {
	var inner *Error
	if e.Msg == "" && errors.As(e.Err, &inner) && inner.Code == e.Code {
		// A pure annotation of an error with the same code: say the code once.
		if e.Op == "" {
			return e.Err.Error()
		}
		return e.Op + ": " + e.Err.Error()
	}
	s := e.Code.String()
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	var cause string
	if e.Err != nil {
		cause = e.Err.Error()
	}
	if e.Msg != "" {
		s += ": " + e.Msg
		if cause != "" && endsWithPart(e.Msg, cause) {
			cause = ""
		}
	}
	if cause != "" {
		s += ": " + cause
	}
	return s
}

// endsWithPart reports whether msg is cause or ends with ": "+cause.
func endsWithPart(msg, cause string) bool {
	return msg == cause || strings.HasSuffix(msg, ": "+cause)
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same Code. It lets errors.Is match
// the Err* sentinels.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// CodeOf returns the code of the first *Error in err's chain, Internal when err is not
// nil but carries no dcsync code, and 0 for nil.
func CodeOf(err error) Code {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}
