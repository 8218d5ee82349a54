package aerotest

// Server result codes (see the client's types/result_code.go).
const (
	rcOK                 = 0
	rcServerError        = 1
	rcKeyNotFound        = 2
	rcGeneration         = 3
	rcParameter          = 4
	rcKeyExists          = 5
	rcBinExists          = 6
	rcTimeout            = 9
	rcBinTypeError       = 12
	rcRecordTooBig       = 13
	rcUnsupportedFeature = 16
	rcKeyBusy            = 14
	rcBinNotFound        = 17
	rcKeyMismatch        = 19
	rcInvalidNamespace   = 20
	rcBinNameTooLong     = 21
	rcForbidden          = 22
	rcElementNotFound    = 23
	rcElementExists      = 24
	rcEnterpriseOnly     = 25
	rcOpNotApplicable    = 26
	rcFilteredOut        = 27
)

// opError is a command failure carrying an Aerospike result code.
type opError struct {
	rc     byte
	reason string
	// unsupported marks features the real server has but this fake lacks.
	unsupported bool
}

func (e *opError) Error() string { return e.reason }

func fail(rc byte, reason string) *opError { return &opError{rc: rc, reason: reason} }

func unsupported(reason string) *opError {
	return &opError{rc: rcUnsupportedFeature, reason: reason, unsupported: true}
}
