package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/internal/primlist"
)

// The list commands of election, semaphore and rwlock: one lock listing
// (driver.LockLister), its names parsed by the packages that build them, and one
// batched register read (internal/primlist).

// heldSlotJSON is one held lock of a listed election, semaphore or read-write lock.
type heldSlotJSON struct {
	Slot        *int    `json:"slot,omitempty"`
	Owner       string  `json:"owner"`
	Token       uint64  `json:"token"`
	ExpiresAt   *string `json:"expires_at"`
	ExpiresInMS *int64  `json:"expires_in_ms"`
}

func newHeldSlot(st driver.LockState, slot *int) heldSlotJSON {
	h := heldSlotJSON{Slot: slot, Owner: st.Owner, Token: st.Token}
	h.ExpiresAt, h.ExpiresInMS = expiry(st.Expires)
	return h
}

// electionListJSON is an element of 'election list --json'.
type electionListJSON struct {
	Name      string  `json:"name"`
	Level     string  `json:"level"`
	Farm      string  `json:"farm"`
	Published bool    `json:"published"`
	Value     *string `json:"value"`
	Error     string  `json:"error,omitempty"`
	heldSlotJSON
}

// semaphoreListJSON is an element of 'semaphore list --json'.
type semaphoreListJSON struct {
	Name    string         `json:"name"`
	Level   string         `json:"level"`
	Farm    string         `json:"farm"`
	Permits int            `json:"permits"`
	Max     int            `json:"max"`
	Held    int            `json:"held"`
	Holders []heldSlotJSON `json:"holders"`
	Error   string         `json:"error,omitempty"`
}

// rwlockListJSON is an element of 'rwlock list --json'.
type rwlockListJSON struct {
	Name          string         `json:"name"`
	Level         string         `json:"level"`
	Farm          string         `json:"farm"`
	Slots         int            `json:"slots"`
	Writer        *heldSlotJSON  `json:"writer"`
	WriterWaiting bool           `json:"writer_waiting"`
	ReadersHeld   int            `json:"readers_held"`
	Readers       []heldSlotJSON `json:"readers"`
	Error         string         `json:"error,omitempty"`
}

// listPrimitives lists the client's locks, keeps those of kind and reads their
// registers.
func (a *app) listPrimitives(ctx context.Context, kind primlist.Kind, op string) (primlist.Listing, error) {
	s, _, err := a.setup(ctx)
	if err != nil {
		return primlist.Listing{}, err
	}
	ll, ok := s.(driver.LockLister)
	if !ok {
		return primlist.Listing{}, notSupported(op)
	}
	if _, err := driver.Registers(s, op); err != nil {
		return primlist.Listing{}, err
	}
	locks, err := ll.ListLocks(ctx, a.client)
	if err != nil {
		return primlist.Listing{}, err
	}
	l := primlist.Split(locks)
	l.Locks = nil
	if kind != primlist.KindElection {
		l.Elections = nil
	}
	if kind != primlist.KindSemaphore {
		l.Semaphores = nil
	}
	if kind != primlist.KindRWLock {
		l.RWLocks = nil
	}
	return l, primlist.Read(ctx, s, &l)
}

func farmText(f string) string {
	if f == "" {
		return "-"
	}
	return f
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

const listHelpTail = `
Only what holds a lock is listed (the stores cannot list registers). It reads the
client's locks at every level and farm (on HBase and Aerospike a scan of the whole lock
table or set: an operator's command) and then the registers of what it found in one
batched read. Stores that cannot list locks exit 1 ("not supported by this store").`

func newElectionListCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the client's elections that have a leader: token, owner, value, time left",
		Long: `List the client's elections that have a leader (every level and farm), one per line:
  NAME LEVEL FARM owner=ID token=N expires_in=D value="V"
(token: the leader's fencing token)
value is quoted as Go quotes strings, or (pending) when the lock's holder has not
published its value yet. With --json, a JSON array of {"name","level","farm",
"published","value","owner","token","expires_at","expires_in_ms"} (value null when
pending, "error" when the election's register could not be read).` + listHelpTail,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := a.listPrimitives(c.Context(), primlist.KindElection, "dcsync election list")
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]electionListJSON, 0, len(l.Elections))
				for _, e := range l.Elections {
					j := electionListJSON{Name: e.Key.Name, Level: e.Key.Level.String(), Farm: e.Key.Farm,
						Published: e.Published, Error: errText(e.Err), heldSlotJSON: newHeldSlot(e.Leader, nil)}
					if e.Published {
						v := e.Value
						j.Value = &v
					}
					out = append(out, j)
				}
				return a.printJSON(out)
			}
			for _, e := range l.Elections {
				value := "(pending)"
				if e.Published {
					value = strconv.Quote(e.Value)
				}
				fmt.Fprintf(a.stdout, "%s %s %s owner=%s token=%d expires_in=%s value=%s", e.Key.Name, e.Key.Level,
					farmText(e.Key.Farm), ownerText(e.Leader.Owner), e.Leader.Token, remaining(e.Leader.Expires), value)
				if e.Err != nil {
					fmt.Fprintf(a.stdout, " error=%q", e.Err.Error())
				}
				fmt.Fprintln(a.stdout)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (see above)")
	return c
}

func newSemaphoreListCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the client's semaphores with permits held: N, permits held, holders",
		Long: `List the client's semaphores that have permits held (every level and farm): a line
  NAME LEVEL FARM permits=N held=K
then one line per held permit slot:
  slot=I owner=ID token=T expires_in=D
(N is 0 with error="..." when the semaphore's register could not be read.) With --json,
a JSON array of {"name","level","farm","permits","max","held","holders":[{"slot",
"owner","token","expires_at","expires_in_ms"}]} (max: the largest N it had).` + listHelpTail,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := a.listPrimitives(c.Context(), primlist.KindSemaphore, "dcsync semaphore list")
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]semaphoreListJSON, 0, len(l.Semaphores))
				for _, s := range l.Semaphores {
					j := semaphoreListJSON{Name: s.Key.Name, Level: s.Key.Level.String(), Farm: s.Key.Farm,
						Permits: s.Permits, Max: s.Max, Held: len(s.Held), Holders: []heldSlotJSON{}, Error: errText(s.Err)}
					for _, h := range s.Held {
						slot := h.Slot
						j.Holders = append(j.Holders, newHeldSlot(h.LockState, &slot))
					}
					out = append(out, j)
				}
				return a.printJSON(out)
			}
			for _, s := range l.Semaphores {
				fmt.Fprintf(a.stdout, "%s %s %s permits=%d held=%d", s.Key.Name, s.Key.Level, farmText(s.Key.Farm), s.Permits, len(s.Held))
				if s.Err != nil {
					fmt.Fprintf(a.stdout, " error=%q", s.Err.Error())
				}
				fmt.Fprintln(a.stdout)
				for _, h := range s.Held {
					fmt.Fprintf(a.stdout, "  slot=%d owner=%s token=%d expires_in=%s\n", h.Slot, ownerText(h.Owner), h.Token, remaining(h.Expires))
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (see above)")
	return c
}

func newRWLockListCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the client's held read-write locks: writer holding or waiting, readers held, slots",
		Long: `List the client's read-write locks with the writer lock or a reader slot held (every
level and farm): a line
  NAME LEVEL FARM writer=holding|waiting|free readers=K slots=M
(waiting: a writer holds W and waits for the K readers to leave), then one line for W
when held and one per held reader slot:
  writer owner=ID token=T expires_in=D
  reader slot=I owner=ID token=T expires_in=D
(M is 0 with error="..." when the register could not be read.) With --json, a JSON
array of {"name","level","farm","slots","writer":{"owner","token","expires_at",
"expires_in_ms"} or null,"writer_waiting","readers_held","readers":[{"slot",...}]}.` + listHelpTail,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := a.listPrimitives(c.Context(), primlist.KindRWLock, "dcsync rwlock list")
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]rwlockListJSON, 0, len(l.RWLocks))
				for _, r := range l.RWLocks {
					j := rwlockListJSON{Name: r.Key.Name, Level: r.Key.Level.String(), Farm: r.Key.Farm, Slots: r.Slots,
						WriterWaiting: r.WriterWaiting(), ReadersHeld: len(r.Readers), Readers: []heldSlotJSON{}, Error: errText(r.Err)}
					if r.Writer != nil {
						w := newHeldSlot(*r.Writer, nil)
						j.Writer = &w
					}
					for _, h := range r.Readers {
						slot := h.Slot
						j.Readers = append(j.Readers, newHeldSlot(h.LockState, &slot))
					}
					out = append(out, j)
				}
				return a.printJSON(out)
			}
			for _, r := range l.RWLocks {
				writer := "free"
				switch {
				case r.WriterWaiting():
					writer = "waiting"
				case r.Writer != nil:
					writer = "holding"
				}
				fmt.Fprintf(a.stdout, "%s %s %s writer=%s readers=%d slots=%d", r.Key.Name, r.Key.Level, farmText(r.Key.Farm), writer, len(r.Readers), r.Slots)
				if r.Err != nil {
					fmt.Fprintf(a.stdout, " error=%q", r.Err.Error())
				}
				fmt.Fprintln(a.stdout)
				if w := r.Writer; w != nil {
					fmt.Fprintf(a.stdout, "  writer owner=%s token=%d expires_in=%s\n", ownerText(w.Owner), w.Token, remaining(w.Expires))
				}
				for _, h := range r.Readers {
					fmt.Fprintf(a.stdout, "  reader slot=%d owner=%s token=%d expires_in=%s\n", h.Slot, ownerText(h.Owner), h.Token, remaining(h.Expires))
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array (see above)")
	return c
}
