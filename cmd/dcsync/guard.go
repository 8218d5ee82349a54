//go:build linux || darwin || freebsd || openbsd

package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// `dcsync lock run` does not run the command itself. It starts a guardian, a second copy
// of this program, that runs the command in a process group of its own and is the one
// to stop it:
//
//	dcsync lock run (the shell's job: holds the lease, renews it, forwards signals)
//	  └─ guardian (a process group of its own; a child subreaper on Linux)
//	       └─ CMD and its children (their own process group; the terminal's
//	          foreground group when lock run is in the foreground)
//
// lock run tells the guardian, through a pipe, when the lease must be treated as over
// (after every renewal), which signals to forward, that the lease is lost, and that the
// job was continued after a stop. The guardian stops the whole group by itself when the
// lease's end comes (SIGTERM --kill-after before it, SIGKILL at it), so the command is
// stopped in time even when lock run is paused (SIGSTOP of lock run or of its whole
// process group, a stalled VM) and cannot renew. When lock run dies in any way (SIGKILL,
// the OOM killer) the kernel closes the pipe and the guardian kills the group at once.
// When the command exits, what it left in its group is stopped before lock run releases
// the lock. A process that leaves the group (setsid: a daemon) is not followed; if the
// guardian itself is killed with SIGKILL, the command dies with it (its parent-death
// signal, on Linux) but the command's own children are not stopped.

// guardEnv carries the guardian's configuration (JSON) and marks a process as one.
const guardEnv = "DCSYNC_LOCK_RUN_GUARD"

// guardConfig is what lock run tells the guardian at start.
type guardConfig struct {
	Path  string        // the command's binary
	Args  []string      // its argv, Args[0] as the user gave it
	Lock  string        // the lock's name, for messages
	Grace time.Duration // SIGTERM this long before SIGKILL; 0: SIGKILL only
	End   int64         // when the lease must be treated as over, by clockNow
	Job   int           // lock run's process group: the shell's job
}

// Messages from lock run to the guardian: 16 bytes, kind then a little-endian int64 at 8.
const (
	msgEnd    = 'E' // the lease's end moved (a renewal): the value, by clockNow
	msgSignal = 'S' // send the value's signal to the command's group
	msgLost   = 'L' // the lease is lost: stop the command now
	msgCont   = 'C' // lock run was continued (SIGCONT): continue a suspended command
)

// statusStopped is the byte the guardian writes to lock run when it starts stopping the
// command because the lease is about to end unrenewed.
const statusStopped = 's'

func writeMsg(w io.Writer, kind byte, v int64) error {
	var b [16]byte
	b[0] = kind
	binary.LittleEndian.PutUint64(b[8:], uint64(v))
	_, err := w.Write(b[:])
	return err
}

type guardMsg struct {
	kind byte
	v    int64
}

type waitEvent struct {
	pid int
	ws  syscall.WaitStatus
}

// guard is the guardian's state.
type guard struct {
	cfg    guardConfig
	status *os.File // to lock run
	tty    *os.File // the controlling terminal, or nil
	pgid   int      // the command's process group (its pid)
	msgs   chan guardMsg

	end       int64 // when the lease must be treated as over
	stopping  bool  // SIGTERM (or SIGKILL) sent
	killAt    int64 // when to send SIGKILL, once stopping
	killed    bool  // SIGKILL sent
	orphaned  bool  // lock run is gone
	suspended bool  // the command stopped for job control and lock run's job with it
}

// guardMain runs the guardian; it returns the command's exit code, 128+signal when a
// signal ended it, 126 or 127 when it could not be started.
func guardMain() int {
	// The command's parent-death signal follows the thread that forked it: keep the
	// main goroutine on one thread for the guardian's whole life.
	runtime.LockOSThread()
	var cfg guardConfig
	err := json.Unmarshal([]byte(os.Getenv(guardEnv)), &cfg)
	os.Unsetenv(guardEnv)
	if err != nil || len(cfg.Args) == 0 {
		fmt.Fprintln(os.Stderr, "dcsync: lock run guard: bad configuration:", err)
		return exitError
	}
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	g := &guard{cfg: cfg, status: os.NewFile(4, "lock run status"), end: cfg.End}
	return g.run(os.NewFile(3, "lock run control"))
}

