package aerotest

import (
	"fmt"
	"math"
	"time"
)

// request is one single-record command (a plain AS_MSG or one batch row).
type request struct {
	info1, info2, info3, info4 byte
	generation                 uint32
	ttl                        uint32
	ns, set                    string
	hasDigest                  bool
	digest                     [20]byte
	key                        *userKey
	filter                     []byte // msgpack filter expression, nil if none
	ops                        []wireOp
}

// result is the outcome of a request.
type result struct {
	rc       byte
	gen      uint32
	voidTime uint32
	ops      []replyOp
}

func (q *request) isWrite() bool  { return q.info2&info2Write != 0 }
func (q *request) isDelete() bool { return q.info2&info2Delete != 0 }

// describe builds the public Command description of q.
func (q *request) describe(kind CommandKind) Command {
	c := Command{Kind: kind, Namespace: q.ns, Set: q.set, Digest: q.digest, Write: q.isWrite()}
	if q.key != nil {
		c.Key = q.key.value()
	}
	for _, o := range q.ops {
		c.Ops = append(c.Ops, opName(o.op))
	}
	return c
}

func (q *request) kind() CommandKind {
	switch {
	case q.isWrite() && q.isDelete():
		return KindDelete
	case q.isWrite():
		return KindWrite
	}
	return KindRead
}

// requestFromMsg extracts a single-record request from an AS_MSG.
func requestFromMsg(m *asMsg) (*request, *opError) {
	q := &request{
		info1: m.hdr.info1, info2: m.hdr.info2, info3: m.hdr.info3, info4: m.hdr.info4,
		generation: m.hdr.generation, ttl: m.hdr.ttl, ops: m.ops,
	}
	if err := q.applyFields(m.fields); err != nil {
		return nil, err
	}
	if !q.hasDigest {
		return nil, fail(rcParameter, "no digest field")
	}
	return q, nil
}

func (q *request) applyFields(fields []wireField) *opError {
	for _, f := range fields {
		switch f.typ {
		case fieldNamespace:
			q.ns = string(f.data)
		case fieldSet:
			q.set = string(f.data)
		case fieldDigest:
			if len(f.data) != 20 {
				return fail(rcParameter, "digest field is not 20 bytes")
			}
			copy(q.digest[:], f.data)
			q.hasDigest = true
		case fieldKey:
			if len(f.data) < 1 {
				return fail(rcParameter, "empty key field")
			}
			q.key = &userKey{ptype: f.data[0], data: append([]byte(nil), f.data[1:]...)}
		case fieldFilterExpr:
			q.filter = f.data
		default:
			return unsupported(fmt.Sprintf("field type %d", f.typ))
		}
	}
	return nil
}

// execute runs q atomically against the store. The caller holds s.mu.
func (s *Server) execute(q *request) result {
	now := s.now()
	res, err := s.executeLocked(q, now)
	if err != nil {
		if err.unsupported {
			s.log.Warn("aerotest: unsupported request", "reason", err.reason, "namespace", q.ns, "set", q.set)
		} else {
			s.log.Debug("aerotest: command failed", "rc", err.rc, "reason", err.reason)
		}
		res.rc = err.rc
		res.ops = nil
	}
	return res
}

func metaOf(r *record) result {
	if r == nil {
		return result{}
	}
	return result{gen: r.gen, voidTime: r.voidTime}
}

