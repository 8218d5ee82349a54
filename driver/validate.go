package driver

import (
	"github.com/dcsync/dcsync"
	"math"
	"math/big"
	"time"
	"unicode"
	"unicode/utf8"
)

// ValidateID checks a client or farm id: 1 to MaxIDLen bytes of valid UTF-8 without
// control characters. Every id the Java libraries' own examples use is accepted
// ("CLIENT_ID", "MY_SERVICE", "dc1"), so a Java service and a Go service can share
// locks and latches under one id.
//
// The Java libraries join ids with '#' and '_' without escaping: client "a_b" with latch
// "c" and client "a" with latch "b_c" share one HBase latch row. dcsync accepts such ids
// (refusing them would cut it off from the Java services that use them), keeps the keys
// only dcsync writes (fencing counters, identity cells) unambiguous with
// layout.IdentityKey, and detects at write time, where the store allows, that a stored
// latch belongs to another (client, name): see the stores' docs.
func ValidateID(what, id string) error {
	if id == "" {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "%s id is empty", what)
	}
	if len(id) > dcsync.MaxIDLen {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "%s id is %d bytes, longer than %d", what, len(id), dcsync.MaxIDLen)
	}
	return checkText(what+" id", id)
}

// checkText reports invalid UTF-8 or a control character in s, naming the character as
// it is (a rune, not a byte) and its byte offset.
func checkText(what, s string) error {
	if !utf8.ValidString(s) {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "%s %q is not valid UTF-8", what, s)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "%s %q has control character %U at byte %d", what, s, r, i)
		}
	}
	return nil
}

// ValidateName checks a lock or latch name: 1 to MaxNameLen bytes of valid UTF-8 with
// no control characters. Names may contain '#' and '_' (see ValidateID on what that
// means for keys shared with the Java libraries).
func ValidateName(what, name string) error {
	if name == "" {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "%s name is empty", what)
	}
	if len(name) > dcsync.MaxNameLen {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "%s name is %d bytes, longer than %d", what, len(name), dcsync.MaxNameLen)
	}
	return checkText(what+" name", name)
}

// ValidateKey checks every field of k; what is "lock" or "latch", for the message.
func ValidateKey(what string, k dcsync.Key) error {
	if k.Level != dcsync.DC && k.Level != dcsync.XDC {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "%s level %d is not DC or XDC", what, int(k.Level))
	}
	if err := ValidateID("client", k.Client); err != nil {
		return err
	}
	if err := ValidateID("farm", k.Farm); err != nil {
		return err
	}
	return ValidateName(what, k.Name)
}

// ValidateTTL checks that ttl lies within [MinTTL, MaxTTL].
func ValidateTTL(ttl time.Duration) error {
	if ttl < dcsync.MinTTL || ttl > dcsync.MaxTTL {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "ttl %v is outside [%v, %v]", ttl, dcsync.MinTTL, dcsync.MaxTTL)
	}
	return nil
}

// ValidateCount checks a latch's initial count: it must not be negative.
func ValidateCount(count int64) error {
	if count < 0 {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "count %d is negative", count)
	}
	return nil
}

// ValidateOwner checks a lock owner id: 1 to MaxOwnerLen printable ASCII bytes.
func ValidateOwner(owner string) error {
	if owner == "" || len(owner) > dcsync.MaxOwnerLen {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "owner id must be 1 to %d bytes, got %d", dcsync.MaxOwnerLen, len(owner))
	}
	for i := 0; i < len(owner); i++ {
		if owner[i] <= ' ' || owner[i] > '~' {
			return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "owner id %q has a byte outside printable ASCII at %d", owner, i)
		}
	}
	return nil
}

// CheckLock validates a lock request: the key, the owner, and ttl when it is non-zero.
// Stores call it before any I/O.
func CheckLock(k dcsync.Key, owner string, ttl time.Duration) error {
	if err := ValidateKey("lock", k); err != nil {
		return err
	}
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	if ttl != 0 {
		return ValidateTTL(ttl)
	}
	return nil
}

// CheckLatch validates a latch request: the key, and ttl when it is non-zero. Stores
// call it before any I/O.
func CheckLatch(k dcsync.Key, ttl time.Duration) error {
	if err := ValidateKey("latch", k); err != nil {
		return err
	}
	if ttl != 0 {
		return ValidateTTL(ttl)
	}
	return nil
}

// CheckLease validates a request that starts or extends a lease (acquire, refresh): the
// key, the owner, and a ttl that must be within [MinTTL, MaxTTL]. Stores call it before
// any I/O.
func CheckLease(k dcsync.Key, owner string, ttl time.Duration) error {
	if err := CheckLock(k, owner, 0); err != nil {
		return err
	}
	return ValidateTTL(ttl)
}

// AddCount returns count+delta, or InvalidArgument naming op when the result does not
// fit in an int64. Stores check every latch update with it, against the updated farm's
// count and against the latch's sum, before writing: a count never wraps around.
func AddCount(op string, count, delta int64) (int64, error) {
	n := count + delta
	if (delta > 0 && n < count) || (delta < 0 && n > count) {
		return 0, Errorf(dcsync.InvalidArgument, op, "count %d %+d does not fit in an int64; nothing was written", count, delta)
	}
	return n, nil
}

// SumCounts adds farm counts for an XDC read exactly, then saturates at
// math.MaxInt64 and math.MinInt64 instead of wrapping: the sign of the sum, which
// waiting depends on, is always exact.
func SumCounts(counts ...int64) int64 {
	n, _ := SumFits(counts...)
	return n
}

// SumFits returns the exact sum of counts saturated at the int64 bounds, and whether
// the exact sum fits in an int64.
func SumFits(counts ...int64) (int64, bool) {
	sum := exactSum(counts)
	switch {
	case sum.Cmp(maxInt64) > 0:
		return math.MaxInt64, false
	case sum.Cmp(minInt64) < 0:
		return math.MinInt64, false
	}
	return sum.Int64(), true
}

// SumUpdateFits reports whether an update of delta may be applied to a latch whose
// farm counts (before the update) are counts: the new sum fits in an int64, or the
// update moves an out-of-range sum toward zero. Stores refuse an XDC update for which
// it is false (InvalidArgument, nothing written).
func SumUpdateFits(counts []int64, delta int64) bool {
	before := exactSum(counts)
	after := new(big.Int).Add(before, big.NewInt(delta))
	if after.Cmp(minInt64) >= 0 && after.Cmp(maxInt64) <= 0 {
		return true
	}
	return before.Sign() > 0 && delta < 0 || before.Sign() < 0 && delta > 0
}

var (
	minInt64 = big.NewInt(math.MinInt64)
	maxInt64 = big.NewInt(math.MaxInt64)
)

func exactSum(counts []int64) *big.Int {
	n := new(big.Int)
	for _, c := range counts {
		n.Add(n, big.NewInt(c))
	}
	return n
}
