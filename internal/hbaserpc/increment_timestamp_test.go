package hbaserpc

import "testing"

// TestIncrementTimestamp: Increment.Timestamp is sent as every delta's cell version (the
// version HBase gives a counter the Increment creates); zero sends none (the server's
// time), and a negative one is refused before any I/O.
func TestIncrementTimestamp(t *testing.T) {
	f := []byte("f")
	inc := &Increment{Row: []byte("r"), Deltas: []Delta{{f, []byte("a"), 1}, {f, []byte("b"), 2}}, Timestamp: 1 << 62}
	mp, err := inc.toProto(7)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cv := range mp.GetColumnValue() {
		for _, qv := range cv.GetQualifierValue() {
			n++
			if qv.Timestamp == nil || qv.GetTimestamp() != 1<<62 {
				t.Errorf("delta %s: timestamp %v, want 2^62", qv.GetQualifier(), qv.Timestamp)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d deltas encoded, want 2", n)
	}
	inc.Timestamp = 0
	mp, err = inc.toProto(7)
	if err != nil {
		t.Fatal(err)
	}
	for _, cv := range mp.GetColumnValue() {
		for _, qv := range cv.GetQualifierValue() {
			if qv.Timestamp != nil {
				t.Errorf("delta %s: timestamp %d sent without one set", qv.GetQualifier(), qv.GetTimestamp())
			}
		}
	}
	inc.Timestamp = -1
	if _, err := inc.toProto(7); err == nil {
		t.Error("a negative timestamp was accepted")
	}
}
