// Package layout holds the storage layouts of the Java lock and latch libraries, byte for
// byte: HBase row keys with their one-byte hash prefix, qualifiers and table names, and
// Aerospike set names, user keys and bin names. A Go service using dcsync and a Java
// service using those libraries see each other's locks and counts because both build
// keys here the same way.
//
// Every encoder has a parser. The Java layouts join ids with '#' and '_' without
// escaping, and dcsync accepts the ids the Java libraries accept, so a Java key can be
// shared by two (client, farm, name) triples: client "a_b" with latch "c" and client "a"
// with latch "b_c" are one HBase latch row. The Ambiguous* functions report when that is
// possible for a key; the parsers then return the split at the first separator. Keys
// that only dcsync writes (fencing counters, identity cells) use IdentityKey, which is
// unambiguous for every input. FuzzLayout checks both.
package layout

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// Prefix returns the row-key salt byte of the Java libraries: OneByteSimpleHash(256)
// from HBaseWD, that is Java's Arrays.hashCode over the key's bytes taken as signed,
// then Math.abs, then mod 256.
func Prefix(logical []byte) byte {
	h := int32(1)
	for _, b := range logical {
		h = 31*h + int32(int8(b))
	}
	if h < 0 && h != -1<<31 {
		h = -h
	}
	return byte(int64(h) % 256)
}

// SplitKeys returns the 256 one-byte split keys 0x00..0xFF the Java libraries pass when
// they create a table.
func SplitKeys() [][]byte {
	keys := make([][]byte, 256)
	for i := range keys {
		keys[i] = []byte{byte(i)}
	}
	return keys
}

// Salt prepends Prefix(logical) to logical.
func Salt(logical string) []byte {
	row := make([]byte, 0, 1+len(logical))
	row = append(row, Prefix([]byte(logical)))
	return append(row, logical...)
}

// Unsalt checks row's prefix byte and returns the logical key.
func Unsalt(row []byte) (string, bool) {
	if len(row) < 1 || Prefix(row[1:]) != row[0] {
		return "", false
	}
	return string(row[1:]), true
}

// HBase latch layout: table D_LTCH_<suffix>, family C, row prefix+<client>_<latch>,
// qualifier count_<farm>, value an 8-byte big-endian signed long.
const (
	HBaseLatchTablePrefix = "D_LTCH_"
	HBaseLatchFamily      = "C"
	HBaseLatchQualPrefix  = "count_"
)

// HBaseLatchTable returns the latch table name for a suffix.
func HBaseLatchTable(suffix string) string { return HBaseLatchTablePrefix + suffix }

// HBaseLatchRow returns the salted row key of a latch.
func HBaseLatchRow(client, latch string) []byte { return Salt(client + "_" + latch) }

// AmbiguousHBaseLatchRow reports whether another (client, latch) pair can have the same
// row: when the joined key holds more than one '_' ("a_b"+"c" and "a"+"b_c").
func AmbiguousHBaseLatchRow(client, latch string) bool {
	return strings.Count(client, "_")+strings.Count(latch, "_") > 0
}

// ParseHBaseLatchRow splits a latch row at its first '_' (see AmbiguousHBaseLatchRow).
func ParseHBaseLatchRow(row []byte) (client, latch string, ok bool) {
	s, ok := Unsalt(row)
	if !ok {
		return "", "", false
	}
	client, latch, ok = strings.Cut(s, "_")
	return client, latch, ok
}

// HBaseLatchQualifier returns the count column of a farm.
func HBaseLatchQualifier(farm string) []byte { return []byte(HBaseLatchQualPrefix + farm) }

// ParseHBaseLatchQualifier inverts HBaseLatchQualifier.
func ParseHBaseLatchQualifier(q []byte) (farm string, ok bool) {
	if !bytes.HasPrefix(q, []byte(HBaseLatchQualPrefix)) {
		return "", false
	}
	return string(q[len(HBaseLatchQualPrefix):]), true
}

