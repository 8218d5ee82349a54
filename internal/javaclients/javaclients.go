// Package javaclients drives testenv/javaclients from Go tests: a long-running Java
// process that performs exactly the operations of the public Java lock library (PhonePe
// DLM) and latch library (PhonePe DistributedLatch) on the real HBase and Aerospike Java
// clients. Each request is one JSON line on the tool's stdin and each reply one JSON line
// on its stdout, matched by id, so many operations (also concurrent ones) cost one JVM.
//
// The tool is built with Maven on first use (testenv/javaclients/javaclients). Tests get
// a running tool from Require, which skips the test when Java, Maven or the tool is not
// available, or fails it when CI=true.
//
// Why it exists: it is the interop witness: storage compatibility with the Java libraries
// is claimed only as far as tests run their exact operations against dcsync's on the same
// tables and sets. It is internal because it drives a tool of this repository
// (testenv/javaclients) for this repository's store tests; only tests and the other test
// harnesses may import it (internal/archtest enforces that).
package javaclients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Config says which servers the tool talks to. Empty fields leave that store unusable
// (its requests fail).
type Config struct {
	// HBaseZK is the ZooKeeper quorum host:port of the HBase cluster.
	HBaseZK string
	// Aerospike is a seed node host:port of the Aerospike cluster.
	Aerospike string
	// AerospikeNamespace is the default namespace of Aerospike requests ("test" if empty).
	AerospikeNamespace string
	// Root is the repository root (found from the working directory if empty).
	Root string
}

// Tool is a running testenv/javaclients process. Its methods are safe for concurrent use.
type Tool struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
	done   chan struct{} // closed when the reader has seen stdout end

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan reply
	err     error // set when the tool died or was closed
	closed  bool
}

type reply struct {
	ID      *int64          `json:"id"`
	OK      bool            `json:"ok"`
	Ready   bool            `json:"ready"`
	Result  json.RawMessage `json:"result"`
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Causes  []Cause         `json:"causes"`
}

// Cause is one exception of a failure's cause chain, outermost first.
type Cause struct {
	Class      string `json:"class"`
	Message    string `json:"message"`
	ResultCode *int   `json:"resultCode"` // Aerospike result code, for an AerospikeException
	InDoubt    bool   `json:"inDoubt"`
}

// Error is an operation the Java library failed. Code is the library's ErrorCode
// (LOCK_UNAVAILABLE, CONNECTION_ERROR, INTERNAL_ERROR, RETRIES_EXHAUSTED,
// TABLE_CREATION_ERROR) or, for an exception the library lets through, its class name.
type Error struct {
	Op      string
	Code    string
	Message string
	Causes  []Cause
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "java %s: %s: %s", e.Op, e.Code, e.Message)
	for _, c := range e.Causes[min(1, len(e.Causes)):] {
		fmt.Fprintf(&b, " <- %s: %s", c.Class, c.Message)
		if c.ResultCode != nil {
			fmt.Fprintf(&b, " (result code %d)", *c.ResultCode)
		}
	}
	return b.String()
}

// Unavailable reports whether the lock was held by someone else (LOCK_UNAVAILABLE).
func (e *Error) Unavailable() bool { return e.Code == "LOCK_UNAVAILABLE" }

// Missing reports whether the failure is the libraries' reaction to a latch that does not
// exist: both read paths dereference the missing row or record (NullPointerException).
func (e *Error) Missing() bool {
	for _, c := range e.Causes {
		if c.Class == "java.lang.NullPointerException" {
			return true
		}
	}
	return false
}

// ResultCode returns the Aerospike result code of the innermost AerospikeException.
func (e *Error) ResultCode() (int, bool) {
	for i := len(e.Causes) - 1; i >= 0; i-- {
		if rc := e.Causes[i].ResultCode; rc != nil {
			return *rc, true
		}
	}
	return 0, false
}

// FindRoot returns the repository root: the nearest directory at or above the working
// directory holding testenv/javaclients/javaclients.
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "testenv", "javaclients", "javaclients")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("javaclients: testenv/javaclients not found above the working directory")
		}
		dir = parent
	}
}

// Build builds the tool if it is stale (Maven; minutes on a cold cache) and returns the
// build's output on failure.
func Build(ctx context.Context, root string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "testenv", "javaclients", "javaclients"), "build")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("javaclients build: %v\n%s", err, out.String())
	}
	return nil
}

