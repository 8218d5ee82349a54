package drivertest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcsync/dcsync/driver"
)

// Environment of a child process of the suite.
const (
	envRole  = "DCSYNC_DRIVERTEST_CHILD"
	envName  = "DCSYNC_DRIVERTEST_NAME"
	envN     = "DCSYNC_DRIVERTEST_N"
	envIndex = "DCSYNC_DRIVERTEST_INDEX"
	envFarm  = "DCSYNC_DRIVERTEST_FARM"
	envArg   = "DCSYNC_DRIVERTEST_ARG"
)

// ChildMain runs a child process's part of the multi-process cases, then exits. Call it
// first thing in the store's TestMain; it returns at once in the parent test process.
// open opens the store from the environment that Harness.ProcessEnv supplied.
func ChildMain(open func(ctx context.Context) (driver.Store, error)) {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := runChild(ctx, role, open)
	if err != nil {
		fmt.Fprintf(os.Stderr, "drivertest child %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childEnv is what a child reads from its environment.
type childEnv struct {
	name     string
	n, index int
	farm     string // Harness.Farm for even indexes, OtherFarm for odd ones
	arg      string
}

func runChild(ctx context.Context, role string, open func(ctx context.Context) (driver.Store, error)) error {
	s, err := open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	var env childEnv
	env.name, env.farm, env.arg = os.Getenv(envName), os.Getenv(envFarm), os.Getenv(envArg)
	if env.n, err = strconv.Atoi(os.Getenv(envN)); err != nil {
		return err
	}
	if env.index, err = strconv.Atoi(os.Getenv(envIndex)); err != nil {
		return err
	}
	if f := childRoles[role]; f != nil {
		return f(ctx, s, env)
	}
	return fmt.Errorf("unknown role %q", role)
}

// childRoles are what a child process can do, by role.
var childRoles = map[string]func(ctx context.Context, s driver.Store, env childEnv) error{
	"latch":     childLatch,   // lock_latch_processes.go
	"lock":      childLock,    // lock_latch_processes.go
	"append":    childAppend,  // queue_concurrency.go
	"produce":   childProduce, // queue_front_processes.go
	"consume":   childConsume,
	"hold":      childHold,
	"pause":     childPause,
	"elect":     childElect,  // election.go
	"rwlock":    childRWLock, // rwlock.go
	"rwread":    childRWRead,
	"semaphore": childSemaphore, // semaphore.go
	"semhold":   childSemaphoreHold,
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	out   *syncBuilder
	stdin io.WriteCloser
	wait  func() error // waits for the exit; nil error for exit status 0
}

type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuilder) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuilder) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startChild starts a child of the test binary in role; the test kills it if it is
// still running when the test ends.
func startChild(t *testing.T, h Harness, role, name string, n, index int, arg string) *child {
	t.Helper()
	env := append(os.Environ(), h.ProcessEnv(t)...)
	farm := h.Farm
	if index%2 == 1 {
		farm = h.OtherFarm
	}
	env = append(env, envRole+"="+role, envName+"="+name, envN+"="+strconv.Itoa(n), envIndex+"="+strconv.Itoa(index),
		envFarm+"="+farm, envArg+"="+arg)
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$"), out: &syncBuilder{}}
	c.cmd.Env = env
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	stdin, err := c.cmd.StdinPipe()
	must(t, err, "child stdin")
	c.stdin = stdin
	must(t, c.cmd.Start(), "start child")
	done := make(chan struct{})
	go func() {
		_ = c.cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = c.cmd.Process.Kill()
			<-done
		}
	})
	c.wait = func() error {
		<-done
		if c.cmd.ProcessState.Success() {
			return nil
		}
		return fmt.Errorf("%v\n%s", c.cmd.ProcessState, c.out)
	}
	return c
}

// spawn runs procs children in role and waits for all of them.
func spawn(t *testing.T, h Harness, procs int, role, name string, n int, arg string) {
	t.Helper()
	cs := make([]*child, procs)
	for i := range cs {
		cs[i] = startChild(t, h, role, name, n, i, arg)
	}
	for i, c := range cs {
		if err := c.wait(); err != nil {
			t.Fatalf("child %d (%s): %v", i, role, err)
		}
	}
}
