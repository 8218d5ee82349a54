// Command dcsync takes distributed locks and works distributed latches from the shell.
//
//	dcsync lock acquire NAME [--level dc|xdc] [--ttl D] [--wait D]
//	dcsync lock release NAME --owner ID
//	dcsync lock status NAME
//	dcsync lock run NAME [--ttl D] [--wait D] -- CMD ARGS...
//	dcsync latch create NAME --count N [--ttl D]
//	dcsync latch countdown|countup|count NAME
//	dcsync latch await NAME [--timeout D]
//	dcsync demo
//
// The store is --store URL (env DCSYNC_STORE), by default a SQLite file in the user's
// state directory; the client and farm ids are --client and --farm (env DCSYNC_CLIENT,
// DCSYNC_FARM).
//
// Exit codes: 0 ok; 1 error (including not found); 2 usage or invalid input; 3 lock held
// by another; 4 wait or await timed out; 5 not the owner, or lease lost.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/storeurl"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitHeld     = 3
	exitTimeout  = 4
	exitNotOwner = 5
)

// exitErr carries an exit code up to main.
type exitErr struct {
	code  int
	err   error
	quiet bool // the code says it all (a child's exit status): print nothing
}

func (e *exitErr) Error() string { return e.err.Error() }
func (e *exitErr) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitErr{code: code, err: err}
}

// exitCode maps an error to the exit code the CLI documents.
func exitCode(err error) int {
	var e *exitErr
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &e):
		return e.code
	case errors.Is(err, context.DeadlineExceeded):
		return exitTimeout
	}
	switch dcsync.CodeOf(err) {
	case dcsync.InvalidArgument:
		return exitUsage
	case dcsync.LockUnavailable:
		return exitHeld
	case dcsync.LockLost:
		return exitNotOwner
	}
	return exitError
}

// app is the state shared by all commands.
type app struct {
	storeURL string
	client   string
	farm     string
	level    string
	stdout   io.Writer
	stderr   io.Writer
	store    dcsync.Store
}

func defaultStoreURL() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return "sqlite://" + filepath.Join(dir, "dcsync", "dcsync.db")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// open opens the store named by --store, creating the default file's directory.
func (a *app) open(ctx context.Context) (dcsync.Store, error) {
	if a.store != nil {
		return a.store, nil
	}
	if a.storeURL == defaultStoreURL() {
		dir := filepath.Dir(a.storeURL[len("sqlite://"):])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create state directory: %w", err)
		}
	}
	s, err := storeurl.Open(ctx, a.storeURL)
	if err != nil {
		return nil, err
	}
	a.store = s
	return s, nil
}

func (a *app) close() {
	if a.store != nil {
		a.store.Close()
		a.store = nil
	}
}

// setup checks the client id and --level and opens the store: what every lock and
// latch command needs first.
func (a *app) setup(ctx context.Context) (dcsync.Store, dcsync.Level, error) {
	if a.client == "" {
		return nil, 0, withCode(exitUsage, errors.New("no client id: pass --client or set DCSYNC_CLIENT"))
	}
	level, err := dcsync.ParseLevel(a.level)
	if err != nil {
		return nil, 0, err
	}
	s, err := a.open(ctx)
	return s, level, err
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "dcsync",
		Short: "Distributed locks and latches on SQLite, HBase or Aerospike",
		Long: `dcsync takes distributed locks (with leases and fencing tokens) and works
distributed count-down latches, in a store shared by processes, hosts and data centers.

Exit codes: 0 ok; 1 error (including not found); 2 usage or invalid input;
3 lock held by another; 4 wait or await timed out; 5 not the owner, or lease lost.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.storeURL, "store", envOr("DCSYNC_STORE", defaultStoreURL()), "store URL: sqlite://PATH or memory: (env DCSYNC_STORE)")
	pf.StringVar(&a.client, "client", os.Getenv("DCSYNC_CLIENT"), "client id: the application that owns locks and latches (env DCSYNC_CLIENT)")
	pf.StringVar(&a.farm, "farm", envOr("DCSYNC_FARM", "local"), "farm id: the data center this runs in (env DCSYNC_FARM)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return withCode(exitUsage, err) })
	root.AddCommand(newLockCmd(a), newLatchCmd(a), newDemoCmd(a))
	return root
}

// levelFlag adds --level to cmd.
func addLevelFlag(cmd *cobra.Command, a *app) {
	cmd.Flags().StringVar(&a.level, "level", "dc", "dc (this farm) or xdc (all farms)")
}

func run(args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	defer a.close()
	root := newRoot(a)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	if err != nil {
		code := exitCode(err)
		if code == exitError && isUsage(err) {
			code = exitUsage
		}
		var e *exitErr
		if !errors.As(err, &e) || !e.quiet {
			fmt.Fprintln(stderr, "dcsync:", err)
		}
		return code
	}
	return exitOK
}

// isUsage recognises cobra's own argument errors.
func isUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires ", "unknown flag", "unknown shorthand", "required flag", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// remaining formats the time until t, rounded to the millisecond.
// remaining renders the time left until t; a zero t (a lease whose end the store cannot
// know, such as a lock a Java client holds) is "unknown".
func remaining(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return time.Until(t).Round(time.Millisecond).String()
}
