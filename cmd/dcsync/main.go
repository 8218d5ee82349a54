// Command dcsync takes distributed locks, works distributed latches and runs queues from
// the shell.
//
//	dcsync lock acquire NAME [--level dc|xdc] [--ttl D] [--wait D] [--fair] [--json]
//	dcsync lock release NAME (--owner ID | --force)
//	dcsync lock refresh NAME --owner ID [--ttl D]
//	dcsync lock status NAME [--json]
//	dcsync lock list [--json]
//	dcsync lock run NAME [--ttl D] [--wait D] [--fair] [--kill-after D] [--conflict-exit-code N] -- CMD ARGS...
//	dcsync rwlock run NAME (--read | --write) [--ttl D] [--wait D] [--readers N] [--kill-after D] [--conflict-exit-code N] -- CMD ARGS...
//	dcsync rwlock status NAME [--json]
//	dcsync rwlock list [--json]
//	dcsync latch create NAME --count N [--ttl D]
//	dcsync latch countdown|countup NAME [--json]
//	dcsync latch count NAME [--json]
//	dcsync latch list [--level dc|xdc] [--json]
//	dcsync latch delete NAME [--level dc|xdc]
//	dcsync latch await NAME [--timeout D] [--poll D]
//	dcsync election campaign NAME --value V [--level dc|xdc] [--ttl D] [--kill-after D] -- CMD ARGS...
//	dcsync election leader NAME [--level dc|xdc] [--json]
//	dcsync election observe NAME [--level dc|xdc] [--poll D] [--count N] [--json]
//	dcsync election list [--json]
//	dcsync semaphore acquire NAME --permits N [-n K] [--level dc|xdc] [--ttl D] [--wait D] [--json]
//	dcsync semaphore release NAME --owner ID [--owner ID ...]
//	dcsync semaphore status NAME [--json]
//	dcsync semaphore list [--json]
//	dcsync semaphore resize NAME --permits N [--timeout D]
//	dcsync semaphore run NAME --permits N [-n K] [--ttl D] [--wait D] [--kill-after D] [--conflict-exit-code N] -- CMD ARGS...
//	dcsync queue create NAME --partitions N --group G [--group G2 ...] [--dedup D]
//	dcsync queue send NAME [--key K] [--id-prefix P] [--json]   (lines of stdin)
//	dcsync queue receive NAME --group G [--max N] [--follow] [--no-ack] [--timeout D] [--json]
//	dcsync queue lag NAME [--group G] [--json]
//	dcsync queue dead NAME --group G [--max N] [--ack] [--json]
//	dcsync bench [--duration D] [--poll D] [--json]
//	dcsync demo
//	dcsync version (or dcsync --version)
//
// The store is --store URL (env DCSYNC_STORE): sqlite://PATH, memory:, hbase://... or
// aerospike://...; by default a SQLite file in the user's state directory, which is per
// user: two users of one host do not exclude each other unless they name one file. The
// client and farm ids are --client and --farm (env DCSYNC_CLIENT, DCSYNC_FARM).
//
// Exit codes: 0 ok; 1 error (including not found); 2 usage or invalid input; 3 lock held
// by another; 4 wait or await timed out; 5 not the owner, or lease lost; 6 not
// authenticated (the store refused the credentials, or the server's certificate was
// refused); 128+N stopped by signal N (130 for SIGINT). lock run exits with its command's code, 127 when the
// command is not found and 126 when it cannot be executed.
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
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/storeurl"
)

// Exit codes.
const (
	exitOK         = 0
	exitError      = 1
	exitUsage      = 2
	exitHeld       = 3
	exitTimeout    = 4
	exitNotOwner   = 5
	exitAuth       = 6   // the store refused the credentials, or the client the server's certificate
	exitCannotExec = 126 // lock run: the command cannot be executed
	exitNotFound   = 127 // lock run: the command is not found
)

// interrupted is the error of a command ended by a signal; its exit code is 128+signal,
// as shells report a process a signal ended.
type interrupted struct{ sig os.Signal }

func (e *interrupted) Error() string { return "interrupted by " + signalName(e.sig) }

func (e *interrupted) code() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitError
}

// signalName names the signals dcsync handles as a shell user knows them.
func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

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
	var in *interrupted
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &e):
		return e.code
	case errors.As(err, &in):
		return in.code()
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
	case dcsync.Unauthenticated:
		return exitAuth
	}
	return exitError
}

// app is the state shared by all commands.
type app struct {
	storeURL string
	client   string
	farm     string
	level    string
	verbose  bool // --verbose: errors with call paths
	stdout   io.Writer
	stderr   io.Writer
	store    driver.Store
}

