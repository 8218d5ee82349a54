package election

import (
	"bytes"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []record{{}, {token: 1, value: "a"}, {token: 1<<64 - 1, value: string(make([]byte, MaxValue))}} {
		got, err := decodeRecord(r.encode())
		if err != nil || got != r {
			t.Fatalf("decode(encode(%d, %d bytes)) = %d, %d bytes, %v", r.token, len(r.value), got.token, len(got.value), err)
		}
	}
	if len((record{value: string(make([]byte, MaxValue))}).encode()) != 16<<10 {
		t.Fatal("a record of MaxValue bytes does not fill a register exactly")
	}
	for _, b := range [][]byte{nil, {}, {1, 0, 0, 0, 0, 0, 0, 0}, {2, 0, 0, 0, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 0, 1}} {
		if _, err := decodeRecord(b); err == nil {
			t.Fatalf("decode(%v) accepted", b)
		}
	}
}

// FuzzDecodeRecord: decoding never panics, and what it accepts encodes back to the same
// bytes (one encoding per record).
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte{})
	f.Add(record{token: 7, value: "leader"}.encode())
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 9, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		if !bytes.Equal(r.encode(), b) {
			t.Fatalf("decode(%x) = %+v, which encodes to %x", b, r, r.encode())
		}
	})
}
