package semaphore

import "github.com/dcsync/dcsync/internal/keyname"

// RegisterName returns the store name of semaphore name's register (see Storage in the
// package doc).
func RegisterName(name string) string { return regName(name) }

// ParseSlotName returns the semaphore and the permit slot whose lock has the store
// name lockName, as the package builds it ("semaphore:LEN:NAME/i"); ok is false for
// any other name.
func ParseSlotName(lockName string) (semaphore string, slot int, ok bool) {
	name, suffix, ok := keyname.Split(lockName, "semaphore")
	if !ok || len(suffix) < 2 || suffix[0] != '/' {
		return "", 0, false
	}
	i, ok := keyname.Index(suffix[1:])
	if !ok || i >= MaxPermits {
		return "", 0, false
	}
	return name, i, true
}

// ParseCount decodes the value of a semaphore's register: N, the number of permits,
// and max, the largest N it ever had. It returns an error for a value that is not a
// count record of this version.
func ParseCount(b []byte) (n, max int, err error) {
	c, err := decodeCount(b)
	return c.N, c.Max, err
}
