//go:build linux || darwin || freebsd || openbsd

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// forwarded are the signals lock run passes on to the command's process group. Those a
// terminal sends (Ctrl-C, Ctrl-\) reach the command directly when lock run runs in the
// foreground; these are the ones sent to lock run itself (kill, timeout(1), systemd).
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// clockAt converts a time of this process's clock to clockNow's.
func clockAt(t time.Time) int64 { return clockNow() + int64(time.Until(t)) }

// runLocked runs argv under the lock; see the help of `lock run` for what it promises.
func (a *app) runLocked(ctx context.Context, name string, f *lockFlags, argv []string) error {
	return a.runLeased(ctx, name, argv, f.killAfter, func(ctx context.Context) (*leaseClock, func(context.Context) (*heldLease, error), error) {
		var lc *leaseClock
		m, opts, err := a.lockManager(ctx, func(s driver.LockStore) driver.LockStore {
			lc = newLeaseClock(s)
			return lc
		})
		if err != nil {
			return nil, nil, err
		}
		return lc, func(ctx context.Context) (*heldLease, error) {
			l, err := acquire(ctx, m, name, f, opts)
			if err != nil {
				if code := exitCode(err); f.conflictSet && (code == exitHeld || code == exitTimeout) {
					return nil, withCode(f.conflictCode, err)
				}
				return nil, err
			}
			return &heldLease{ttl: l.TTL(), keepAlive: l.KeepAlive, release: l.Release,
				env: []string{fmt.Sprintf("DCSYNC_LOCK_TOKEN=%d", l.Token()), "DCSYNC_LOCK_OWNER=" + l.Owner()}}, nil
		}, nil
	})
}

// runLeased runs argv under a lease, with lock run's promises (see its help): open
// makes the store's lease clock and the function that takes the lease (waiting as the
// command's flags say) on the store it watches; a forwarded signal ends the wait.
func (a *app) runLeased(ctx context.Context, name string, argv []string, killAfter time.Duration,
	open func(context.Context) (*leaseClock, func(context.Context) (*heldLease, error), error)) error {
	path, err := lookCommand(argv[0])
	if err != nil {
		return err
	}
	lc, take, err := open(ctx)
	if err != nil {
		return err
	}
	// From here on the signals are lock run's to handle: before the command runs, one
	// ends the wait for the lease; then it is forwarded.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	h, err := untilSignal(ctx, sigs, take, func(ctx context.Context, h *heldLease) error { return h.release(ctx) })
	if err != nil {
		return err
	}
	return a.runGuarded(guarded{heldLease: *h, name: name, path: path, argv: argv, killAfter: killAfter, lc: lc, sigs: sigs})
}

// guarded is what runGuarded runs a command under: a lease taken (one lock, or the
// permits of a semaphore), whose store calls lc watched.
type guarded struct {
	heldLease
	name      string // the lock or semaphore, for messages
	path      string // the command's binary (lookCommand)
	argv      []string
	killAfter time.Duration
	lc        *leaseClock
	sigs      chan os.Signal // the forwarded signals, already being caught
}