// Start builds the tool if needed, starts it and waits until it reads requests. ctx
// bounds the build and the start only.
func Start(ctx context.Context, cfg Config) (*Tool, error) {
	root := cfg.Root
	if root == "" {
		var err error
		if root, err = FindRoot(); err != nil {
			return nil, err
		}
	}
	if err := Build(ctx, root); err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(root, "testenv", "javaclients", "javaclients"), "serve")
	cmd.Env = append(os.Environ(),
		"DCSYNC_HBASE_ZK="+cfg.HBaseZK,
		"DCSYNC_AEROSPIKE="+cfg.Aerospike,
		"DCSYNC_AEROSPIKE_NAMESPACE="+cfg.AerospikeNamespace)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	t := &Tool{cmd: cmd, stdin: stdin, stderr: &tailBuffer{max: 64 << 10}, done: make(chan struct{}),
		pending: map[int64]chan reply{}}
	cmd.Stderr = t.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("javaclients: start: %w", err)
	}
	ready := make(chan error, 1)
	go t.read(stdout, ready)
	select {
	case err := <-ready:
		if err != nil {
			_ = t.Close()
			return nil, err
		}
	case <-ctx.Done():
		_ = t.Close()
		return nil, fmt.Errorf("javaclients: not ready: %w\n%s", ctx.Err(), t.stderr.String())
	}
	return t, nil
}

// read dispatches replies to their callers until stdout ends.
func (t *Tool) read(stdout io.Reader, ready chan<- error) {
	defer close(t.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	first := true
	for sc.Scan() {
		var r reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			if first {
				ready <- fmt.Errorf("javaclients: bad first line %q: %v\n%s", sc.Text(), err, t.stderr.String())
				first = false
			}
			continue
		}
		if first {
			first = false
			if !r.Ready {
				ready <- fmt.Errorf("javaclients: first line %q is not the ready line", sc.Text())
				continue
			}
			ready <- nil
			continue
		}
		if r.ID == nil {
			continue
		}
		t.mu.Lock()
		ch := t.pending[*r.ID]
		delete(t.pending, *r.ID)
		t.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	if first {
		ready <- fmt.Errorf("javaclients: the tool ended before it was ready\n%s", t.stderr.String())
	}
	t.mu.Lock()
	if t.err == nil {
		t.err = fmt.Errorf("javaclients: the tool's output ended\n%s", t.stderr.String())
	}
	for id, ch := range t.pending {
		close(ch)
		delete(t.pending, id)
	}
	t.mu.Unlock()
}

// Call sends one request (its "op" and fields) and returns the result, or an *Error
// when the Java library failed the operation, or another error when the tool did.
func (t *Tool) Call(ctx context.Context, op string, fields map[string]any) (json.RawMessage, error) {
	req := make(map[string]any, len(fields)+2)
	for k, v := range fields {
		req[k] = v
	}
	ch := make(chan reply, 1)
	t.mu.Lock()
	if t.err != nil {
		err := t.err
		t.mu.Unlock()
		return nil, err
	}
	t.nextID++
	id := t.nextID
	t.pending[id] = ch
	req["id"], req["op"] = id, op
	line, err := json.Marshal(req)
	if err == nil {
		_, err = t.stdin.Write(append(line, '\n'))
	}
	if err != nil {
		delete(t.pending, id)
		t.mu.Unlock()
		return nil, fmt.Errorf("javaclients %s: send: %w", op, err)
	}
	t.mu.Unlock()
	select {
	case r, ok := <-ch:
		if !ok {
			t.mu.Lock()
			err := t.err
			t.mu.Unlock()
			return nil, fmt.Errorf("javaclients %s: %w", op, err)
		}
		if !r.OK {
			return nil, &Error{Op: op, Code: r.Code, Message: r.Message, Causes: r.Causes}
		}
		return r.Result, nil
	case <-ctx.Done():
		t.mu.Lock()
		delete(t.pending, id)
		t.mu.Unlock()
		return nil, fmt.Errorf("javaclients %s: %w", op, ctx.Err())
	}
}

// Stderr returns the tail of the tool's standard error (its log).
func (t *Tool) Stderr() string { return t.stderr.String() }

// Close ends the tool: it closes its stdin, lets requests in flight finish for a while,
// then kills it, and waits for it and the reader to end.
func (t *Tool) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	if t.err == nil {
		t.err = errors.New("javaclients: closed")
	}
	t.mu.Unlock()
	_ = t.stdin.Close()
	select {
	case <-t.done:
	case <-time.After(30 * time.Second):
		_ = t.cmd.Process.Kill()
		<-t.done
	}
	err := t.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("javaclients: %v\n%s", err, t.stderr.String())
	}
	return err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.max {
		w.b = append([]byte(nil), w.b[len(w.b)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