func (s *Server) executeLocked(q *request, now time.Time) (result, *opError) {
	ns := s.namespaces[q.ns]
	if ns == nil {
		return result{}, fail(rcInvalidNamespace, "unknown namespace "+q.ns)
	}
	for _, o := range q.ops {
		if len(o.name) > maxBinNameLen {
			return result{}, fail(rcBinNameTooLong, "bin name too long: "+o.name)
		}
	}
	rec := ns.lookup(q.digest, now)

	if !q.isWrite() {
		return s.read(q, rec, now)
	}
	if q.ttl != ttlNamespaceDefault && q.ttl != ttlNeverExpire && q.ttl != ttlDontUpdate && q.ttl > maxTTL {
		return result{}, fail(rcParameter, fmt.Sprintf("ttl %d exceeds max-ttl", q.ttl))
	}

	// Generation check: a missing record has generation 0.
	var cur uint32
	if rec != nil {
		cur = rec.gen
	}
	if q.info2&info2Generation != 0 && q.generation != cur {
		return metaOf(rec), fail(rcGeneration, "generation mismatch")
	}
	if q.info2&info2GenGT != 0 && q.generation <= cur {
		return metaOf(rec), fail(rcGeneration, "generation not greater")
	}

	if q.isDelete() {
		if rec == nil {
			return result{}, fail(rcKeyNotFound, "delete: not found")
		}
		if err := s.applyFilter(q, rec, now); err != nil {
			return metaOf(rec), err
		}
		delete(ns.records, q.digest)
		return result{}, nil
	}

	replace := q.info3&(info3CreateOrRe|info3ReplaceOnl) != 0
	if rec == nil {
		if q.info3&(info3UpdateOnly|info3ReplaceOnl) != 0 {
			return result{}, fail(rcKeyNotFound, "update-only: not found")
		}
	} else {
		if q.info2&info2CreateOnly != 0 {
			return metaOf(rec), fail(rcKeyExists, "create-only: exists")
		}
		// The server does not evaluate filters on a record being created.
		if err := s.applyFilter(q, rec, now); err != nil {
			return metaOf(rec), err
		}
	}

	var work *record
	if rec == nil {
		// Like the server, the set name is validated when a record is created.
		if len(q.set) > maxSetNameLen {
			return result{}, fail(rcParameter, "set name too long")
		}
		work = &record{set: q.set}
	} else {
		work = rec.clone()
	}
	if replace {
		for _, o := range q.ops {
			if o.op != opWrite {
				return metaOf(rec), fail(rcParameter, "replace with non-write op "+opName(o.op))
			}
		}
		work.bins = nil
	}
	if q.key != nil {
		work.key = q.key
	}

	respondAll := q.info2&info2RespondAll != 0
	var out []replyOp
	for _, o := range q.ops {
		ro, err := s.applyOp(q, work, rec == nil, o, respondAll)
		if err != nil {
			return metaOf(rec), err
		}
		out = append(out, ro...)
	}

	if len(work.bins) == 0 {
		// A write leaving no bins deletes the record (or creates nothing).
		if rec != nil {
			delete(ns.records, q.digest)
		}
		return result{ops: out}, nil
	}

	switch q.ttl {
	case ttlDontUpdate:
		if rec == nil {
			work.voidTime = s.defaultVoidTime(now)
		}
	case ttlNamespaceDefault:
		work.voidTime = s.defaultVoidTime(now)
	case ttlNeverExpire:
		work.voidTime = 0
	default:
		work.voidTime = uint32(nowCL(now) + int64(q.ttl))
	}
	work.gen = nextGeneration(cur)
	work.lastUpdate = now
	ns.records[q.digest] = work
	return result{gen: work.gen, voidTime: work.voidTime, ops: out}, nil
}

func (s *Server) defaultVoidTime(now time.Time) uint32 {
	if s.opts.DefaultTTL <= 0 {
		return 0
	}
	return uint32(nowCL(now) + int64(s.opts.DefaultTTL/time.Second))
}

func (s *Server) applyFilter(q *request, rec *record, now time.Time) *opError {
	if len(q.filter) == 0 {
		return nil
	}
	ok, err := evalFilter(q.filter, &exprEnv{rec: rec, digest: q.digest, now: now})
	if err != nil {
		return err
	}
	if !ok {
		return fail(rcFilteredOut, "filtered out")
	}
	return nil
}

func allBins(op byte, r *record) []replyOp {
	out := make([]replyOp, 0, len(r.bins))
	for _, b := range r.bins {
		out = append(out, replyOp{op: op, name: b.name, val: b.val})
	}
	return out
}

// read executes a command without the WRITE flag.
func (s *Server) read(q *request, rec *record, now time.Time) (result, *opError) {
	if rec == nil {
		return result{}, fail(rcKeyNotFound, "read: not found")
	}
	if err := s.applyFilter(q, rec, now); err != nil {
		return metaOf(rec), err
	}
	res := metaOf(rec)
	noBins := q.info1&info1NoBinData != 0
	if len(q.ops) == 0 {
		if q.info1&info1GetAll != 0 && !noBins {
			res.ops = allBins(opRead, rec)
		}
		return res, nil
	}
	respondAll := q.info2&info2RespondAll != 0
	for _, o := range q.ops {
		switch o.op {
		case opRead, opCDTRead:
			ro, err := s.applyOp(q, rec, false, o, respondAll)
			if err != nil {
				return res, err
			}
			res.ops = append(res.ops, ro...)
		case opExpRead, opBitRead, opHLLRead:
			return res, unsupported("read op " + opName(o.op))
		default:
			return res, fail(rcParameter, "write op "+opName(o.op)+" in a read command")
		}
	}
	return res, nil
}

