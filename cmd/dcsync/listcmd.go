package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/primlist"
	"github.com/dcsync/dcsync/lock"
)

// JSON output (--json). Field names are stable; times are RFC 3339 with milliseconds in
// UTC, and a lease or latch whose end the store cannot tell (a lock a Java client
// holds on some stores) has expires_at and expires_in_ms null.

// lockJSON is one lock: the object of 'lock status --json' (with held) and an element
// of 'lock list --json' (always held).
type lockJSON struct {
	Name        string  `json:"name"`
	Level       string  `json:"level"`
	Farm        string  `json:"farm"`
	Held        bool    `json:"held"`
	Owner       string  `json:"owner,omitempty"`
	Token       uint64  `json:"token,omitempty"`
	ExpiresAt   *string `json:"expires_at"`
	ExpiresInMS *int64  `json:"expires_in_ms"`
	// Kind is set by 'lock list' on the locks of an election, semaphore or read-write
	// lock ("election", "semaphore", "rwlock"): they are parts of those, not locks of
	// their own. Absent on a plain lock.
	Kind string `json:"kind,omitempty"`
}

// latchJSON is one latch: the object of 'latch count --json' and an element of
// 'latch list --json'.
type latchJSON struct {
	Name        string   `json:"name"`
	Level       string   `json:"level"`
	Farm        string   `json:"farm,omitempty"`
	Farms       []string `json:"farms,omitempty"`
	Count       int64    `json:"count"`
	ExpiresAt   *string  `json:"expires_at,omitempty"`
	ExpiresInMS *int64   `json:"expires_in_ms,omitempty"`
}

// jsonTimeLayout is the one layout of every time the CLI prints as JSON: RFC 3339 in
// UTC with milliseconds, whatever the store's clock resolution (SQLite and Aerospike
// keep milliseconds, the memory store nanoseconds, HBase milliseconds).
const jsonTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// jsonTime renders t for JSON.
func jsonTime(t time.Time) string { return t.UTC().Format(jsonTimeLayout) }

// heldJSON is the JSON object of lock k held by owner with state st.
func heldJSON(k dcsync.Key, owner string, st driver.LockState) lockJSON {
	j := lockJSON{Name: k.Name, Level: k.Level.String(), Farm: k.Farm, Held: true, Owner: owner, Token: st.Token}
	if k.Level == dcsync.XDC {
		j.Farm = ""
	}
	j.ExpiresAt, j.ExpiresInMS = expiry(st.Expires)
	return j
}

// expiry renders t for JSON: nil for a zero time.
func expiry(t time.Time) (*string, *int64) {
	if t.IsZero() {
		return nil, nil
	}
	at := jsonTime(t)
	in := time.Until(t).Milliseconds()
	return &at, &in
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func ownerText(owner string) string {
	if owner == "" {
		return "(java client)"
	}
	return owner
}

func notSupported(op string) error {
	return driver.Errorf(dcsync.NotImplemented, op, "not supported by this store")
}

// newLockListCmd is 'lock list'.
func newLockListCmd(a *app, asJSON *bool) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the client's held locks (every level and farm): name, level, farm, owner, token, time left",
		Long: `List the client's held locks, at every level and farm, one per line:
  NAME LEVEL FARM owner=ID token=N expires_in=D
An XDC lock has farm '-' (the store keeps one lock for all farms). The locks that an
election, a semaphore or a read-write lock is made of are listed with their store names
(election:LEN:NAME, semaphore:LEN:NAME/I, rwlock:LEN:NAME/w and /rI) and marked: the line
ends with kind=election, kind=semaphore or kind=rwlock ('election list', 'semaphore
list' and 'rwlock list' show them by name). With --json, a JSON array of {"name",
"level","farm","held","owner","token","expires_at","expires_in_ms"}, and "kind" on those
marked.
On HBase and Aerospike this scans the whole lock table or set: an operator's command.
Stores that cannot list exit 1 ("not supported by this store").`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			s, _, err := a.setup(c.Context())
			if err != nil {
				return err
			}
			ll, ok := s.(driver.LockLister)
			if !ok {
				return notSupported("dcsync lock list")
			}
			locks, err := ll.ListLocks(c.Context(), a.client)
			if err != nil {
				return err
			}
			if *asJSON {
				out := make([]lockJSON, 0, len(locks))
				for _, l := range locks {
					j := lockJSON{Name: l.Key.Name, Level: l.Key.Level.String(), Farm: l.Key.Farm, Held: true, Owner: l.Owner, Token: l.Token}
					if kind, _ := primlist.KindOf(l.Key.Name); kind != primlist.KindLock {
						j.Kind = string(kind)
					}
					j.ExpiresAt, j.ExpiresInMS = expiry(l.Expires)
					out = append(out, j)
				}
				return a.printJSON(out)
			}
			for _, l := range locks {
				farm := l.Key.Farm
				if farm == "" {
					farm = "-"
				}
				mark := ""
				if kind, _ := primlist.KindOf(l.Key.Name); kind != primlist.KindLock {
					mark = " kind=" + string(kind)
				}
				fmt.Fprintf(a.stdout, "%s %s %s owner=%s token=%d expires_in=%s%s\n",
					l.Key.Name, l.Key.Level, farm, ownerText(l.Owner), l.Token, remaining(l.Expires), mark)
			}
			return nil
		},
	}
}

