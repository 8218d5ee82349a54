//go:build !unix

package drivertest

import "errors"

// canPause reports whether children can be stopped and continued.
const canPause = false

func pause(c *child) error  { return errors.New("no SIGSTOP") }
func resume(c *child) error { return errors.New("no SIGCONT") }
