//go:build !(linux || darwin || freebsd || openbsd)

package main

import (
	"context"
	"fmt"
	"runtime"
)

// guardEnv marks a process started as lock run's guardian (Unix only).
const guardEnv = "DCSYNC_LOCK_RUN_GUARD"

// guardMain is never used here: lock run starts no guardian.
func guardMain() int { return exitError }

// runLocked refuses: without process groups and the guardian, lock run could not stop
// the command, and what it started, before the lease ends.
func (a *app) runLocked(context.Context, string, *lockFlags, []string) error {
	return withCode(exitError, fmt.Errorf("lock run is not available on %s: it needs Unix process groups to stop the command before its lease ends", runtime.GOOS))
}

// runGuarded refuses, as runLocked does.
func (a *app) runGuarded(context.Context, string, *lockFlags, string, []string, *leaseClock, []string, func(context.Context) (guarded, error)) error {
	return withCode(exitError, fmt.Errorf("run is not available on %s: it needs Unix process groups to stop the command before its lease ends", runtime.GOOS))
}