// newLockRefreshCmd is 'lock refresh NAME --owner ID [--ttl D]'.
func newLockRefreshCmd(a *app) *cobra.Command {
	var owner string
	var ttl time.Duration
	var asJSON bool
	c := &cobra.Command{
		Use:   "refresh NAME --owner ID [--ttl D] [--json]",
		Short: "Extend owner ID's lease to --ttl from now (exit 5 if ID does not hold it)",
		Long: `Extend the lease of the lock held by owner ID (printed by 'lock acquire') to --ttl
from now, and print owner=<id> token=<n> expires_in=<d>. Exit 5, changing nothing, when
ID does not hold the lock (its lease lapsed, or another owner holds it).`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			s, level, err := a.setup(c.Context())
			if err != nil {
				return err
			}
			k := dcsync.Key{Level: level, Client: a.client, Farm: a.farm, Name: args[0]}
			st, err := s.RefreshLock(c.Context(), k, owner, ttl)
			if err != nil {
				return notHeldBy(args[0], owner, err)
			}
			if asJSON {
				return a.printJSON(heldJSON(k, owner, st))
			}
			fmt.Fprintf(a.stdout, "owner=%s token=%d expires_in=%s\n", owner, st.Token, remaining(st.Expires))
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `print the lock as 'lock status --json' does`)
	c.Flags().StringVar(&owner, "owner", "", "owner id printed by 'lock acquire'")
	_ = c.MarkFlagRequired("owner")
	c.Flags().DurationVar(&ttl, "ttl", lock.DefaultTTL, "new lease length, from now")
	return c
}

// newLatchListCmd is 'latch list'.
func newLatchListCmd(a *app, asJSON *bool) *cobra.Command {
	var level string
	c := &cobra.Command{
		Use:   "list [--level dc|xdc]",
		Short: "List the client's latches: name, level, farm, count, time left",
		Long: `List the client's latches. Stores keep one count per farm: by default (--level dc)
each farm's cell is a line
  NAME DC FARM count=N expires_in=D
and with --level xdc each latch name is one line with the sum of its farms' cells (the
count an XDC reader sees) and the latest end:
  NAME XDC FARM1,FARM2 count=N expires_in=D
With --json, a JSON array of {"name","level","farm","count","expires_at","expires_in_ms"}
(at --level xdc "farms", a list, instead of "farm"). On HBase and Aerospike this scans
the whole latch table or set: an operator's command. Stores that cannot list exit 1
("not supported by this store").`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			a.level = level
			s, lvl, err := a.setup(c.Context())
			if err != nil {
				return err
			}
			ll, ok := s.(driver.LatchLister)
			if !ok {
				return notSupported("dcsync latch list")
			}
			cells, err := ll.ListLatches(c.Context(), a.client)
			if err != nil {
				return err
			}
			out := latchRows(cells, lvl)
			if *asJSON {
				return a.printJSON(out)
			}
			for _, r := range out {
				farm := r.Farm
				if lvl == dcsync.XDC {
					farm = joinFarms(r.Farms)
				}
				left := "unknown"
				if r.ExpiresInMS != nil {
					left = (time.Duration(*r.ExpiresInMS) * time.Millisecond).String()
				}
				fmt.Fprintf(a.stdout, "%s %s %s count=%d expires_in=%s\n", r.Name, r.Level, farm, r.Count, left)
			}
			return nil
		},
	}
	levelVar(c, &level, "dc (one line per farm cell) or xdc (one line per latch, the farms summed)")
	return c
}

func joinFarms(fs []string) string {
	s := ""
	for i, f := range fs {
		if i > 0 {
			s += ","
		}
		s += f
	}
	return s
}

