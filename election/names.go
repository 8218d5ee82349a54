package election

import "github.com/dcsync/dcsync/internal/keyname"

// LockName returns the store name of election name's lock and register (see Storage in
// the package doc).
func LockName(name string) string { return lockName(name) }

// ParseLockName returns the election whose lock (and register) has the store name
// lockName, as LockName builds it; ok is false for any other name.
func ParseLockName(lockName string) (election string, ok bool) {
	name, suffix, ok := keyname.Split(lockName, "election")
	if !ok || suffix != "" {
		return "", false
	}
	return name, true
}

// ParseRecord decodes the value of an election's register: the token of the leader
// that published it and that leader's value. It returns an Internal error for a value
// that is not a record of this version.
func ParseRecord(b []byte) (token uint64, value string, err error) {
	r, err := decodeRecord(b)
	return r.token, r.value, err
}
