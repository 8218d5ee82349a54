package aerotest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Proto header: version(1)=2, type(1), body length(6).
const (
	protoVersion       = 2
	protoTypeInfo      = 1
	protoTypeMsg       = 3
	protoTypeMsgZlib   = 4
	msgHeaderSize      = 22
	maxFrameBodyLength = 128 << 20
)

// info1..info3 bits.
const (
	info1Read       = 1 << 0
	info1GetAll     = 1 << 1
	info1Batch      = 1 << 3
	info1NoBinData  = 1 << 5
	info1Compress   = 1 << 7
	info2Write      = 1 << 0
	info2Delete     = 1 << 1
	info2Generation = 1 << 2
	info2GenGT      = 1 << 3
	info2DurableDel = 1 << 4
	info2CreateOnly = 1 << 5
	info2RespondAll = 1 << 7
	info3Last       = 1 << 0
	info3UpdateOnly = 1 << 3
	info3CreateOrRe = 1 << 4
	info3ReplaceOnl = 1 << 5
)

// Field types.
const (
	fieldNamespace  = 0
	fieldSet        = 1
	fieldKey        = 2
	fieldDigest     = 4
	fieldBatch      = 41
	fieldBatchSet   = 42
	fieldFilterExpr = 43
)

// Op types.
const (
	opRead      = 1
	opWrite     = 2
	opCDTRead   = 3
	opCDTModify = 4
	opIncr      = 5
	opExpRead   = 7
	opExpModify = 8
	opAppend    = 9
	opPrepend   = 10
	opTouch     = 11
	opBitRead   = 12
	opBitModify = 13
	opDelete    = 14
	opHLLRead   = 15
	opHLLModify = 16
)

var opNames = map[byte]string{
	opRead: "read", opWrite: "write", opCDTRead: "cdt_read", opCDTModify: "cdt_modify",
	opIncr: "incr", opExpRead: "exp_read", opExpModify: "exp_modify", opAppend: "append",
	opPrepend: "prepend", opTouch: "touch", opBitRead: "bit_read", opBitModify: "bit_modify",
	opDelete: "delete", opHLLRead: "hll_read", opHLLModify: "hll_modify",
}

func opName(op byte) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("op%d", op)
}

type msgHeader struct {
	info1, info2, info3, info4 byte
	resultCode                 byte
	generation                 uint32
	ttl                        uint32 // request: TTL; reply: void time
	txnTTL                     uint32 // request: timeout ms; batch reply: row index
	nFields, nOps              uint16
}

type wireField struct {
	typ  byte
	data []byte
}

type wireOp struct {
	op, ptype, flags byte
	name             string
	data             []byte
}

type asMsg struct {
	hdr    msgHeader
	fields []wireField
	ops    []wireOp
}

type frame struct {
	typ  byte
	body []byte
}

