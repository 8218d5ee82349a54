package semaphore

import (
	"bytes"
	"testing"
)

func TestCountRoundTrip(t *testing.T) {
	for _, c := range []count{{1, 1}, {3, 10}, {MaxPermits, MaxPermits}, {127, 128}} {
		got, err := decodeCount(c.encode())
		if err != nil || got != c {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", c, got, err)
		}
	}
	for _, b := range [][]byte{nil, {}, {2, 1, 1}, {1, 0, 1}, {1, 2, 1}, {1, 1}, {1, 1, 1, 0}, {1, 0x81, 0x00, 1},
		{1, 1, 0x81, 0x10}, count{MaxPermits + 1, MaxPermits + 1}.encode()} {
		if c, err := decodeCount(b); err == nil {
			t.Errorf("decode(%x) = %+v, want an error", b, c)
		}
	}
}

// FuzzDecodeCount: decoding never panics, accepts only valid counts, and what it
// accepts is exactly what encode writes for them (one encoding per count).
func FuzzDecodeCount(f *testing.F) {
	f.Add(count{3, 5}.encode())
	f.Add([]byte{1, 0x80, 0x01, 0x80, 0x01})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCount(b)
		if err != nil {
			return
		}
		if c.N < 1 || c.N > c.Max || c.Max > MaxPermits {
			t.Fatalf("decode(%x) accepted invalid %+v", b, c)
		}
		if e := c.encode(); !bytes.Equal(e, b) {
			t.Fatalf("decode(%x) = %+v, which encodes as %x", b, c, e)
		}
	})
}