// applyOp applies one op to work (the working copy of the record) and
// returns the reply ops it produces.
func (s *Server) applyOp(q *request, work *record, created bool, o wireOp, respondAll bool) ([]replyOp, *opError) {
	null := func() []replyOp {
		if respondAll {
			return []replyOp{{op: o.op, name: o.name}}
		}
		return nil
	}
	switch o.op {
	case opRead:
		if o.name == "" {
			if q.info1&info1NoBinData != 0 {
				return nil, nil
			}
			return allBins(opRead, work), nil
		}
		v, ok := work.get(o.name)
		if !ok && !respondAll {
			return nil, nil
		}
		return []replyOp{{op: opRead, name: o.name, val: v}}, nil

	case opWrite:
		v, err := particleToValue(o.ptype, o.data)
		if err != nil {
			return nil, fail(rcParameter, "write: "+err.Error())
		}
		work.setBin(o.name, v)
		return null(), nil

	case opIncr:
		delta, err := particleToValue(o.ptype, o.data)
		if err != nil {
			return nil, fail(rcParameter, "add: "+err.Error())
		}
		cur, ok := work.get(o.name)
		switch d := delta.(type) {
		case int64:
			if !ok {
				work.setBin(o.name, d)
				break
			}
			c, isInt := cur.(int64)
			if !isInt {
				return nil, fail(rcBinTypeError, "add: bin "+o.name+" is not an integer")
			}
			work.setBin(o.name, c+d)
		case float64:
			if !ok {
				work.setBin(o.name, d)
				break
			}
			c, isFloat := cur.(float64)
			if !isFloat {
				return nil, fail(rcBinTypeError, "add: bin "+o.name+" is not a float")
			}
			sum := c + d
			if math.IsInf(sum, 0) || math.IsNaN(sum) {
				return nil, fail(rcParameter, "add: float overflow")
			}
			work.setBin(o.name, sum)
		default:
			return nil, fail(rcParameter, "add: value is not numeric")
		}
		return null(), nil

	case opAppend, opPrepend:
		v, err := particleToValue(o.ptype, o.data)
		if err != nil {
			return nil, fail(rcParameter, "append: "+err.Error())
		}
		cur, ok := work.get(o.name)
		if !ok {
			work.setBin(o.name, v)
			return null(), nil
		}
		join := func(a, b string) string {
			if o.op == opAppend {
				return a + b
			}
			return b + a
		}
		switch x := v.(type) {
		case string:
			c, isStr := cur.(string)
			if !isStr {
				return nil, fail(rcBinTypeError, "append: bin is not a string")
			}
			work.setBin(o.name, join(c, x))
		case blobVal:
			c, isBlob := cur.(blobVal)
			if !isBlob || c.ptype != ptBlob || x.ptype != ptBlob {
				return nil, fail(rcBinTypeError, "append: bin is not a blob")
			}
			work.setBin(o.name, blobVal{ptype: ptBlob, b: join(c.b, x.b)})
		default:
			return nil, fail(rcParameter, "append: value is not a string or blob")
		}
		return null(), nil

	case opTouch:
		if created {
			return nil, fail(rcKeyNotFound, "touch: not found")
		}
		return null(), nil

	case opDelete:
		work.bins = nil
		return null(), nil

	case opCDTRead, opCDTModify:
		cur, ok := work.get(o.name)
		if !ok {
			cur = nil
		}
		nv, res, changed, err := applyCDT(o, cur, s)
		if err != nil {
			return nil, err
		}
		if changed {
			work.setBin(o.name, nv)
		}
		if res == nil && !respondAll {
			return nil, nil
		}
		return []replyOp{{op: o.op, name: o.name, val: res}}, nil

	case opExpRead, opExpModify, opBitRead, opBitModify, opHLLRead, opHLLModify:
		return nil, unsupported("op " + opName(o.op))
	}
	return nil, unsupported(fmt.Sprintf("op type %d", o.op))
}
