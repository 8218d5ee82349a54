package queuetest

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
	envRole  = "DCSYNC_QUEUETEST_CHILD"
	envName  = "DCSYNC_QUEUETEST_NAME"
	envN     = "DCSYNC_QUEUETEST_N"
	envIndex = "DCSYNC_QUEUETEST_INDEX"
	envArg   = "DCSYNC_QUEUETEST_ARG"
)

// ChildMain runs a child process's part of the multi-process cases, then exits. Call it
// first thing in the store's TestMain; it returns at once in the parent test process.
// open opens the store from the environment that Harness.ProcessEnv supplied.
func ChildMain(open func(ctx context.Context) (QueueTestStore, error)) {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := runChild(ctx, role, open)
	if err != nil {
		fmt.Fprintf(os.Stderr, "queuetest child %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childEnv is what a child reads from its environment.
type childEnv struct {
	name     string
	n, index int
	arg      string
}

func runChild(ctx context.Context, role string, open func(ctx context.Context) (QueueTestStore, error)) error {
	s, err := open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	var env childEnv
	env.name, env.arg = os.Getenv(envName), os.Getenv(envArg)
	if env.n, err = strconv.Atoi(os.Getenv(envN)); err != nil {
		return err
	}
	if env.index, err = strconv.Atoi(os.Getenv(envIndex)); err != nil {
		return err
	}
	if role == "append" {
		return childAppend(ctx, s, env)
	}
	if f := frontChildRoles[role]; f != nil {
		return f(ctx, s, env)
	}
	return fmt.Errorf("unknown role %q", role)
}

// frontChildRoles are the roles of the front-end cases.
var frontChildRoles = map[string]func(ctx context.Context, s QueueTestStore, env childEnv) error{}

// childAppend appends n events with ids of its own and n with ids every child shares,
// in batches, then appends its own ids again and checks each is a duplicate of the
// first append.
func childAppend(ctx context.Context, s QueueTestStore, env childEnv) error {
	spec, err := s.ReadQueueSpec(ctx, env.name)
	if err != nil {
		return err
	}
	var events []driver.QueueEvent
	for i := range env.n {
		own := fmt.Sprintf("c%d-%d", env.index, i)
		shared := fmt.Sprintf("shared-%d", (i+env.index*7)%env.n)
		events = append(events,
			driver.QueueEvent{Partition: i % spec.Partitions, ID: own, Payload: []byte(own)},
			driver.QueueEvent{Partition: (i + env.index) % spec.Partitions, ID: shared, Payload: []byte(shared)})
	}
	first := map[string]driver.QueueAppend{}
	appendAll := func(events []driver.QueueEvent, check bool) error {
		for len(events) > 0 {
			n := min(len(events), 7)
			res, err := s.AppendQueue(ctx, env.name, events[:n])
			if err != nil {
				return err
			}
			for i, r := range res {
				id := events[i].ID
				if !check {
					if _, dup := first[id]; !dup {
						first[id] = r
					}
					continue
				}
				want := first[id]
				if !r.Duplicate || r.Partition != want.Partition || r.Seq != want.Seq {
					return fmt.Errorf("re-append of %s = %+v, want a duplicate of %+v", id, r, want)
				}
			}
			events = events[n:]
		}
		return nil
	}
	if err := appendAll(events, false); err != nil {
		return err
	}
	var own []driver.QueueEvent
	for _, e := range events {
		if strings.HasPrefix(e.ID, "c") {
			e.Partition = (e.Partition + 1) % spec.Partitions
			own = append(own, e)
		}
	}
	return appendAll(own, true)
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
	env = append(env, envRole+"="+role, envName+"="+name, envN+"="+strconv.Itoa(n), envIndex+"="+strconv.Itoa(index), envArg+"="+arg)
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

func runStoreProcesses(t *testing.T, h Harness) {
	t.Run("AppendIsExactAcrossProcesses", func(t *testing.T) {
		s := h.open(t)
		ctx := ctxT(t, 3*time.Minute)
		const procs, each, parts = 4, 40, 3
		spec := create(t, ctx, s, parts, "g")
		spawn(t, h, procs, "append", spec.Name, each, "")
		at := checkDense(t, ctx, s, spec.Name, parts)
		if len(at) != procs*each+each {
			t.Fatalf("%d processes appended %d own ids and %d shared ones each: %d events stored, want %d", procs, each, each, len(at), procs*each+each)
		}
		for c := range procs {
			for i := range each {
				if _, ok := at[fmt.Sprintf("c%d-%d", c, i)]; !ok {
					t.Fatalf("event c%d-%d missing", c, i)
				}
			}
		}
		for i := range each {
			if _, ok := at[fmt.Sprintf("shared-%d", i)]; !ok {
				t.Fatalf("event shared-%d missing", i)
			}
		}
	})
}
