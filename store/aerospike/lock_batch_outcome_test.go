package aerospike

import (
	"testing"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"
)

// A batch record left OK with no record has no outcome: taken for one, it made
// InspectLocks dereference the nil record (a panic in the queue's scale benchmark at
// P = 4,096, C = 64) and would make a refresh count as done with nothing read back.
// Records never sent (NO_RESPONSE) have none either; a lock not found has one.
func TestBatchRecordWithoutARecordHasNoOutcome(t *testing.T) {
	key, err := as.NewKey("test", "set", "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []as.BatchRecordIfc{as.NewBatchRead(nil, key, nil), as.NewBatchWrite(nil, key, as.GetOp())} {
		br := r.BatchRec()
		if final(br) {
			t.Errorf("a %T never sent (result %v) counts as an outcome", r, br.ResultCode)
		}
		br.ResultCode, br.Record = types.OK, nil
		if final(br) {
			t.Errorf("a %T left OK with no record counts as an outcome", r)
		}
	}
	br := as.NewBatchRead(nil, key, nil).BatchRec()
	br.ResultCode = types.KEY_NOT_FOUND_ERROR
	if !final(br) {
		t.Error("KEY_NOT_FOUND_ERROR is not an outcome")
	}
	br.ResultCode, br.Record = types.OK, &as.Record{Key: key}
	if !final(br) {
		t.Error("OK with a record is not an outcome")
	}
}
