package driver

import (
	"context"

	"github.com/dcsync/dcsync"
)

// MaxRegisterValue is the largest value a register holds, in bytes.
const MaxRegisterValue = 16 << 10

// Register is the stored state of a register: a small record of dcsync's own (no Java
// library reads or writes one) that only a compare-and-set changes. Package election
// keeps its leader's value in one, package semaphore its permit count.
type Register struct {
	// Gen is the register's generation: 0 when it does not exist, and after every
	// write exactly one more than before. Generations never go back, and a register
	// is never deleted, so a generation names one write for good.
	Gen uint64
	// Value is what the write of generation Gen stored (nil when Gen is 0).
	Value []byte
}

// RegisterResult is the outcome of one register of a [RegisterStore.ReadRegisters]
// call.
type RegisterResult struct {
	// Register is the stored register; Gen 0 when it does not exist (no error then).
	Register Register
	// Err is nil, or this register's typed error (Connection when its part of the batch
	// failed).
	Err error
}

// RegisterStore is implemented by stores that keep registers: records addressed by a
// key (level, client, farm, name, as a lock's: at level DC the farm is part of the
// address, at level XDC it is not), written only by compare-and-set on their
// generation. Every store in this module implements it. A register's key space is its
// own: a register and a lock or latch with the same key are different records.
type RegisterStore interface {
	// SwapRegister writes value to the register at k when its generation is gen (0:
	// the register does not exist yet, and the write creates it), and returns the new
	// register, of generation gen+1. When the stored generation is another, it writes
	// nothing and returns the stored register with a Conflict error.
	//
	// A write whose outcome was unknown (a timeout, a dropped connection) is resolved
	// before SwapRegister returns, by reading the register back: success when it now
	// holds generation gen+1 written by this call (the network stores keep the id of
	// the write that stored a generation beside its value, so two calls that write
	// equal values are told apart), Conflict when it holds another generation; while it
	// still holds gen the write has not landed and is sent again. When neither the read
	// nor a resend gets through (ctx ends, the store's tries run out), SwapRegister
	// returns a Connection or RetriesExhausted error: the outcome is unknown, and the
	// caller reads the register to learn it. A try that lands late, after other
	// writes, finds a later generation and changes nothing: every write is conditioned
	// on the generation it replaces.
	//
	// A Conflict does not prove that this call's write never landed: it may have
	// landed, after an unknown outcome, and been replaced since. A caller that
	// computes its next value from the stored one after a Conflict (a permit count)
	// must recognise its own earlier write in the value (an id in it) to not apply it
	// twice.
	SwapRegister(ctx context.Context, k dcsync.Key, gen uint64, value []byte) (Register, error)
	// ReadRegisters reads many registers in one round trip per store node where the
	// back end allows it; result i belongs to keys[i]. The returned error is for the
	// batch as a whole: validation of any key (before any I/O), or a store that cannot
	// read at all (memory and SQLite: closed, ctx ended); the network stores put a
	// failed read in each result's Err. Callers check both.
	ReadRegisters(ctx context.Context, keys []dcsync.Key) ([]RegisterResult, error)
}

// ValidateRegister checks a register write's key and value, before any I/O.
func ValidateRegister(k dcsync.Key, value []byte) error {
	if err := ValidateKey("register", k); err != nil {
		return err
	}
	if len(value) > MaxRegisterValue {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "register value is %d bytes, more than %d", len(value), MaxRegisterValue)
	}
	return nil
}

// ValidateRegisterKeys checks every key of a ReadRegisters call, before any I/O.
func ValidateRegisterKeys(keys []dcsync.Key) error {
	for _, k := range keys {
		if err := ValidateKey("register", k); err != nil {
			return err
		}
	}
	return nil
}

// Registers returns s's RegisterStore, or a NotImplemented error naming op when the
// store has none.
func Registers(s any, op string) (RegisterStore, error) {
	if r, ok := s.(RegisterStore); ok {
		return r, nil
	}
	return nil, Errorf(dcsync.NotImplemented, op, "the store (%T) keeps no registers", s)
}