// runGuarded runs the command of g through the guardian while g's lease is kept
// alive, and releases the lease when it is over: lock run's promises (see its help)
// for any lease.
func (a *app) runGuarded(g0 guarded) error {
	name, argv, sigs, lc := g0.name, g0.argv, g0.sigs, g0.lc
	// Release with a fresh context: the command's own may be cancelled by then.
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := g0.release(rctx); err != nil && !errors.Is(err, dcsync.ErrLockLost) {
			fmt.Fprintln(a.stderr, "dcsync: release:", errorLine(err))
		}
	}()
	kctx := g0.keepAlive(context.Background())
	grace := min(g0.killAfter, g0.ttl/3)

	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return err
	}
	// Closed only once the guardian has exited: the guardian takes the end of this
	// pipe for the end of lock run and kills the command.
	defer ctlW.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		return err
	}
	cfg, _ := json.Marshal(guardConfig{Path: g0.path, Args: argv, Lock: name, Grace: grace, End: clockAt(lc.End()), Job: syscall.Getpgrp()})
	self, err := selfExe()
	if err != nil {
		return err
	}
	g := exec.Command(self)
	g.Args = []string{os.Args[0], "(lock run guard)", name}
	g.Env = append(append(withoutEnv(os.Environ(), guardEnv), g0.env...), guardEnv+"="+string(cfg))
	g.Stdin, g.Stdout, g.Stderr = os.Stdin, a.stdout, a.stderr
	g.ExtraFiles = []*os.File{ctlR, stW}
	// Its own process group: stopping lock run's job (Ctrl-Z, kill -STOP -PGID) does
	// not stop the guardian, which must stop the command when the lease ends.
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g.WaitDelay = time.Second // output the command's strays keep open is not waited for
	err = g.Start()
	ctlR.Close()
	stW.Close()
	if err != nil {
		stR.Close()
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	stopped := make(chan bool, 1) // whether the guardian stopped the command for the lease
	go func() {
		b, _ := io.ReadAll(stR)
		stR.Close()
		stopped <- strings.IndexByte(string(b), statusStopped) >= 0
	}()
	exited := make(chan error, 1)
	go func() { exited <- g.Wait() }()
	conts := make(chan os.Signal, 1)
	signal.Notify(conts, syscall.SIGCONT)
	defer signal.Stop(conts)

	lost, lostCh := false, kctx.Done()
	for {
		select {
		case s := <-sigs:
			_ = writeMsg(ctlW, msgSignal, int64(s.(syscall.Signal)))
		case <-lc.changed:
			_ = writeMsg(ctlW, msgEnd, clockAt(lc.End()))
		case <-conts:
			_ = writeMsg(ctlW, msgCont, 0)
		case <-lostCh:
			lostCh, lost = nil, true
			how := "SIGKILL"
			if grace > 0 {
				how = fmt.Sprintf("SIGTERM, SIGKILL after %v", grace)
			}
			fmt.Fprintf(a.stderr, "dcsync: lease on %q lost (%s); stopping %s (%s)\n", name, errorLine(context.Cause(kctx)), argv[0], how)
			_ = writeMsg(ctlW, msgLost, 0)
		case err := <-exited:
			if <-stopped {
				return withCode(exitNotOwner, fmt.Errorf("lease on %q was not renewed in time; %s was stopped before it ended", name, argv[0]))
			}
			if lost {
				return withCode(exitNotOwner, fmt.Errorf("lease on %q lost; %s was stopped", name, argv[0]))
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code := ee.ExitCode()
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					code = 128 + int(ws.Signal())
				}
				return &exitErr{code: code, err: err, quiet: true}
			}
			return err
		}
	}
}

// untilSignal runs take with a context that one of sigs cancels. When a signal came
// before or while take ran, it undoes what take got (if anything) and returns an
// interrupted error.
func untilSignal[T comparable](ctx context.Context, sigs chan os.Signal, take func(context.Context) (T, error), undo func(context.Context, T) error) (T, error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done, watched := make(chan struct{}), make(chan struct{})
	var got os.Signal
	go func() {
		defer close(watched)
		select {
		case got = <-sigs:
			cancel(&interrupted{got})
		case <-done:
		}
	}()
	v, err := take(actx)
	close(done)
	<-watched
	if got == nil {
		select {
		case got = <-sigs:
		default:
		}
	}
	var zero T
	if got != nil {
		if v != zero {
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = undo(rctx, v)
		}
		return zero, &interrupted{got}
	}
	return v, err
}

// lookCommand finds the command as a shell would, failing as a shell does: 127 when it
// is not found, 126 when it cannot be executed.
func lookCommand(name string) (string, error) {
	path, err := exec.LookPath(name)
	if errors.Is(err, exec.ErrDot) {
		err = nil // found through a relative PATH entry: a shell runs it too
	}
	if err == nil {
		return path, nil
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return "", withCode(exitNotFound, fmt.Errorf("%s: command not found", name))
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	return "", withCode(exitCannotExec, fmt.Errorf("%s: cannot execute: %w", name, err))
}

// withoutEnv returns env without the variable name.
func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
