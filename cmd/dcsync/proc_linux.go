//go:build linux

package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// commandAttr returns the attributes of the command `lock run` runs: a process group of
// its own (the terminal's foreground group when fg; ctty is then the terminal's
// descriptor), and SIGKILL from the kernel if its parent, the guardian, dies.
func commandAttr(fg bool, ctty int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Foreground: fg, Ctty: ctty, Pdeathsig: syscall.SIGKILL}
}

// becomeSubreaper makes the orphans of the command's children this process's children,
// so that it reaps them and can tell when the command's process group is empty.
func becomeSubreaper() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// clockNow reads the clock `lock run` and its guardian share: CLOCK_BOOTTIME, which is
// the same in every process, never steps, and (unlike CLOCK_MONOTONIC) goes on while
// the host is suspended, as the store's wall clock does.
func clockNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return ts.Nano()
}

// selfExe names this program's binary for re-executing it: still this binary when the
// file was replaced or deleted after it started.
func selfExe() (string, error) { return "/proc/self/exe", nil }
