package rwlock

import "github.com/dcsync/dcsync/internal/keyname"

// RegisterName returns the store name of read-write lock name's register, which holds
// M (see the package doc).
func RegisterName(name string) string { return base(name) }

// ParseLockName returns the read-write lock whose lock has the store name lockName, as
// the package builds it: writer is true for its writer lock W ("rwlock:LEN:NAME/w"),
// else slot is the reader slot ("rwlock:LEN:NAME/rI"). ok is false for any other name.
func ParseLockName(lockName string) (rwlock string, writer bool, slot int, ok bool) {
	name, suffix, ok := keyname.Split(lockName, "rwlock")
	if !ok {
		return "", false, 0, false
	}
	if suffix == "/w" {
		return name, true, 0, true
	}
	if len(suffix) < 3 || suffix[:2] != "/r" {
		return "", false, 0, false
	}
	i, ok := keyname.Index(suffix[2:])
	if !ok || i >= MaxReaders {
		return "", false, 0, false
	}
	return name, false, i, true
}

// ParseReaders decodes the value of a read-write lock's register: M, its number of
// reader slots. It returns an error for a value that is not one.
func ParseReaders(b []byte) (int, error) { return decodeSize(b) }
