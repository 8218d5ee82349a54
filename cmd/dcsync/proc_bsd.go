//go:build darwin || freebsd || openbsd

package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// commandAttr returns the attributes of the command `lock run` runs: a process group of
// its own (the terminal's foreground group when fg; ctty is then the terminal's
// descriptor). These systems have no parent-death signal: the guardian's pipe from
// `lock run` is what tells it that `lock run` died.
func commandAttr(fg bool, ctty int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Foreground: fg, Ctty: ctty}
}

// becomeSubreaper does nothing here: orphans are reaped by init.
func becomeSubreaper() {}

// clockNow reads the clock `lock run` and its guardian share.
func clockNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// selfExe names this program's binary for re-executing it.
func selfExe() (string, error) { return os.Executable() }