func (g *guard) run(ctl *os.File) int {
	becomeSubreaper()
	// Signals for the command reach it from the terminal or through lock run; one sent
	// to the guardian itself is not acted on. Catching them, not ignoring them, leaves
	// the command's dispositions at their defaults. SIGPIPE: a closed stderr must not
	// kill the guardian.
	ignored := make(chan os.Signal, 8)
	signal.Notify(ignored, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)

	// On a terminal, with lock run in the foreground: the command's group becomes the
	// foreground group, so that it reads the terminal and gets Ctrl-C, Ctrl-\ and Ctrl-Z
	// from it directly (lock run and the guardian get none of them: a Ctrl-C reaches
	// the command once).
	fg := false
	if tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0); err == nil {
		g.tty = tty
		fg = foreground(tty) == g.cfg.Job
	}
	ctty := 0
	if fg {
		ctty = int(g.tty.Fd())
	}
	pid, err := syscall.ForkExec(g.cfg.Path, g.cfg.Args, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   commandAttr(fg, ctty),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dcsync: %s: %v\n", g.cfg.Args[0], err)
		if errors.Is(err, syscall.ENOENT) {
			return exitNotFound
		}
		return exitCannotExec
	}
	g.pgid = pid

	waits := make(chan waitEvent, 16)
	go func() {
		defer close(waits)
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, syscall.WUNTRACED, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil { // ECHILD: no child left
				return
			}
			waits <- waitEvent{p, ws}
		}
	}()
	g.msgs = make(chan guardMsg, 16)
	go func() {
		defer close(g.msgs)
		var b [16]byte
		for {
			if _, err := io.ReadFull(ctl, b[:]); err != nil {
				return // lock run is gone
			}
			g.msgs <- guardMsg{b[0], int64(binary.LittleEndian.Uint64(b[8:]))}
		}
	}()

	code, exited := 0, false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := clockNow()
		if !g.stopping && now >= g.end-int64(g.cfg.Grace) {
			// The guardian may have been descheduled: a renewal lock run reported
			// meanwhile is read before the lease is given up.
			if g.readPending(20*time.Millisecond, exited) {
				continue
			}
			// The lease was not renewed and is about to end: stop the command so that
			// it is gone when the lease ends.
			_, _ = g.status.Write([]byte{statusStopped})
			how := "SIGKILL"
			if g.cfg.Grace > 0 && now < g.end {
				how = fmt.Sprintf("SIGTERM, then SIGKILL in %v", time.Duration(g.end-now).Round(time.Millisecond))
			}
			fmt.Fprintf(os.Stderr, "dcsync: lease on %q was not renewed in time; stopping %s before it ends (%s)\n",
				g.cfg.Lock, g.cfg.Args[0], how)
			g.stop(now, g.end)
		}
		if g.stopping && !g.killed && now >= g.killAt {
			g.kill()
		}
		if exited {
			if groupGone(g.pgid) {
				g.restoreTerminal()
				return code
			}
			if !g.stopping {
				// The command exited and left processes in its group: they would run
				// on without the lock once it is released.
				g.stop(now, min(now+int64(g.cfg.Grace), g.end))
			}
		}

		wake := now + int64(time.Second)
		if !g.stopping {
			wake = min(wake, g.end-int64(g.cfg.Grace))
		} else if !g.killed {
			wake = min(wake, g.killAt)
		}
		if exited {
			wake = min(wake, now+int64(20*time.Millisecond)) // poll the group
		}
		timer.Reset(time.Duration(max(wake-now, 0)))

		select {
		case m, ok := <-g.msgs:
			g.handle(m, ok, exited)
		case ev, ok := <-waits:
			if !ok {
				waits = nil
				continue
			}
			if ev.pid != g.pgid {
				continue // an orphan of the command's, reaped
			}
			switch {
			case ev.ws.Stopped():
				g.suspend(ev.ws.StopSignal())
			case ev.ws.Signaled():
				exited, code = true, 128+int(ev.ws.Signal())
			default:
				exited, code = true, ev.ws.ExitStatus()
			}
		case <-ignored:
		case <-timer.C:
		}
	}
}

