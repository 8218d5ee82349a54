//go:build !(linux || darwin || freebsd || openbsd)

package main

import (
	"context"
	"fmt"
	"runtime"
	"time"
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

// runLeased refuses, as runLocked does (semaphore run).
func (a *app) runLeased(_ context.Context, _ string, _ []string, _ time.Duration,
	_ func(context.Context) (*leaseClock, func(context.Context) (*heldLease, error), error)) error {
	return withCode(exitError, fmt.Errorf("run is not available on %s: it needs Unix process groups to stop the command before its lease ends", runtime.GOOS))
}
