package memory

import (
	"bytes"
	"context"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

var _ driver.RegisterStore = (*Store)(nil)

// SwapRegister implements driver.RegisterStore.
func (s *Store) SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (driver.Register, error) {
	if err := s.begin(ctx, driver.ValidateRegister(k, value)); err != nil {
		return driver.Register{}, err
	}
	defer s.mu.Unlock()
	id := toLockID(k)
	cur := s.regs[id]
	if cur.Gen != gen {
		return cloneRegister(cur), driver.Errorf(dcsync.Conflict, "memory.SwapRegister", "register %s is at generation %d, not %d", k, cur.Gen, gen)
	}
	next := driver.Register{Gen: gen + 1, Value: bytes.Clone(value)}
	if next.Value == nil {
		next.Value = []byte{}
	}
	s.regs[id] = next
	return cloneRegister(next), nil
}

// ReadRegisters implements driver.RegisterStore: every register under one lock.
func (s *Store) ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]driver.RegisterResult, error) {
	if err := s.begin(ctx, driver.ValidateRegisterKeys(keys)); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]driver.RegisterResult, len(keys))
	for i, k := range keys {
		out[i].Register = cloneRegister(s.regs[toLockID(k)])
	}
	return out, nil
}

// cloneRegister copies r so that a caller cannot change the stored value.
func cloneRegister(r driver.Register) driver.Register {
	r.Value = bytes.Clone(r.Value)
	return r
}
