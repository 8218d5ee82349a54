package driver

import (
	"errors"
	"fmt"
	"github.com/dcsync/dcsync"
)

// Errorf returns an *Error with the given code and operation and a formatted message.
// A %w verb in format wraps its argument as the cause.
func Errorf(code dcsync.Code, op, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	e := &dcsync.Error{Code: code, Op: op, Msg: err.Error()}
	if u := errors.Unwrap(err); u != nil {
		e.Msg = trimCause(e.Msg, u.Error())
		e.Err = u
	}
	return e
}

// trimCause removes cause, and the ": " before it, from the end of msg: Errorf keeps the
// cause in Err, and Error prints it once. A message that is only the cause ("%w")
// becomes empty.
func trimCause(msg, cause string) string {
	if msg == cause {
		return ""
	}
	if len(msg) >= len(cause)+2 && msg[len(msg)-len(cause):] == cause {
		m := msg[:len(msg)-len(cause)]
		for len(m) > 0 && (m[len(m)-1] == ' ' || m[len(m)-1] == ':') {
			m = m[:len(m)-1]
		}
		return m
	}
	return msg
}

// Wrap annotates err with op. When err already carries a dcsync code, that code is kept
// (the Java libraries' "propagate"); otherwise err becomes the cause of a new *Error
// with the given fallback code. Wrap(nil) is nil.
func Wrap(err error, fallback dcsync.Code, op string) error {
	if err == nil {
		return nil
	}
	code := fallback
	var e *dcsync.Error
	if errors.As(err, &e) {
		code = e.Code
	}
	return &dcsync.Error{Code: code, Op: op, Err: err}
}
