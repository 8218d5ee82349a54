package driver

import (
	"encoding/binary"
	"fmt"
	"github.com/dcsync/dcsync"
	"math"
)

// Limits of QueueOffset.Marks.
const (
	// MaxQueueMarks bounds the entries a QueueOffset's Marks describe. A consumer
	// keeps at most this many entries above its offset in flight or acked out of order.
	MaxQueueMarks = 1024
	// MaxQueueMarksLen bounds the encoded length of QueueOffset.Marks, in bytes.
	MaxQueueMarksLen = MaxQueueMarks * (binary.MaxVarintLen64 + binary.MaxVarintLen32)
)

// QueueMarks is the encoded state of entries above a partition's offset (see
// QueueOffset.Marks): opaque to stores, which keep it verbatim. The empty string means
// no marks.
type QueueMarks string

// QueueMark is the persisted state of one entry above the offset.
type QueueMark struct {
	// Seq is the entry's sequence number, above the offset's Next.
	Seq uint64
	// Acked reports that the entry was acked: it is never delivered again.
	Acked bool
	// Attempts counts the entry's failed deliveries (0 when Acked).
	Attempts int
}

// EncodeQueueMarks encodes marks, sorted by Seq, each above next, relative to next.
// Marks with neither Acked nor Attempts are left out. It returns InvalidArgument for
// marks out of order, at or below next, with negative attempts, or more than
// MaxQueueMarks of them.
func EncodeQueueMarks(next uint64, marks []QueueMark) (QueueMarks, error) {
	const op = "dcsync.EncodeQueueMarks"
	var b []byte
	n, prev := 0, next
	for _, m := range marks {
		if m.Seq <= prev {
			return "", Errorf(dcsync.InvalidArgument, op, "mark at seq %d is not above %d (marks must be sorted and above the offset)", m.Seq, prev)
		}
		if m.Attempts < 0 || m.Attempts > math.MaxInt32 {
			return "", Errorf(dcsync.InvalidArgument, op, "mark at seq %d has attempts %d, outside [0, %d]", m.Seq, m.Attempts, math.MaxInt32)
		}
		if !m.Acked && m.Attempts == 0 {
			continue
		}
		if n++; n > MaxQueueMarks {
			return "", Errorf(dcsync.InvalidArgument, op, "more than %d marks", MaxQueueMarks)
		}
		b = binary.AppendUvarint(b, m.Seq-prev)
		v := uint64(m.Attempts) << 1
		if m.Acked {
			v = 1
		}
		b = binary.AppendUvarint(b, v)
		prev = m.Seq
	}
	return QueueMarks(b), nil
}

// Decode returns the marks encoded relative to next, sorted by Seq. Marks that are not
// a valid encoding (never written by EncodeQueueMarks) give an Internal error.
func (qm QueueMarks) Decode(next uint64) ([]QueueMark, error) {
	if qm == "" {
		return nil, nil
	}
	if len(qm) > MaxQueueMarksLen {
		return nil, Errorf(dcsync.Internal, "dcsync.QueueMarks.Decode", "marks of %d bytes, above %d", len(qm), MaxQueueMarksLen)
	}
	b := []byte(qm)
	var out []QueueMark
	prev := next
	for len(b) > 0 {
		d, n := binary.Uvarint(b)
		if n <= 0 || n != uvarintLen(d) || d == 0 || prev+d < prev {
			return nil, Errorf(dcsync.Internal, "dcsync.QueueMarks.Decode", "bad mark seq at byte %d", len(qm)-len(b))
		}
		b = b[n:]
		v, n := binary.Uvarint(b)
		if n <= 0 || n != uvarintLen(v) || v == 0 || (v&1 == 1 && v != 1) || v>>1 > math.MaxInt32 {
			return nil, Errorf(dcsync.Internal, "dcsync.QueueMarks.Decode", "bad mark state at byte %d", len(qm)-len(b))
		}
		b = b[n:]
		prev += d
		if len(out) == MaxQueueMarks {
			return nil, Errorf(dcsync.Internal, "dcsync.QueueMarks.Decode", "more than %d marks", MaxQueueMarks)
		}
		out = append(out, QueueMark{Seq: prev, Acked: v == 1, Attempts: int(v >> 1)})
	}
	return out, nil
}

// uvarintLen is the length of v's shortest (canonical) uvarint encoding.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// ValidateQueueMarks checks marks given to CommitQueueOffset (stores call it before any
// write).
func ValidateQueueMarks(op string, off QueueOffset) error {
	if len(off.Marks) > MaxQueueMarksLen {
		return Errorf(dcsync.InvalidArgument, op, "marks of %d bytes, above %d", len(off.Marks), MaxQueueMarksLen)
	}
	if _, err := off.Marks.Decode(off.Next); err != nil {
		return Errorf(dcsync.InvalidArgument, op, "marks are not an encoding of EncodeQueueMarks: %v", err)
	}
	return nil
}

// String describes the marks for logs and test failures.
func (qm QueueMarks) String() string {
	if qm == "" {
		return "[]"
	}
	return fmt.Sprintf("%x", string(qm))
}