// defaultStoreURL is the store of a user who names none: a SQLite file in their state
// directory. It is per user: see the root command's help.
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
func (a *app) open(ctx context.Context) (driver.Store, error) {
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
func (a *app) setup(ctx context.Context) (driver.Store, dcsync.Level, error) {
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
		Long: `dcsync takes distributed locks (with leases and fencing tokens), works
distributed count-down latches and runs partitioned queues with consumer groups, in a
store shared by processes, hosts and data centers.

The store is --store URL (env DCSYNC_STORE):
  sqlite://PATH                        a SQLite file: processes of one host
  memory:                              this process only (nothing is shared)
  hbase://ZK_HOST:PORT[,ZK_HOST:PORT]  HBase through its ZooKeeper quorum
                                       (?lock_table=&latch_table_suffix=&queue_table=&zk_root=&open_timeout=)
  aerospike://[USER@]HOST:PORT/NAMESPACE  Aerospike (?latch_set_suffix=&lock_set_suffix=
                                       &attempts=&retry_delay=&timeout=&op_ids_kept=;
                                       TLS: &tls_ca=&tls_name=&tls_cert=&tls_key=;
                                       &auth=internal|external|pki&password_file=)
A store URL holds no secret: a password in it is refused. The Aerospike password comes
from $DCSYNC_AEROSPIKE_PASSWORD, a file named by $DCSYNC_AEROSPIKE_PASSWORD_FILE or
?password_file= (mode 600: a file others may read is refused).
The default store is per user: a SQLite file in the state directory of the user who
runs dcsync ($XDG_STATE_HOME/dcsync/dcsync.db, else ~/.local/state/dcsync/dcsync.db).
A root cron job and an operator on the same host use two files and so do not exclude
each other. For locks shared by every user of a host, give them all one file in a
directory they can all write, e.g. --store sqlite:///var/lib/dcsync/dcsync.db (or set
DCSYNC_STORE in their environment).

Exit codes: 0 ok; 1 error (including not found); 2 usage or invalid input;
3 lock held by another; 4 wait or await timed out; 5 not the owner, or lease lost;
6 not authenticated (credentials or the server's certificate refused);
128+N stopped by signal N (130: SIGINT). lock run: see 'dcsync lock run --help'.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.storeURL, "store", envOr("DCSYNC_STORE", defaultStoreURL()),
		"store URL: sqlite://PATH, memory:, hbase://ZK_HOST:PORT[,...] or aerospike://HOST:PORT/NAMESPACE (env DCSYNC_STORE); the default file is per user")
	// Help shows the default as Redact does: $DCSYNC_STORE may hold a password (refused
	// when the store is opened), which no output may show.
	pf.Lookup("store").DefValue = storeurl.Redact(a.storeURL)
	pf.StringVar(&a.client, "client", os.Getenv("DCSYNC_CLIENT"), "client id: the application that owns locks and latches (env DCSYNC_CLIENT)")
	pf.StringVar(&a.farm, "farm", envOr("DCSYNC_FARM", "local"), "farm id: the data center this runs in (env DCSYNC_FARM)")
	pf.BoolVar(&a.verbose, "verbose", false, "print errors with the library's call path and every cause")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return withCode(exitUsage, err) })
	root.Version = versionString()
	root.SetVersionTemplate("dcsync {{.Version}}\n")
	root.AddCommand(newLockCmd(a), newRWLockCmd(a), newLatchCmd(a), newQueueCmd(a), newElectionCmd(a), newSemaphoreCmd(a), newBenchCmd(a), newExporterCmd(a), newDemoCmd(a), newVersionCmd(a))
	refuseUnknownSubcommands(root)
	addCompletions(a, root)
	return root
}

// refuseUnknownSubcommands makes every command group below root (lock, latch, queue)
// refuse an argument that names none of its subcommands with a usage error (exit 2);
// cobra by itself prints the group's help and exits 0. A group given no argument still
// prints its help.
func refuseUnknownSubcommands(root *cobra.Command) {
	for _, g := range root.Commands() {
		if !g.HasSubCommands() || g.Runnable() {
			continue
		}
		g.Args = cobra.ArbitraryArgs
		g.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			return withCode(exitUsage, fmt.Errorf("unknown command %q for %q; see '%s --help'", args[0], c.CommandPath(), c.CommandPath()))
		}
	}
}

// addLevelFlag adds --level to cmd. Given twice it is refused (exit 2): which of two
// levels a user meant is not for dcsync to guess.
func addLevelFlag(cmd *cobra.Command, a *app) {
	levelVar(cmd, &a.level, "dc (this farm) or xdc (all farms)")
}

// levelVar adds --level to cmd, stored in p (default dc), refused when given twice.
func levelVar(cmd *cobra.Command, p *string, usage string) {
	*p = "dc"
	cmd.Flags().Var(&onceString{p: p}, "level", usage)
}

// onceString is a string flag that may be given at most once.
type onceString struct {
	p   *string
	set bool
}

func (o *onceString) String() string {
	if o.p == nil {
		return ""
	}
	return *o.p
}

func (o *onceString) Set(v string) error {
	if o.set {
		return errors.New("given more than once")
	}
	o.set = true
	*o.p = v
	return nil
}

func (o *onceString) Type() string { return "string" }

func run(args []string, stdout, stderr io.Writer) int {
	stdout, stderr = lockedWriter(stdout), lockedWriter(stderr)
	a := &app{stdout: stdout, stderr: stderr}
	defer a.close()
	root := newRoot(a)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	// A signal cancels the command's context with the signal as the cause: the command
	// ends as it would on a timeout, and dcsync exits 128+signal.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			cancel(&interrupted{s})
		case <-ctx.Done():
		}
	}()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var e *exitErr
	var in *interrupted
	if !errors.As(err, &e) && !errors.As(err, &in) && errors.As(context.Cause(ctx), &in) {
		// Whatever the command made of its cancelled context ("gave up waiting", "context
		// canceled"), the signal is what ended it.
		err = in
	}
	code := exitCode(err)
	if code == exitError && isUsage(err) {
		code = exitUsage
	}
	if !errors.As(err, &e) || !e.quiet {
		fmt.Fprintln(stderr, "dcsync:", errorText(err, a.verbose))
	}
	return code
}

// syncWriter serialises writes: the output of the command lock run copies and dcsync's
// own messages may go to one writer at once.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// lockedWriter returns w safe for concurrent writes. Files are left as they are: a
// child process writes to them directly.
func lockedWriter(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &syncWriter{w: w}
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

func main() {
	if os.Getenv(guardEnv) != "" {
		os.Exit(guardMain()) // lock run's guardian
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// remaining renders the time left until t; a zero t (a lease whose end the store cannot
// know, such as a lock a Java client holds) is "unknown".
func remaining(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return time.Until(t).Round(time.Millisecond).String()
}
