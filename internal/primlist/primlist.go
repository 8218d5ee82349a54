// Package primlist turns a store's lock listing (driver.LockLister) into the elections,
// semaphores and read-write locks it holds, for 'dcsync election|semaphore|rwlock list'
// and the exporter. The lock names are parsed by the packages that build them
// (election.ParseLockName, semaphore.ParseSlotName, rwlock.ParseLockName); what the
// locks do not tell (an election's published value, a semaphore's N, a read-write
// lock's M) is read from their registers in ONE batched ReadRegisters call.
//
// Only what holds a lock is listed: an election with no leader, a semaphore with no
// permit held or a read-write lock nobody holds or waits for has no live lock, and the
// stores cannot list registers.
package primlist

import (
	"context"
	"fmt"
	"sort"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/election"
	"github.com/dcsync/dcsync/rwlock"
	"github.com/dcsync/dcsync/semaphore"
)

// Kind is what a listed lock belongs to.
type Kind string

// The kinds of lock.
const (
	KindLock      Kind = "lock" // a plain lock (package lock, the Java lock manager, queue)
	KindElection  Kind = "election"
	KindSemaphore Kind = "semaphore"
	KindRWLock    Kind = "rwlock"
)

// KindOf returns the kind of the lock of store name lockName and the name of the
// election, semaphore or read-write lock it belongs to (lockName for a plain lock).
func KindOf(lockName string) (Kind, string) {
	if n, ok := election.ParseLockName(lockName); ok {
		return KindElection, n
	}
	if n, _, ok := semaphore.ParseSlotName(lockName); ok {
		return KindSemaphore, n
	}
	if n, _, _, ok := rwlock.ParseLockName(lockName); ok {
		return KindRWLock, n
	}
	return KindLock, lockName
}

// Election is one election with a leader (or a holder not yet published).
type Election struct {
	// Key is the election's: Name is the election's name; Farm is "" at level XDC.
	Key dcsync.Key
	// Leader is the state of the election's lock: the leader's owner id, token and
	// lease end.
	Leader driver.LockState
	// Published is true when the register holds the leader's record (its token is
	// Leader.Token); Value is then the leader's value. False: the holder has not
	// published yet (Pending, as election.Manager.Leader says).
	Published bool
	Value     string
	// Err is a failed read or decoding of the register (nil when it was read).
	Err error
}

// Slot is one held permit or reader slot.
type Slot struct {
	Slot int
	driver.LockState
}

// Semaphore is one semaphore with permits held.
type Semaphore struct {
	// Key is the semaphore's: Name is its name; Farm is "" at level XDC.
	Key dcsync.Key
	// Permits is N and Max the largest N it had, from its register (0 when Err).
	Permits, Max int
	// Held are the held permit slots, in slot order.
	Held []Slot
	// Err is a failed read or decoding of the register (nil when it was read).
	Err error
}

// RWLock is one read-write lock with its writer lock or a reader slot held.
type RWLock struct {
	// Key is the read-write lock's: Name is its name; Farm is "" at level XDC.
	Key dcsync.Key
	// Slots is M, the number of reader slots, from its register (0 when Err).
	Slots int
	// Writer is the writer lock W's state, nil when free. With Readers not empty the
	// writer waits for them to leave; else it holds the lock.
	Writer *driver.LockState
	// Readers are the held reader slots, in slot order.
	Readers []Slot
	// Err is a failed read or decoding of the register (nil when it was read).
	Err error
}

// WriterWaiting reports whether a writer holds W and waits for readers to leave.
func (r RWLock) WriterWaiting() bool { return r.Writer != nil && len(r.Readers) > 0 }

// Listing is what a lock listing holds, by kind, each sorted by client, level, farm and
// name.
type Listing struct {
	Locks      []driver.LockInfo
	Elections  []Election
	Semaphores []Semaphore
	RWLocks    []RWLock
}

