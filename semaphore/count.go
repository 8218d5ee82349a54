package semaphore

import (
	"encoding/binary"
	"fmt"
)

// countVersion is the first byte of every encoded count record.
const countVersion = 1

// count is the record a semaphore's register holds.
type count struct {
	// N is the number of permits: slots 0 to N-1 may be granted.
	N int
	// Max is the largest N the register ever held: slots N to Max-1 may still be held
	// by permits granted before a shrink. Max >= N.
	Max int
}

// encode returns the register value of c: the version byte, then N and Max as unsigned
// varints.
func (c count) encode() []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64)
	b = append(b, countVersion)
	b = binary.AppendUvarint(b, uint64(c.N))
	return binary.AppendUvarint(b, uint64(c.Max))
}

// decodeCount parses a register value written by encode. It accepts exactly the values
// encode returns for a valid count (1 <= N <= Max <= MaxPermits, minimal varints, no
// trailing bytes) and refuses anything else with an error.
func decodeCount(b []byte) (count, error) {
	if len(b) == 0 {
		return count{}, fmt.Errorf("empty count record")
	}
	if b[0] != countVersion {
		return count{}, fmt.Errorf("count record of version %d (this build reads version %d)", b[0], countVersion)
	}
	rest := b[1:]
	var vals [2]uint64
	for i := range vals {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return count{}, fmt.Errorf("count record truncated or overlong")
		}
		if n != len(binary.AppendUvarint(nil, v)) {
			return count{}, fmt.Errorf("count record has a non-minimal varint")
		}
		vals[i], rest = v, rest[n:]
	}
	if len(rest) != 0 {
		return count{}, fmt.Errorf("count record has %d trailing bytes", len(rest))
	}
	if vals[0] < 1 || vals[0] > MaxPermits || vals[1] < vals[0] || vals[1] > MaxPermits {
		return count{}, fmt.Errorf("count record holds N %d and max %d: want 1 <= N <= max <= %d", vals[0], vals[1], MaxPermits)
	}
	return count{N: int(vals[0]), Max: int(vals[1])}, nil
}
