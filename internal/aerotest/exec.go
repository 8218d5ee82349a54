package aerotest

import (
	"bytes"
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
	hasSet                     bool
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
			q.hasSet = true
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

// metaOf is the generation and void-time an error reply carries: the server
// reports the record's metadata once it has found the record
// (write.c write_master, read.c read_local: "Set non-zero values").
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
	switch {
	case !q.isWrite():
		return s.read(q, ns, now)
	case q.isDelete():
		return s.deleteRecord(q, ns, now)
	}
	return s.write(q, ns, now)
}

// validBinName is the server's as_bin_name_check: fewer than 16 bytes, no NUL.
func validBinName(name string) bool {
	return len(name) <= maxBinNameLen && !bytes.ContainsRune([]byte(name), 0)
}

// setNameMatches is the server's set-name check for an existing record
// (rw_utils.c set_name_check, set_name_check_on_update). A read or delete
// may omit the set; a write that omits it must target a record in no set.
func (q *request) setNameMatches(r *record, write bool) bool {
	if q.set == "" {
		return !write || r.set == ""
	}
	return r.set == q.set
}

// keyMatches is the server's check of a sent key against a stored one
// (rw_utils.c check_msg_key).
func (q *request) keyMatches(r *record) bool {
	if q.key == nil || r.key == nil {
		return true
	}
	return q.key.ptype == r.key.ptype && bytes.Equal(q.key.data, r.key.data)
}

// isReadAll reports whether o is the read-all op (rw_utils.h op_is_read_all).
func (q *request) isReadAll(o wireOp) bool {
	return o.op == opRead && o.name == "" && q.info1&info1GetAll != 0
}

// writePolicies checks a write's ops before the record is looked up, as the
// server's write_master_policies does (write.c), and reports whether the
// write must not create the record and whether it replaces it.
func (q *request) writePolicies() (mustNotCreate, replace bool, err *opError) {
	if len(q.ops) == 0 {
		return false, false, fail(rcParameter, "write: no bin ops")
	}
	mustNotCreate = q.info3&(info3UpdateOnly|info3ReplaceOnl) != 0
	replace = q.info3&(info3CreateOrRe|info3ReplaceOnl) != 0
	respondAll := q.info2&info2RespondAll != 0
	var hasRead, hasReadAll, generates bool
	for _, o := range q.ops {
		if o.op == opTouch {
			if replace {
				return false, false, fail(rcParameter, "touch op with record-level replace")
			}
			mustNotCreate = true
			continue
		}
		if !validBinName(o.name) {
			return false, false, fail(rcBinNameTooLong, "bad bin name "+o.name)
		}
		switch {
		case o.op == opWrite:
			if o.ptype == ptNull && replace {
				return false, false, fail(rcParameter, "bin delete with record-level replace")
			}
		case o.op == opIncr || o.op == opAppend || o.op == opPrepend:
			if replace {
				return false, false, fail(rcParameter, "modify op with record-level replace")
			}
		case o.op == opDelete:
			if replace {
				return false, false, fail(rcParameter, "delete-all op with record-level replace")
			}
		case q.isReadAll(o):
			if respondAll {
				return false, false, fail(rcParameter, "read-all op with respond-all-ops flag")
			}
			if hasReadAll {
				return false, false, fail(rcParameter, "more than one read-all op")
			}
			hasRead, hasReadAll = true, true
		case o.op == opRead, o.op == opBitRead, o.op == opHLLRead, o.op == opCDTRead, o.op == opExpRead:
			hasRead, generates = true, true
		case o.op == opBitModify:
			if replace {
				return false, false, fail(rcParameter, "bits modify op with record-level replace")
			}
		case o.op == opHLLModify, o.op == opCDTModify:
			if replace {
				return false, false, fail(rcParameter, opName(o.op)+" op with record-level replace")
			}
			generates = true
		}
	}
	if hasRead && q.info1&info1Read == 0 {
		return false, false, fail(rcParameter, "read op without the read flag")
	}
	if hasReadAll && generates {
		// The real server's log: "read-all op can't mix with ops that generate response bins".
		return false, false, fail(rcParameter, "read-all op mixed with ops that generate response bins")
	}
	if q.info1&info1GetAll != 0 && !hasReadAll {
		return false, false, fail(rcParameter, "get-all flag without a read-all op")
	}
	return mustNotCreate, replace, nil
}

