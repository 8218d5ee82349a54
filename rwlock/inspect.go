package rwlock

import (
	"context"
	"errors"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
	"github.com/dcsync/dcsync/lock"
)

// State is what Inspect reads of a read-write lock.
type State struct {
	// Slots is M, the number of reader slots; 0 when the read-write lock was never
	// used (nothing is stored for it).
	Slots int
	// Writer is W's holder: a writer that holds the lock, or one that waits for the
	// readers to leave (Readers is then not empty). Nil when W is free.
	Writer *lock.State
	// Readers are the reader slots held, in slot order. A reader that took a slot and
	// is about to give it back on finding W held shows here too, for an instant.
	Readers []Reader
}

// Reader is one held reader slot.
type Reader struct {
	Slot int
	lock.State
}

// Inspect reads the read-write lock: its register, then W and every reader slot in one
// batched call. It writes nothing.
func (m *Manager) Inspect(ctx context.Context, name string, opts ...CallOption) (State, error) {
	const op = "rwlock.Inspect"
	s, err := m.spec(op, name, opts)
	if err != nil {
		return State{}, err
	}
	k := m.key(s, base(s.name))
	rs, err := m.regs.ReadRegisters(ctx, []dcsync.Key{k})
	if err == nil {
		err = rs[0].Err
	}
	if err != nil {
		return State{}, driver.Wrap(err, dcsync.Internal, op)
	}
	var st State
	if rs[0].Register.Gen == 0 {
		return st, nil
	}
	if st.Slots, err = decodeSize(rs[0].Register.Value); err != nil {
		return State{}, driver.Errorf(dcsync.Internal, op, "register %s: %v", k, err)
	}
	if err := fits(op, s.name, st.Slots); err != nil {
		return State{}, err
	}
	keys := append([]dcsync.Key{m.key(s, writerName(s.name))}, m.slotKeys(s, st.Slots)...)
	res, err := driver.InspectLocks(ctx, m.store, keys)
	if err != nil {
		return State{}, driver.Wrap(err, dcsync.Internal, op)
	}
	for i, r := range res {
		switch {
		case errors.Is(r.Err, dcsync.ErrNotFound):
			continue
		case r.Err != nil:
			return State{}, driver.Wrap(r.Err, dcsync.Internal, op)
		}
		if i == 0 {
			w := r.State
			st.Writer = &w
		} else {
			st.Readers = append(st.Readers, Reader{Slot: i - 1, State: r.State})
		}
	}
	return st, nil
}