// Split sorts listed locks by kind and groups them by election, semaphore and
// read-write lock. It reads nothing; Read fills in the registers.
func Split(locks []driver.LockInfo) Listing {
	var l Listing
	elections := map[dcsync.Key]int{}
	sems := map[dcsync.Key]int{}
	rws := map[dcsync.Key]int{}
	for _, li := range locks {
		k := li.Key
		if k.Level == dcsync.XDC {
			k.Farm = ""
		}
		if n, ok := election.ParseLockName(k.Name); ok {
			k.Name = n
			if _, dup := elections[k]; !dup {
				elections[k] = len(l.Elections)
				l.Elections = append(l.Elections, Election{Key: k, Leader: li.LockState})
			}
			continue
		}
		if n, slot, ok := semaphore.ParseSlotName(k.Name); ok {
			k.Name = n
			i, seen := sems[k]
			if !seen {
				i = len(l.Semaphores)
				sems[k] = i
				l.Semaphores = append(l.Semaphores, Semaphore{Key: k})
			}
			l.Semaphores[i].Held = append(l.Semaphores[i].Held, Slot{Slot: slot, LockState: li.LockState})
			continue
		}
		if n, writer, slot, ok := rwlock.ParseLockName(k.Name); ok {
			k.Name = n
			i, seen := rws[k]
			if !seen {
				i = len(l.RWLocks)
				rws[k] = i
				l.RWLocks = append(l.RWLocks, RWLock{Key: k})
			}
			if writer {
				w := li.LockState
				l.RWLocks[i].Writer = &w
			} else {
				l.RWLocks[i].Readers = append(l.RWLocks[i].Readers, Slot{Slot: slot, LockState: li.LockState})
			}
			continue
		}
		l.Locks = append(l.Locks, li)
	}
	sort.Slice(l.Elections, func(i, j int) bool { return keyLess(l.Elections[i].Key, l.Elections[j].Key) })
	sort.Slice(l.Semaphores, func(i, j int) bool { return keyLess(l.Semaphores[i].Key, l.Semaphores[j].Key) })
	sort.Slice(l.RWLocks, func(i, j int) bool { return keyLess(l.RWLocks[i].Key, l.RWLocks[j].Key) })
	for _, s := range l.Semaphores {
		sortSlots(s.Held)
	}
	for _, r := range l.RWLocks {
		sortSlots(r.Readers)
	}
	return l
}

func keyLess(a, b dcsync.Key) bool {
	if a.Client != b.Client {
		return a.Client < b.Client
	}
	if a.Level != b.Level {
		return a.Level < b.Level
	}
	if a.Farm != b.Farm {
		return a.Farm < b.Farm
	}
	return a.Name < b.Name
}

func sortSlots(s []Slot) { sort.Slice(s, func(i, j int) bool { return s[i].Slot < s[j].Slot }) }

// xdcFarm stands for the farm in the register key of a listed XDC name: at level XDC a
// register's address has no farm (driver.RegisterStore), but a key needs a valid one.
const xdcFarm = "-"

// regKey returns the register key of k (a listed election, semaphore or read-write
// lock) whose register has the store name name.
func regKey(k dcsync.Key, name string) dcsync.Key {
	k.Name = name
	if k.Level == dcsync.XDC {
		k.Farm = xdcFarm
	}
	return k
}

// Read reads the registers of l's elections, semaphores and read-write locks in one
// ReadRegisters call (none when l has none of them) and fills in their values, N and
// M. A register that cannot be read or decoded sets that entry's Err; the returned
// error is the batch's (the call failed as a whole, or the store keeps no registers).
func Read(ctx context.Context, s driver.Store, l *Listing) error {
	var keys []dcsync.Key
	for _, e := range l.Elections {
		keys = append(keys, regKey(e.Key, election.LockName(e.Key.Name)))
	}
	for _, s := range l.Semaphores {
		keys = append(keys, regKey(s.Key, semaphore.RegisterName(s.Key.Name)))
	}
	for _, r := range l.RWLocks {
		keys = append(keys, regKey(r.Key, rwlock.RegisterName(r.Key.Name)))
	}
	if len(keys) == 0 {
		return nil
	}
	regs, err := driver.Registers(s, "primlist.Read")
	if err != nil {
		return err
	}
	res, err := regs.ReadRegisters(ctx, keys)
	if err == nil && len(res) != len(keys) {
		err = driver.Errorf(dcsync.Internal, "primlist.Read", "store returned %d registers for %d keys", len(res), len(keys))
	}
	if err != nil {
		return err
	}
	i := 0
	for j := range l.Elections {
		e := &l.Elections[j]
		e.Err = readElection(e, res[i])
		i++
	}
	for j := range l.Semaphores {
		s := &l.Semaphores[j]
		s.Err = readValue(res[i], func(b []byte) (err error) {
			s.Permits, s.Max, err = semaphore.ParseCount(b)
			return err
		})
		i++
	}
	for j := range l.RWLocks {
		r := &l.RWLocks[j]
		r.Err = readValue(res[i], func(b []byte) (err error) {
			r.Slots, err = rwlock.ParseReaders(b)
			return err
		})
		i++
	}
	return nil
}

func readElection(e *Election, r driver.RegisterResult) error {
	if r.Err != nil {
		return r.Err
	}
	if r.Register.Gen == 0 {
		return nil // not published yet
	}
	token, value, err := election.ParseRecord(r.Register.Value)
	if err != nil {
		return err
	}
	if token == e.Leader.Token {
		e.Published, e.Value = true, value
	}
	return nil
}

// readValue decodes a register that must exist with parse.
func readValue(r driver.RegisterResult, parse func([]byte) error) error {
	if r.Err != nil {
		return r.Err
	}
	if r.Register.Gen == 0 {
		return fmt.Errorf("its register does not exist")
	}
	return parse(r.Register.Value)
}
