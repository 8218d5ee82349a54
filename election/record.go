package election

import (
	"encoding/binary"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// recordVersion is the first byte of every record this package writes to a register.
const recordVersion = 1

// recordHeader is the size of a record's header: the version byte and the token.
const recordHeader = 1 + 8

// MaxValue is the largest leader value, in bytes: a register's limit less the record's
// header.
const MaxValue = driver.MaxRegisterValue - recordHeader

// record is what an election's register holds: the token of the leader that wrote it
// and that leader's value.
//
// Encoding (version 1): byte 0 is 1, bytes 1-8 the token (big-endian), the rest the
// value. A decoder refuses any other version, and a record shorter than the header.
type record struct {
	token uint64
	value string
}

func (r record) encode() []byte {
	b := make([]byte, recordHeader+len(r.value))
	b[0] = recordVersion
	binary.BigEndian.PutUint64(b[1:recordHeader], r.token)
	copy(b[recordHeader:], r.value)
	return b
}

// decodeRecord decodes a register's value; an empty (never written) register is not a
// record and is refused too.
func decodeRecord(b []byte) (record, error) {
	if len(b) < recordHeader {
		return record{}, driver.Errorf(dcsync.Internal, "election.decode", "register holds %d bytes, less than a record's %d-byte header", len(b), recordHeader)
	}
	if b[0] != recordVersion {
		return record{}, driver.Errorf(dcsync.Internal, "election.decode", "register holds a record of version %d; this dcsync reads version %d", b[0], recordVersion)
	}
	return record{token: binary.BigEndian.Uint64(b[1:recordHeader]), value: string(b[recordHeader:])}, nil
}

// recordToken returns the token of a record of any version: every version keeps it at
// bytes 1-8, big-endian, so that a Campaign of this version never replaces the record of
// a newer leader that a newer dcsync wrote. ok is false when b is shorter than a header.
func recordToken(b []byte) (token uint64, ok bool) {
	if len(b) < recordHeader {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[1:recordHeader]), true
}