// validTTL is the server's is_valid_ttl (rw_utils.h).
func validTTL(ttl uint32) bool {
	return ttl <= maxTTL || ttl == ttlNeverExpire || ttl == ttlDontUpdate
}

// ttlDisallowed is the server's is_ttl_disallowed for a namespace without nsup.
func (s *Server) ttlDisallowed(ns *namespace, ttl uint32) bool {
	if !ns.nsupDisabled {
		return false
	}
	return (int32(ttl) > 0) || (ttl == ttlNamespaceDefault && s.opts.DefaultTTL > 0)
}

// write executes a command with the WRITE flag and without DELETE, following
// the order of the server's write_master (write.c).
func (s *Server) write(q *request, ns *namespace, now time.Time) (result, *opError) {
	mustNotCreate, replace, err := q.writePolicies()
	if err != nil {
		return result{}, err
	}
	rec := ns.lookup(q.digest, now, s.nsup)
	if rec == nil && mustNotCreate {
		return result{}, fail(rcKeyNotFound, "write: not found")
	}
	meta := metaOf(rec)
	if rec != nil && q.info2&info2CreateOnly != 0 {
		return meta, fail(rcKeyExists, "create-only: exists")
	}
	// Generation check: a missing record has generation 0.
	if err := q.checkGeneration(rec); err != nil {
		return meta, err
	}
	if rec == nil {
		if len(q.set) > maxSetNameLen {
			return result{}, fail(rcParameter, "set name too long")
		}
	} else {
		if !q.setNameMatches(rec, true) {
			return meta, fail(rcParameter, "set name mismatch")
		}
		// The server does not evaluate filters on a record being created.
		if err := s.applyFilter(q, rec, now); err != nil {
			return meta, err
		}
		if !q.keyMatches(rec) {
			return meta, fail(rcKeyMismatch, "key mismatch")
		}
	}
	ttl := q.ttl
	if ttl == ttlDontUpdate && rec == nil {
		ttl = ttlNamespaceDefault
	}
	if !validTTL(ttl) {
		return meta, fail(rcParameter, fmt.Sprintf("invalid ttl %d", ttl))
	}
	if s.ttlDisallowed(ns, ttl) {
		return meta, fail(rcForbidden, "ttl on a namespace with nsup-period 0")
	}

	var work *record
	if rec == nil {
		work = &record{set: q.set}
	} else {
		work = rec.clone()
	}
	if replace {
		work.bins = nil
	}
	if q.key != nil && work.key == nil {
		work.key = q.key
	}
	// The server sets the new void-time and last-update time before it
	// applies the ops, so expressions in them see the write's own TTL and a
	// since-update of 0 (write.c write_master_apply).
	switch ttl {
	case ttlDontUpdate:
	case ttlNamespaceDefault:
		work.voidTime = s.defaultVoidTime(now)
	case ttlNeverExpire:
		work.voidTime = 0
	default:
		work.voidTime = uint32(nowCL(now) + int64(ttl))
	}
	work.lastUpdate = time.UnixMilli(now.UnixMilli())
	resp, err := s.applyWriteOps(q, work, now)
	if err != nil {
		return meta, err
	}

	if len(work.bins) == 0 {
		// A write leaving no bins deletes the record; on a record that did
		// not exist that is "not found" (write.c write_master_apply).
		if rec == nil || len(rec.bins) == 0 {
			return meta, fail(rcKeyNotFound, "write leaves no bins on a missing record")
		}
		if q.info2&info2DurableDel != 0 {
			return meta, fail(rcEnterpriseOnly, "durable delete is an enterprise feature")
		}
		delete(ns.records, q.digest)
		// Deletes don't return metadata.
		return result{ops: resp}, nil
	}

	var cur uint32
	if rec != nil {
		cur = rec.gen
	}
	work.gen = nextGeneration(cur)
	ns.records[q.digest] = work
	return result{gen: work.gen, voidTime: work.voidTime, ops: resp}, nil
}