// HBase lock layout: family D, qualifier L, row prefix + DC#<farm>#<client>#<lock> or
// XDC#<client>#<lock> (the Java manager makes the lock id <client>#<lock>).
const (
	HBaseLockFamily    = "D"
	HBaseLockQualifier = "L"
)

// LockID is the Java lock manager's lock id: <client>#<lock>.
func LockID(client, lock string) string { return client + "#" + lock }

// HBaseLockRow returns the salted row key of a lock.
func HBaseLockRow(k dcsync.Key) []byte {
	if k.Level == dcsync.XDC {
		return Salt("XDC#" + LockID(k.Client, k.Name))
	}
	return Salt("DC#" + k.Farm + "#" + LockID(k.Client, k.Name))
}

// AmbiguousLockKey reports whether another key can have the same Java lock key (HBase
// row, Aerospike user key): when its farm (DC), client or name holds a '#'. Client "a#b"
// with lock "c" and client "a" with lock "b#c" are one lock to the Java libraries.
func AmbiguousLockKey(k dcsync.Key) bool {
	return strings.Contains(k.Client+k.Name, "#") || k.Level == dcsync.DC && strings.Contains(k.Farm, "#")
}

// ParseHBaseLockRow splits a lock row at the first '#' after its level (and farm), see
// AmbiguousLockKey. For an XDC row the returned key has no Farm.
func ParseHBaseLockRow(row []byte) (dcsync.Key, bool) {
	s, ok := Unsalt(row)
	if !ok {
		return dcsync.Key{}, false
	}
	var k dcsync.Key
	switch {
	case strings.HasPrefix(s, "XDC#"):
		k.Level, s = dcsync.XDC, s[len("XDC#"):]
	case strings.HasPrefix(s, "DC#"):
		k.Level, s = dcsync.DC, s[len("DC#"):]
		if k.Farm, s, ok = strings.Cut(s, "#"); !ok {
			return dcsync.Key{}, false
		}
	default:
		return dcsync.Key{}, false
	}
	if k.Client, k.Name, ok = strings.Cut(s, "#"); !ok {
		return dcsync.Key{}, false
	}
	return k, true
}

// Aerospike latch layout: set D_LTCH#<suffix>, string key D_LTCH#<client>#<latch>,
// integer bin count#<farm>.
const (
	AerospikeLatchPrefix    = "D_LTCH#"
	AerospikeLatchBinPrefix = "count#"
	// MaxBinName is Aerospike's longest bin name, in bytes.
	MaxBinName = 15
	// MaxSetName is Aerospike's longest set name, in bytes.
	MaxSetName = 63
)

// AerospikeLatchSet returns the latch set name for a suffix.
func AerospikeLatchSet(suffix string) string { return AerospikeLatchPrefix + suffix }

// AerospikeLatchKey returns the user key of a latch record.
func AerospikeLatchKey(client, latch string) string {
	return AerospikeLatchPrefix + client + "#" + latch
}

// AmbiguousAerospikeLatchKey reports whether another (client, latch) pair can have the
// same user key: when the client or latch holds a '#' ("a#b"+"c" and "a"+"b#c").
func AmbiguousAerospikeLatchKey(client, latch string) bool {
	return strings.Contains(client+latch, "#")
}