// readFrame reads one proto frame. A compressed AS_MSG (type 4) is returned
// as is: Community Edition does not decompress requests.
func readFrame(r io.Reader) (frame, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	if h[0] != protoVersion {
		return frame{}, fmt.Errorf("bad proto version %d", h[0])
	}
	n := uint64(0)
	for _, c := range h[2:8] {
		n = n<<8 | uint64(c)
	}
	if n > maxFrameBodyLength {
		return frame{}, fmt.Errorf("frame body too large: %d", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return frame{}, err
	}
	return frame{typ: h[1], body: body}, nil
}

func appendProtoHeader(b []byte, typ byte, n int) []byte {
	b = append(b, protoVersion, typ)
	for i := 5; i >= 0; i-- {
		b = append(b, byte(uint64(n)>>(8*i)))
	}
	return b
}

func parseMsg(body []byte) (*asMsg, error) {
	if len(body) < msgHeaderSize || body[0] != msgHeaderSize {
		return nil, errors.New("bad AS_MSG header")
	}
	m := &asMsg{}
	h := &m.hdr
	h.info1, h.info2, h.info3, h.info4 = body[1], body[2], body[3], body[4]
	h.resultCode = body[5]
	h.generation = binary.BigEndian.Uint32(body[6:])
	h.ttl = binary.BigEndian.Uint32(body[10:])
	h.txnTTL = binary.BigEndian.Uint32(body[14:])
	h.nFields = binary.BigEndian.Uint16(body[18:])
	h.nOps = binary.BigEndian.Uint16(body[20:])
	p := body[msgHeaderSize:]
	var err error
	m.fields, p, err = parseFields(p, int(h.nFields))
	if err != nil && h.nOps == 0 {
		// The v8 client overstates the size of a batch field that follows a
		// filter field by the filter's size; the server reads the batch by
		// its own counts, so accept a last field that runs past the message.
		m.fields, p, err = parseFieldsLenient(body[msgHeaderSize:], int(h.nFields))
	}
	if err != nil {
		return nil, err
	}
	m.ops, p, err = parseOps(p, int(h.nOps))
	if err != nil {
		return nil, err
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%d trailing bytes after ops", len(p))
	}
	return m, nil
}

func parseFields(p []byte, n int) ([]wireField, []byte, error) {
	fs := make([]wireField, 0, n)
	for i := 0; i < n; i++ {
		if len(p) < 5 {
			return nil, nil, errors.New("truncated field header")
		}
		sz := int(binary.BigEndian.Uint32(p))
		if sz < 1 || 4+sz > len(p) {
			return nil, nil, errors.New("bad field size")
		}
		fs = append(fs, wireField{typ: p[4], data: p[5 : 4+sz]})
		p = p[4+sz:]
	}
	return fs, p, nil
}

// parseFieldsLenient is parseFields with the last field's size clamped to
// the bytes left.
func parseFieldsLenient(p []byte, n int) ([]wireField, []byte, error) {
	fs := make([]wireField, 0, n)
	for i := 0; i < n; i++ {
		if len(p) < 5 {
			return nil, nil, errors.New("truncated field header")
		}
		sz := int(binary.BigEndian.Uint32(p))
		if sz < 1 {
			return nil, nil, errors.New("bad field size")
		}
		if 4+sz > len(p) {
			if i != n-1 {
				return nil, nil, errors.New("bad field size")
			}
			sz = len(p) - 4
		}
		fs = append(fs, wireField{typ: p[4], data: p[5 : 4+sz]})
		p = p[4+sz:]
	}
	return fs, p, nil
}

func parseOps(p []byte, n int) ([]wireOp, []byte, error) {
	ops := make([]wireOp, 0, n)
	for i := 0; i < n; i++ {
		if len(p) < 8 {
			return nil, nil, errors.New("truncated op header")
		}
		sz := int(binary.BigEndian.Uint32(p))
		if sz < 4 || 4+sz > len(p) {
			return nil, nil, errors.New("bad op size")
		}
		nameLen := int(p[7])
		if 8+nameLen > 4+sz {
			return nil, nil, errors.New("bad op name length")
		}
		ops = append(ops, wireOp{
			op: p[4], ptype: p[5], flags: p[6],
			name: string(p[8 : 8+nameLen]),
			data: p[8+nameLen : 4+sz],
		})
		p = p[4+sz:]
	}
	return ops, p, nil
}

// replyOp is one op in a reply.
type replyOp struct {
	op   byte
	name string
	val  any
}

// appendMsg appends an AS_MSG (22-byte header plus ops, no fields) to b.
func appendMsg(b []byte, h msgHeader, ops []replyOp) []byte {
	b = append(b, msgHeaderSize, h.info1, h.info2, h.info3, h.info4, h.resultCode)
	b = binary.BigEndian.AppendUint32(b, h.generation)
	b = binary.BigEndian.AppendUint32(b, h.ttl)
	b = binary.BigEndian.AppendUint32(b, h.txnTTL)
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(ops)))
	for _, o := range ops {
		pt, data := valueToParticle(o.val)
		b = binary.BigEndian.AppendUint32(b, uint32(4+len(o.name)+len(data)))
		b = append(b, o.op, pt, 0, byte(len(o.name)))
		b = append(b, o.name...)
		b = append(b, data...)
	}
	return b
}

// msgFrame wraps one AS_MSG in a proto frame.
func msgFrame(h msgHeader, ops []replyOp) []byte {
	body := appendMsg(nil, h, ops)
	return append(appendProtoHeader(make([]byte, 0, 8+len(body)), protoTypeMsg, len(body)), body...)
}