func (q *request) checkGeneration(rec *record) *opError {
	var cur uint32
	if rec != nil {
		cur = rec.gen
	}
	if q.info2&info2Generation != 0 && q.generation != cur {
		return fail(rcGeneration, "generation mismatch")
	}
	if q.info2&info2GenGT != 0 && q.generation <= cur {
		return fail(rcGeneration, "generation not greater")
	}
	return nil
}

// deleteRecord executes a delete, as the server's as_delete_start and
// delete_master/drop_master do (delete.c): it finds an expired record nsup
// has not reaped yet and deletes it as a live one. Delete replies never
// carry metadata.
func (s *Server) deleteRecord(q *request, ns *namespace, now time.Time) (result, *opError) {
	if q.info2&info2DurableDel != 0 {
		return result{}, fail(rcEnterpriseOnly, "durable delete is an enterprise feature")
	}
	rec := ns.lookupForDelete(q.digest, now, s.nsup)
	if rec == nil {
		return result{}, fail(rcKeyNotFound, "delete: not found")
	}
	if !q.setNameMatches(rec, false) {
		return result{}, fail(rcParameter, "set name mismatch")
	}
	if err := q.checkGeneration(rec); err != nil {
		return result{}, err
	}
	if err := s.applyFilter(q, rec, now); err != nil {
		return result{}, err
	}
	if !q.keyMatches(rec) {
		return result{}, fail(rcKeyMismatch, "key mismatch")
	}
	delete(ns.records, q.digest)
	return result{}, nil
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

func allBins(r *record) []replyOp {
	out := make([]replyOp, 0, len(r.bins))
	for _, b := range r.bins {
		out = append(out, replyOp{op: opRead, name: b.name, val: b.val})
	}
	return out
}

// read executes a command without the WRITE flag, as the server's
// read_local does (read.c).
func (s *Server) read(q *request, ns *namespace, now time.Time) (result, *opError) {
	rec := ns.lookup(q.digest, now, s.nsup)
	if rec == nil {
		return result{}, fail(rcKeyNotFound, "read: not found")
	}
	res := metaOf(rec)
	if !q.setNameMatches(rec, false) {
		return res, fail(rcParameter, "set name mismatch")
	}
	if err := s.applyFilter(q, rec, now); err != nil {
		return res, err
	}
	if !q.keyMatches(rec) {
		return res, fail(rcKeyMismatch, "key mismatch")
	}
	if q.info1&info1NoBinData != 0 {
		return res, nil
	}
	if q.info1&info1GetAll != 0 {
		// Read-all answers every bin and ignores the ops: a read-only operate
		// of GetOp with map reads returns only the bins.
		res.ops = allBins(rec)
		return res, nil
	}
	if len(q.ops) == 0 {
		return res, fail(rcParameter, "read: no bin ops")
	}
	respondAll := q.info2&info2RespondAll != 0
	for _, o := range q.ops {
		if !validBinName(o.name) {
			return res, fail(rcBinNameTooLong, "bad bin name "+o.name)
		}
		ro, ok, err := s.readOp(rec, o, respondAll, q.digest, now)
		if err != nil {
			return res, err
		}
		if ok && (respondAll || ro.val != nil) {
			res.ops = append(res.ops, ro)
		}
	}
	return res, nil
}

// readOp is the server's process_bin_read_op (rw_utils.c) for the read ops
// aerotest models. ok is false when the op found no bin and RESPOND_ALL_OPS
// is not set (READ_OP_RESULT_NOT_FOUND): then it produces no reply entry.
func (s *Server) readOp(rec *record, o wireOp, respondAll bool, digest [20]byte, now time.Time) (ro replyOp, ok bool, err *opError) {
	switch o.op {
	case opRead, opCDTRead:
		cur, found := rec.get(o.name)
		if !found {
			return replyOp{op: o.op, name: o.name}, respondAll, nil
		}
		if o.op == opRead {
			return replyOp{op: opRead, name: o.name, val: cur}, true, nil
		}
		_, res, _, err := applyCDT(o, cur)
		if err != nil {
			return replyOp{}, false, err
		}
		return replyOp{op: o.op, name: o.name, val: res}, true, nil
	case opExpRead:
		v, flags, err := evalExpOp(o.data, &exprEnv{rec: rec, digest: digest, now: now})
		if err != nil {
			return replyOp{}, false, err
		}
		if flags&^expFlagEvalNoFail != 0 {
			return replyOp{}, false, fail(rcParameter, "expression read op: invalid flags")
		}
		if _, u := v.(unknownVal); u {
			if flags&expFlagEvalNoFail == 0 {
				return replyOp{}, false, fail(rcOpNotApplicable, "expression read op: unknown result")
			}
			v = nil
		}
		return replyOp{op: opExpRead, name: o.name, val: v}, true, nil
	case opBitRead, opHLLRead:
		return replyOp{}, false, unsupported("read op " + opName(o.op))
	}
	return replyOp{}, false, fail(rcParameter, "unsupported read op "+opName(o.op))
}

// Expression op flags (expop.c AS_EXP_FLAG_*).
const (
	expFlagCreateOnly   = 1 << 0
	expFlagUpdateOnly   = 1 << 1
	expFlagAllowDelete  = 1 << 2
	expFlagPolicyNoFail = 1 << 3
	expFlagEvalNoFail   = 1 << 4
)

// expModify is the server's as_exp_modify_tr (expop.c): it writes the
// value of the op's expression into the op's bin.
func expModify(work *record, o wireOp, digest [20]byte, now time.Time) *opError {
	_, wasLive := work.get(o.name)
	v, flags, err := evalExpOp(o.data, &exprEnv{rec: work, digest: digest, now: now})
	if err != nil {
		return err
	}
	if flags&^(expFlagCreateOnly|expFlagUpdateOnly|expFlagAllowDelete|expFlagPolicyNoFail|expFlagEvalNoFail) != 0 {
		return fail(rcParameter, "expression write op: invalid flags")
	}
	if wasLive && flags&expFlagCreateOnly != 0 {
		if flags&expFlagPolicyNoFail != 0 {
			return nil
		}
		return fail(rcBinExists, "expression write op: bin exists")
	}
	if !wasLive && flags&expFlagUpdateOnly != 0 {
		if flags&expFlagPolicyNoFail != 0 {
			return nil
		}
		return fail(rcBinNotFound, "expression write op: bin not found")
	}
	if _, u := v.(unknownVal); u {
		if flags&expFlagEvalNoFail != 0 {
			return nil
		}
		return fail(rcOpNotApplicable, "expression write op: unknown result")
	}
	if v == nil {
		if flags&expFlagAllowDelete == 0 && wasLive {
			// As the server (expop.c tests "flags && AS_EXP_FLAG_POLICY_NO_FAIL",
			// which is any flag), any flag makes this a silent no-op.
			if flags != 0 {
				return nil
			}
			return fail(rcOpNotApplicable, "expression write op: would delete the bin")
		}
		work.setBin(o.name, nil)
		return nil
	}
	work.setBin(o.name, v)
	return nil
}

// applyWriteOps applies a write's ops to work (the working copy of the
// record) in order and returns the reply ops, as the server's
// write_master_bin_ops_loop does (write.c).
func (s *Server) applyWriteOps(q *request, work *record, now time.Time) ([]replyOp, *opError) {
	respondAll := q.info2&info2RespondAll != 0
	var out []replyOp
	empty := func(o wireOp) {
		if respondAll {
			out = append(out, replyOp{op: o.op, name: o.name})
		}
	}
	for _, o := range q.ops {
		switch {
		case o.op == opTouch:
			// Touch only refreshes metadata: no reply entry, even with
			// RESPOND_ALL_OPS.
		case o.op == opWrite:
			v, err := particleToValue(o.ptype, o.data)
			if err != nil {
				return nil, fail(rcParameter, "write: "+err.Error())
			}
			if v, err = normalizeValue(v); err != nil {
				return nil, fail(rcServerError, "write: "+err.Error())
			}
			work.setBin(o.name, v)
			empty(o)
		case o.op == opIncr:
			if err := opAdd(work, o); err != nil {
				return nil, err
			}
			empty(o)
		case o.op == opAppend || o.op == opPrepend:
			if err := opConcat(work, o); err != nil {
				return nil, err
			}
			empty(o)
		case o.op == opDelete:
			work.bins = nil
			empty(o)
		case q.isReadAll(o):
			out = append(out, allBins(work)...)
		case o.op == opRead || o.op == opCDTRead || o.op == opExpRead:
			ro, ok, err := s.readOp(work, o, respondAll, q.digest, now)
			if err != nil {
				return nil, err
			}
			// In a write, a CDT read always answers (write.c: "respond_all_ops ||
			// result_bin != NULL || op != READ").
			if ok && (respondAll || ro.val != nil || o.op != opRead) {
				out = append(out, ro)
			}
		case o.op == opCDTModify:
			cur, _ := work.get(o.name)
			nv, res, changed, err := applyCDT(o, cur)
			if err != nil {
				return nil, err
			}
			if changed {
				work.setBin(o.name, nv)
			}
			if respondAll || res != nil {
				out = append(out, replyOp{op: o.op, name: o.name, val: res})
			}
		case o.op == opExpModify:
			if err := expModify(work, o, q.digest, now); err != nil {
				return nil, err
			}
			empty(o)
		case o.op == opBitRead, o.op == opBitModify, o.op == opHLLRead, o.op == opHLLModify:
			return nil, unsupported("op " + opName(o.op))
		default:
			return nil, fail(rcParameter, fmt.Sprintf("unknown bin op %d", o.op))
		}
	}
	return out, nil
}

// opAdd applies an INCR op.
func opAdd(work *record, o wireOp) *opError {
	delta, err := particleToValue(o.ptype, o.data)
	if err != nil {
		return fail(rcParameter, "add: "+err.Error())
	}
	cur, ok := work.get(o.name)
	switch d := delta.(type) {
	case int64:
		if !ok {
			work.setBin(o.name, d)
			return nil
		}
		c, isInt := cur.(int64)
		if !isInt {
			return fail(rcBinTypeError, "add: bin "+o.name+" is not an integer")
		}
		work.setBin(o.name, c+d)
	case float64:
		if !ok {
			work.setBin(o.name, d)
			return nil
		}
		c, isFloat := cur.(float64)
		if !isFloat {
			return fail(rcBinTypeError, "add: bin "+o.name+" is not a float")
		}
		sum := c + d
		if math.IsInf(sum, 0) || math.IsNaN(sum) {
			return fail(rcParameter, "add: float overflow")
		}
		work.setBin(o.name, sum)
	default:
		return fail(rcParameter, "add: value is not numeric")
	}
	return nil
}

// opConcat applies an APPEND or PREPEND op.
func opConcat(work *record, o wireOp) *opError {
	v, err := particleToValue(o.ptype, o.data)
	if err != nil {
		return fail(rcParameter, "append: "+err.Error())
	}
	cur, ok := work.get(o.name)
	if !ok {
		work.setBin(o.name, v)
		return nil
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
			return fail(rcBinTypeError, "append: bin is not a string")
		}
		work.setBin(o.name, join(c, x))
	case blobVal:
		c, isBlob := cur.(blobVal)
		if !isBlob || c.ptype != ptBlob || x.ptype != ptBlob {
			return fail(rcBinTypeError, "append: bin is not a blob")
		}
		work.setBin(o.name, blobVal{ptype: ptBlob, b: join(c.b, x.b)})
	default:
		return fail(rcParameter, "append: value is not a string or blob")
	}
	return nil
}