// ParseAerospikeLatchKey splits a latch key at the first '#' after the prefix (see
// AmbiguousAerospikeLatchKey).
func ParseAerospikeLatchKey(key string) (client, latch string, ok bool) {
	s, ok := strings.CutPrefix(key, AerospikeLatchPrefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(s, "#")
}

// AerospikeLatchBin returns the count bin of a farm.
func AerospikeLatchBin(farm string) string { return AerospikeLatchBinPrefix + farm }

// ParseAerospikeLatchBin inverts AerospikeLatchBin.
func ParseAerospikeLatchBin(bin string) (farm string, ok bool) {
	return strings.CutPrefix(bin, AerospikeLatchBinPrefix)
}

// AerospikeLockSet returns the lock set: DC#<farm>#<suffix> or XDC#<suffix>.
func AerospikeLockSet(level dcsync.Level, farm, suffix string) string {
	if level == dcsync.XDC {
		return "XDC#" + suffix
	}
	return "DC#" + farm + "#" + suffix
}

// AerospikeLockKey returns the user key of a lock record: <client>#<lock>.
func AerospikeLockKey(client, lock string) string { return LockID(client, lock) }

// ParseAerospikeLockKey splits a lock key at its first '#' (see AmbiguousLockKey).
func ParseAerospikeLockKey(key string) (client, lock string, ok bool) {
	return strings.Cut(key, "#")
}

// AerospikeLockDataBin is the Java lock's marker bin, <farm>##data (value 1).
func AerospikeLockDataBin(farm string) string { return farm + "##data" }

// AerospikeLockUATBin is the Java lock's acquired-at bin, <farm>##uat (epoch ms).
func AerospikeLockUATBin(farm string) string { return farm + "##uat" }

// CheckAerospikeKey returns InvalidArgument when k's farm would make a bin name longer
// than MaxBinName, or the set name for suffix longer than MaxSetName.
func CheckAerospikeKey(k dcsync.Key, latchSuffix, lockSuffix string) error {
	for _, bin := range []string{AerospikeLatchBin(k.Farm), AerospikeLockDataBin(k.Farm), AerospikeLockUATBin(k.Farm)} {
		if len(bin) > MaxBinName {
			return driver.Errorf(dcsync.InvalidArgument, "aerospike.Validate",
				"farm id %q makes bin name %q longer than %d bytes", k.Farm, bin, MaxBinName)
		}
	}
	for _, set := range []string{AerospikeLatchSet(latchSuffix), AerospikeLockSet(k.Level, k.Farm, lockSuffix)} {
		if len(set) > MaxSetName {
			return driver.Errorf(dcsync.InvalidArgument, "aerospike.Validate",
				"set name %q is longer than %d bytes", set, MaxSetName)
		}
	}
	return nil
}

// IdentityKey encodes k unambiguously for keys that only dcsync writes: the level, then
// each id with its byte length ("DC:3:dc15:orders7:batch-1"; XDC leaves the farm out).
// Distinct keys always give distinct strings, whatever their ids hold.
func IdentityKey(k dcsync.Key) string {
	var b strings.Builder
	b.WriteString(k.Level.String())
	b.WriteByte(':')
	if k.Level == dcsync.DC {
		lenPrefixed(&b, k.Farm)
	}
	lenPrefixed(&b, k.Client)
	lenPrefixed(&b, k.Name)
	return b.String()
}

func lenPrefixed(b *strings.Builder, s string) {
	b.WriteString(strconv.Itoa(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
}

// ParseIdentityKey inverts IdentityKey. For an XDC key the returned key has no Farm.
func ParseIdentityKey(s string) (dcsync.Key, bool) {
	var k dcsync.Key
	lv, rest, ok := strings.Cut(s, ":")
	if !ok {
		return k, false
	}
	switch lv {
	case "DC":
		k.Level = dcsync.DC
		if k.Farm, rest, ok = cutLenPrefixed(rest); !ok {
			return dcsync.Key{}, false
		}
	case "XDC":
		k.Level = dcsync.XDC
	default:
		return k, false
	}
	if k.Client, rest, ok = cutLenPrefixed(rest); !ok {
		return dcsync.Key{}, false
	}
	if k.Name, rest, ok = cutLenPrefixed(rest); !ok || rest != "" {
		return dcsync.Key{}, false
	}
	return k, true
}

func cutLenPrefixed(s string) (field, rest string, ok bool) {
	ns, rest, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", false
	}
	n, err := strconv.Atoi(ns)
	if err != nil || n < 0 || n > len(rest) || strconv.Itoa(n) != ns {
		return "", "", false
	}
	return rest[:n], rest[n:], true
}
