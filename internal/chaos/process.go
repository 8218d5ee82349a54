package chaos

import (
	"context"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// proc is a worker's child process: its command, its stdin (closing it asks the worker
// to stop) and done, closed once it has exited and its output is read.
type proc struct {
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{}
}

func (p *proc) process() *proc { return p }

// pause stops p for d (SIGSTOP, then SIGCONT), as a long GC pause or a stalled machine
// would.
func (p *proc) pause(d time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	sleep(context.Background(), d)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
}

// kill kills p and waits until it has exited.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stopProcs asks every process of all to stop (resumed, should it be paused, and its
// stdin closed) and waits until each has exited, killing one still running after 30 s.
func stopProcs[P interface{ process() *proc }](all []P) {
	for _, c := range all {
		p := c.process()
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.stdin.Close()
	}
	for _, c := range all {
		p := c.process()
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.kill()
		}
	}
}