// readPending handles the messages lock run has sent, waiting up to d for the first;
// it reports whether there was any.
func (g *guard) readPending(d time.Duration, exited bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	got := false
	for {
		select {
		case m, ok := <-g.msgs:
			g.handle(m, ok, exited)
			got = true
			if !ok {
				return true
			}
			t.Reset(0) // take what else is queued, without waiting again
		case <-t.C:
			return got
		}
	}
}

// handle acts on one message from lock run; !ok means the pipe ended: lock run is gone.
func (g *guard) handle(m guardMsg, ok, exited bool) {
	now := clockNow()
	if !ok {
		g.msgs = nil
		g.orphaned = true
		if !exited {
			fmt.Fprintf(os.Stderr, "dcsync: lock run ended while %s ran; killing it\n", g.cfg.Args[0])
		}
		g.stopping, g.killAt = true, now
		g.kill()
		return
	}
	switch m.kind {
	case msgEnd:
		g.end = m.v
	case msgSignal:
		g.signal(syscall.Signal(m.v))
	case msgLost:
		if !g.stopping {
			g.stop(now, min(now+int64(g.cfg.Grace), g.end))
		} else {
			g.killAt = min(g.killAt, now+int64(g.cfg.Grace))
		}
	case msgCont:
		g.resume()
	}
}

// stop sends SIGTERM to the command's group now and schedules SIGKILL at killAt (at
// once without a grace period, or when killAt has come).
func (g *guard) stop(now, killAt int64) {
	g.stopping, g.killAt = true, killAt
	if g.cfg.Grace <= 0 || killAt <= now {
		g.kill()
		return
	}
	g.signal(syscall.SIGTERM)
	g.signal(syscall.SIGCONT) // a stopped process cannot act on SIGTERM
}

func (g *guard) kill() {
	g.signal(syscall.SIGKILL)
	g.killed = true
}

func (g *guard) signal(s syscall.Signal) { _ = syscall.Kill(-g.pgid, s) }

// suspend follows a job-control stop of the command (Ctrl-Z, or reading the terminal
// from the background) the way a shell's job would: it gives the terminal back to lock
// run's process group and stops that group with the same signal, so that the shell
// sees the job stopped. Other stops are left alone. The lease keeps running meanwhile:
// if it ends before the job is continued, the command is killed.
func (g *guard) suspend(s syscall.Signal) {
	if g.tty == nil || g.orphaned || (s != syscall.SIGTSTP && s != syscall.SIGTTIN && s != syscall.SIGTTOU) {
		return
	}
	if foreground(g.tty) == g.pgid {
		setForeground(g.tty, g.cfg.Job)
	}
	g.suspended = true
	_ = syscall.Kill(-g.cfg.Job, s)
}

// resume continues a suspended command when lock run's job is continued (fg, bg): in
// the foreground again if the job is.
func (g *guard) resume() {
	if !g.suspended {
		return
	}
	g.suspended = false
	if g.stopping {
		g.signal(syscall.SIGCONT)
		return
	}
	if g.tty != nil && foreground(g.tty) == g.cfg.Job {
		setForeground(g.tty, g.pgid)
	}
	g.signal(syscall.SIGCONT)
}

// restoreTerminal gives the terminal back to lock run's group if the command had it.
func (g *guard) restoreTerminal() {
	if g.tty != nil && foreground(g.tty) == g.pgid {
		setForeground(g.tty, g.cfg.Job)
	}
}

// groupGone reports whether no process is left in process group pgid.
func groupGone(pgid int) bool { return syscall.Kill(-pgid, 0) == syscall.ESRCH }

// foreground returns the terminal's foreground process group, or -1.
func foreground(tty *os.File) int {
	pg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	if err != nil {
		return -1
	}
	return pg
}

// setForeground makes pgid the terminal's foreground group. A background process may
// do so only with SIGTTOU ignored or blocked.
func setForeground(tty *os.File, pgid int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(int(tty.Fd()), unix.TIOCSPGRP, pgid)
}
