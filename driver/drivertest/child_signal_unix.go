//go:build unix

package drivertest

import "syscall"

// canPause reports whether children can be stopped and continued.
const canPause = true

// pause stops the child (SIGSTOP), as if its host froze.
func pause(c *child) error { return c.cmd.Process.Signal(syscall.SIGSTOP) }

// resume continues a stopped child (SIGCONT).
func resume(c *child) error { return c.cmd.Process.Signal(syscall.SIGCONT) }