// latchRows renders listed cells: one row per cell at DC, one per name at XDC (the sum
// of its cells, saturating as an XDC read does, and the latest end).
func latchRows(cells []driver.LatchInfo, level dcsync.Level) []latchJSON {
	out := make([]latchJSON, 0, len(cells))
	if level == dcsync.DC {
		for _, c := range cells {
			j := latchJSON{Name: c.Key.Name, Level: "DC", Farm: c.Key.Farm, Count: c.Count}
			j.ExpiresAt, j.ExpiresInMS = expiry(c.Expires)
			out = append(out, j)
		}
		return out
	}
	type agg struct {
		farms  []string
		counts []int64
		end    time.Time
		noEnd  bool
	}
	byName := map[string]*agg{}
	var names []string
	for _, c := range cells {
		g := byName[c.Key.Name]
		if g == nil {
			g = &agg{}
			byName[c.Key.Name] = g
			names = append(names, c.Key.Name)
		}
		g.farms = append(g.farms, c.Key.Farm)
		g.counts = append(g.counts, c.Count)
		if c.Expires.IsZero() {
			g.noEnd = true
		} else if c.Expires.After(g.end) {
			g.end = c.Expires
		}
	}
	sort.Strings(names)
	for _, n := range names {
		g := byName[n]
		sort.Strings(g.farms)
		j := latchJSON{Name: n, Level: "XDC", Farms: g.farms, Count: driver.SumCounts(g.counts...)}
		if !g.noEnd {
			j.ExpiresAt, j.ExpiresInMS = expiry(g.end)
		}
		out = append(out, j)
	}
	return out
}

// newLatchDeleteCmd is 'latch delete NAME'.
func newLatchDeleteCmd(a *app) *cobra.Command {
	var level string
	c := &cobra.Command{
		Use:   "delete NAME [--level dc|xdc]",
		Short: "Delete a latch (dc: this farm's cell; xdc: every farm's); exit 1 if it does not exist",
		Long: `Delete a latch: at --level dc (the default) this farm's count, at --level xdc every
farm's count of the name. Waiters see the latch gone. A latch that does not exist (never
created, or expired) is not deleted: exit 1 (not found). Stores that cannot delete
latches exit 1 ("not supported by this store").`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			a.level = level
			s, lvl, err := a.setup(c.Context())
			if err != nil {
				return err
			}
			d, ok := s.(driver.LatchDeleter)
			if !ok {
				return notSupported("dcsync latch delete")
			}
			return d.DeleteLatch(c.Context(), dcsync.Key{Level: lvl, Client: a.client, Farm: a.farm, Name: args[0]})
		},
	}
	levelVar(c, &level, "dc (this farm's count) or xdc (every farm's)")
	return c
}

// isTerminal reports whether w is a terminal; tests may override it.
var isTerminal = defaultIsTerminal

func defaultIsTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// holderWatch wraps the lock store of 'lock acquire --wait' to learn who holds the lock
// from the acquisition attempts themselves: a refused AcquireLock returns the holder's
// state. (No extra reads, and never the waiter's own hold.)
type holderWatch struct {
	driver.LockStore

	mu      sync.Mutex
	st      driver.LockState
	seen    bool
	changed chan struct{} // a token when st was recorded; capacity 1
}

func newHolderWatch(s driver.LockStore) *holderWatch {
	return &holderWatch{LockStore: s, changed: make(chan struct{}, 1)}
}

// AcquireLock records the holder's state when the lock is held by another.
func (h *holderWatch) AcquireLock(ctx context.Context, k dcsync.Key, owner string, ttl time.Duration) (driver.LockState, error) {
	st, err := h.LockStore.AcquireLock(ctx, k, owner, ttl)
	if dcsync.CodeOf(err) == dcsync.LockUnavailable {
		h.mu.Lock()
		h.st, h.seen = st, true
		h.mu.Unlock()
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
	return st, err
}

func (h *holderWatch) holder() (driver.LockState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st, h.seen
}

// showHolder shows, when stderr is a terminal, who holds lock name while an Acquire
// through h waits for it, until the returned stop is called: one line rewritten in
// place every tick (so the time left counts down) and ended by stop. When stderr is
// not a terminal it shows nothing: scripts get the plain output of lock acquire only.
func (a *app) showHolder(h *holderWatch, name string, tick time.Duration) (stop func()) {
	if !isTerminal(a.stderr) {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	shown := false
	go func() {
		defer wg.Done()
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-h.changed:
			case <-t.C:
			}
			st, ok := h.holder()
			if !ok {
				continue
			}
			line := fmt.Sprintf("waiting for %s: held by owner=%s token=%d expires_in=%s", name, ownerText(st.Owner), st.Token, remaining(st.Expires))
			fmt.Fprintf(a.stderr, "\r%-100s", line)
			shown = true
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
		if shown {
			fmt.Fprintln(a.stderr)
		}
	}
}
