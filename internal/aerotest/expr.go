package aerotest

import (
	"fmt"
	"time"
)

// Expression op codes (client expression.go).
const (
	expEQ          = 1
	expNE          = 2
	expGT          = 3
	expGE          = 4
	expLT          = 5
	expLE          = 6
	expAnd         = 16
	expOr          = 17
	expNot         = 18
	expExclusive   = 19
	expAdd         = 20
	expSub         = 21
	expMul         = 22
	expDiv         = 23
	expMod         = 26
	expAbs         = 27
	expToInt       = 30
	expToFloat     = 31
	expMin         = 50
	expMax         = 51
	expLastUpdate  = 66
	expSinceUpdate = 67
	expVoidTime    = 68
	expTTL         = 69
	expSetName     = 70
	expKeyExists   = 71
	expIsTombstone = 72
	expKey         = 80
	expBin         = 81
	expBinType     = 82
	expUnknown     = 0
	expDigestMod   = 64
	expCond        = 123
	expVar         = 124
	expLet         = 125
	expQuoted      = 126
	expCall        = 127
	expCallModify  = 0x40 // call flags: the CDT op modifies
)

// Expression value types (ExpType).
const (
	etNil    = 0
	etBool   = 1
	etInt    = 2
	etString = 3
	etList   = 4
	etMap    = 5
	etBlob   = 6
	etFloat  = 7
	etGeo    = 8
	etHLL    = 9
)

// unknownVal is the result of reading a missing bin or a bin of another
// type; comparisons with it are unknown, and a filter that ends unknown
// filters the record out.
type unknownVal struct{}

type exprEnv struct {
	rec    *record
	digest [20]byte
	now    time.Time
	vars   map[string]any
}

// evalFilter evaluates a filter expression against rec.
func evalFilter(b []byte, env *exprEnv) (bool, *opError) {
	r := &mpReader{b: b}
	e, err := parseExpr(r)
	if err != nil {
		return false, err
	}
	if r.off != len(b) {
		return false, fail(rcParameter, "filter expression: trailing bytes")
	}
	if err := e.check(); err != nil {
		return false, err
	}
	v, err := env.eval(e)
	if err != nil {
		return false, err
	}
	switch x := v.(type) {
	case bool:
		return x, nil
	case unknownVal:
		return false, nil
	}
	return false, fail(rcParameter, fmt.Sprintf("filter expression is not boolean (%T)", v))
}

// expr is a parsed expression node: either a literal or an op with args.
type expr struct {
	isLit   bool
	op      int64
	lit     any
	args    []*expr
	rawArgs []any    // non-expression operands (bin names, types)
	names   []string // let: variable names, one per args[i] but the last
}

// check walks e for constructs aerotest does not model, so that a whole
// expression is refused before anything is evaluated.
func (e *expr) check() *opError {
	if e.isLit {
		return nil
	}
	switch e.op {
	case expEQ, expNE, expGT, expGE, expLT, expLE, expAnd, expOr, expNot, expExclusive,
		expAdd, expSub, expMul, expDiv, expMod, expAbs, expMin, expMax,
		expLastUpdate, expSinceUpdate, expVoidTime, expTTL, expSetName, expKeyExists, expIsTombstone,
		expKey, expBin, expBinType, expCond, expVar, expLet, expCall, expUnknown, expToInt, expToFloat:
	default:
		return unsupported(fmt.Sprintf("filter expression op %d", e.op))
	}
	for _, a := range e.args {
		if err := a.check(); err != nil {
			return err
		}
	}
	if e.op == expCond {
		// The server type-checks an expression when it builds it: the
		// branches of a cond must have one type.
		var want int64 = -1
		for i := 1; i < len(e.args); i += 2 {
			if t, ok := e.args[i].staticType(); ok {
				if want >= 0 && t != want {
					return fail(rcParameter, "cond branches of different types")
				}
				want = t
			}
		}
		if last := e.args[len(e.args)-1]; len(e.args)%2 == 1 {
			if t, ok := last.staticType(); ok && want >= 0 && t != want {
				return fail(rcParameter, "cond branches of different types")
			}
		}
	}
	return nil
}

// staticType is the expression type of e when it is known without
// evaluating it (unknown, var and cond of unknowns are not).
func (e *expr) staticType() (int64, bool) {
	if e.isLit {
		switch v := e.lit.(type) {
		case nil:
			return etNil, true
		case bool:
			return etBool, true
		case int64:
			return etInt, true
		case float64:
			return etFloat, true
		case string:
			return etString, true
		case *listVal:
			return etList, true
		case *mapVal:
			return etMap, true
		case blobVal:
			if v.ptype == ptGeoJSON {
				return etGeo, true
			}
			return etBlob, true
		}
		return 0, false
	}
	switch e.op {
	case expEQ, expNE, expGT, expGE, expLT, expLE, expAnd, expOr, expNot, expExclusive, expKeyExists, expIsTombstone:
		return etBool, true
	case expLastUpdate, expSinceUpdate, expVoidTime, expTTL, expBinType, expToInt:
		return etInt, true
	case expToFloat:
		return etFloat, true
	case expSetName:
		return etString, true
	case expBin, expKey:
		t, ok := e.rawArgs[0].(int64)
		return t, ok
	case expCall:
		t, ok := e.rawArgs[0].(int64)
		return t, ok
	case expAdd, expSub, expMul, expDiv, expMod, expAbs, expMin, expMax:
		for _, a := range e.args {
			if t, ok := a.staticType(); ok {
				return t, true
			}
		}
	case expCond:
		for i := 1; i < len(e.args); i += 2 {
			if t, ok := e.args[i].staticType(); ok {
				return t, true
			}
		}
		return e.args[len(e.args)-1].staticType()
	case expLet:
		return e.args[len(e.args)-1].staticType()
	}
	return 0, false
}

func parseExpr(r *mpReader) (*expr, *opError) {
	if !r.peekIsArray() {
		v, err := r.decode()
		if err != nil {
			return nil, fail(rcParameter, "filter expression: "+err.Error())
		}
		return &expr{isLit: true, lit: v}, nil
	}
	n, err := r.readArrayLen()
	if err != nil || n == 0 {
		return nil, fail(rcParameter, "filter expression: bad array")
	}
	opv, err := r.decode()
	if err != nil {
		return nil, fail(rcParameter, "filter expression: "+err.Error())
	}
	op, ok := opv.(int64)
	if !ok {
		return nil, fail(rcParameter, "filter expression: op is not an integer")
	}
	e := &expr{op: op}
	switch op {
	case expBin: // [81, type, rawname]
		if n != 3 {
			return nil, fail(rcParameter, "bin expression arity")
		}
		t, err1 := r.decode()
		name, err2 := r.decodeRaw()
		if err1 != nil || err2 != nil {
			return nil, fail(rcParameter, "bin expression operands")
		}
		e.rawArgs = []any{t, name}
		return e, nil
	case expBinType: // [82, rawname]
		if n != 2 {
			return nil, fail(rcParameter, "bin_type expression arity")
		}
		name, err := r.decodeRaw()
		if err != nil {
			return nil, fail(rcParameter, "bin_type expression operand")
		}
		e.rawArgs = []any{name}
		return e, nil
	case expKey: // [80, type]
		if n != 2 {
			return nil, fail(rcParameter, "key expression arity")
		}
		t, err := r.decode()
		if err != nil {
			return nil, fail(rcParameter, "key expression operand")
		}
		e.rawArgs = []any{t}
		return e, nil
	case expQuoted: // [126, list]
		if n != 2 {
			return nil, fail(rcParameter, "quoted expression arity")
		}
		v, err := r.decode()
		if err != nil {
			return nil, fail(rcParameter, "quoted expression operand")
		}
		return &expr{isLit: true, lit: v}, nil
	case expVar: // [124, rawname]
		if n != 2 {
			return nil, fail(rcParameter, "var expression arity")
		}
		name, err := r.decodeRaw()
		if err != nil {
			return nil, fail(rcParameter, "var expression operand")
		}
		e.rawArgs = []any{name}
		return e, nil
	case expLet: // [125, name1, exp1, ..., body]
		if n < 2 || n%2 != 0 {
			return nil, fail(rcParameter, "let expression arity")
		}
		for i := 0; i < (n-2)/2; i++ {
			name, err := r.decodeRaw()
			s, ok := name.(string)
			if err != nil || !ok {
				return nil, fail(rcParameter, "let variable name")
			}
			a, oerr := parseExpr(r)
			if oerr != nil {
				return nil, oerr
			}
			e.names = append(e.names, s)
			e.args = append(e.args, a)
		}
		body, oerr := parseExpr(r)
		if oerr != nil {
			return nil, oerr
		}
		e.args = append(e.args, body)
		return e, nil
	case expCall: // [127, result type, flags, [op, params...], bin]
		if n != 5 {
			return nil, fail(rcParameter, "call expression arity")
		}
		rtype, err1 := r.decode()
		flags, err2 := r.decode()
		if err1 != nil || err2 != nil {
			return nil, fail(rcParameter, "call expression operands")
		}
		e.rawArgs = []any{rtype, flags}
		na, err := r.readArrayLen()
		if err != nil || na == 0 {
			return nil, fail(rcParameter, "call expression arguments")
		}
		for i := 0; i < na; i++ {
			if i == 0 && r.peekIsArray() {
				return nil, unsupported("cdt call with context (nested CDT)")
			}
			a, oerr := parseExpr(r)
			if oerr != nil {
				return nil, oerr
			}
			e.args = append(e.args, a)
		}
		bin, oerr := parseExpr(r)
		if oerr != nil {
			return nil, oerr
		}
		e.args = append(e.args, bin)
		return e, nil
	}
	for i := 1; i < n; i++ {
		a, oerr := parseExpr(r)
		if oerr != nil {
			return nil, oerr
		}
		e.args = append(e.args, a)
	}
	return e, nil
}

func (env *exprEnv) eval(e *expr) (any, *opError) {
	if e.isLit {
		return e.lit, nil
	}
	arity := func(n int) *opError {
		if len(e.args) != n {
			return fail(rcParameter, fmt.Sprintf("expression op %d expects %d args, got %d", e.op, n, len(e.args)))
		}
		return nil
	}
	rec := env.rec
	switch e.op {
	case expEQ, expNE, expGT, expGE, expLT, expLE:
		if err := arity(2); err != nil {
			return nil, err
		}
		a, err := env.eval(e.args[0])
		if err != nil {
			return nil, err
		}
		b, err := env.eval(e.args[1])
		if err != nil {
			return nil, err
		}
		if _, u := a.(unknownVal); u {
			return unknownVal{}, nil
		}
		if _, u := b.(unknownVal); u {
			return unknownVal{}, nil
		}
		if typeRank(a) != typeRank(b) {
			return nil, fail(rcParameter, fmt.Sprintf("expression compares %T with %T", a, b))
		}
		c := compareValues(a, b)
		switch e.op {
		case expEQ:
			return c == 0, nil
		case expNE:
			return c != 0, nil
		case expGT:
			return c > 0, nil
		case expGE:
			return c >= 0, nil
		case expLT:
			return c < 0, nil
		}
		return c <= 0, nil

	case expAnd, expOr:
		if len(e.args) < 1 {
			return nil, fail(rcParameter, "and/or without operands")
		}
		unknown := false
		for _, a := range e.args {
			v, err := env.eval(a)
			if err != nil {
				return nil, err
			}
			switch x := v.(type) {
			case bool:
				if e.op == expAnd && !x {
					return false, nil
				}
				if e.op == expOr && x {
					return true, nil
				}
			case unknownVal:
				unknown = true
			default:
				return nil, fail(rcParameter, "and/or operand is not boolean")
			}
		}
		if unknown {
			return unknownVal{}, nil
		}
		return e.op == expAnd, nil

	case expNot:
		if err := arity(1); err != nil {
			return nil, err
		}
		v, err := env.eval(e.args[0])
		if err != nil {
			return nil, err
		}
		switch x := v.(type) {
		case bool:
			return !x, nil
		case unknownVal:
			return x, nil
		}
		return nil, fail(rcParameter, "not operand is not boolean")

	case expExclusive:
		count := 0
		for _, a := range e.args {
			v, err := env.eval(a)
			if err != nil {
				return nil, err
			}
			switch x := v.(type) {
			case bool:
				if x {
					count++
				}
			case unknownVal:
				return x, nil
			default:
				return nil, fail(rcParameter, "exclusive operand is not boolean")
			}
		}
		return count == 1, nil

	case expAdd, expSub, expMul, expDiv, expMod, expMin, expMax, expAbs:
		return env.arith(e)

	case expBin:
		t, _ := e.rawArgs[0].(int64)
		name, _ := e.rawArgs[1].(string)
		if rec == nil {
			return unknownVal{}, nil
		}
		v, ok := rec.get(name)
		if !ok || !matchesExpType(v, t) {
			return unknownVal{}, nil
		}
		return v, nil

	case expBinType:
		name, _ := e.rawArgs[0].(string)
		if rec == nil {
			return int64(0), nil
		}
		v, ok := rec.get(name)
		if !ok {
			return int64(0), nil
		}
		return int64(particleTypeOf(v)), nil

	case expKey:
		t, _ := e.rawArgs[0].(int64)
		if rec == nil || rec.key == nil {
			return unknownVal{}, nil
		}
		v := rec.key.value()
		if !matchesExpType(v, t) {
			return unknownVal{}, nil
		}
		return v, nil

	case expKeyExists:
		return rec != nil && rec.key != nil, nil

	case expSetName:
		if rec == nil {
			return "", nil
		}
		return rec.set, nil

	case expIsTombstone:
		return false, nil

	case expLastUpdate:
		// The server keeps last-update times in milliseconds.
		if rec == nil {
			return int64(0), nil
		}
		return rec.lastUpdate.UnixMilli() * int64(time.Millisecond), nil

	case expSinceUpdate:
		if rec == nil {
			return int64(0), nil
		}
		return env.now.UnixMilli() - rec.lastUpdate.UnixMilli(), nil

	case expUnknown:
		return unknownVal{}, nil

	case expToInt, expToFloat:
		if err := arity(1); err != nil {
			return nil, err
		}
		v, err := env.eval(e.args[0])
		if err != nil {
			return nil, err
		}
		switch x := v.(type) {
		case unknownVal:
			return x, nil
		case int64:
			if e.op == expToFloat {
				return float64(x), nil
			}
		case float64:
			if e.op == expToInt {
				return int64(x), nil
			}
		}
		return nil, fail(rcParameter, "to_int/to_float of a value of another type")

	case expVar:
		name, _ := e.rawArgs[0].(string)
		v, ok := env.vars[name]
		if !ok {
			return nil, fail(rcParameter, "expression var "+name+" is not defined")
		}
		return v, nil

	case expLet:
		saved := env.vars
		vars := map[string]any{}
		for k, v := range saved {
			vars[k] = v
		}
		env.vars = vars
		defer func() { env.vars = saved }()
		for i, name := range e.names {
			v, err := env.eval(e.args[i])
			if err != nil {
				return nil, err
			}
			vars[name] = v
		}
		return env.eval(e.args[len(e.args)-1])

	case expCall:
		return env.call(e)

	case expVoidTime:
		if rec == nil || rec.voidTime == 0 {
			return int64(-1), nil
		}
		return (int64(rec.voidTime) + citrusleafEpoch) * int64(time.Second), nil

	case expTTL:
		if rec == nil || rec.voidTime == 0 {
			return int64(-1), nil
		}
		return int64(rec.voidTime) - nowCL(env.now), nil

	case expCond:
		if len(e.args) < 3 || len(e.args)%2 == 0 {
			return nil, fail(rcParameter, "cond arity")
		}
		for i := 0; i+1 < len(e.args); i += 2 {
			c, err := env.eval(e.args[i])
			if err != nil {
				return nil, err
			}
			b, ok := c.(bool)
			if !ok {
				return unknownVal{}, nil
			}
			if b {
				return env.eval(e.args[i+1])
			}
		}
		return env.eval(e.args[len(e.args)-1])
	}
	return nil, unsupported(fmt.Sprintf("filter expression op %d", e.op))
}

func matchesExpType(v any, t int64) bool {
	switch t {
	case etNil:
		return v == nil
	case etBool:
		_, ok := v.(bool)
		return ok
	case etInt:
		_, ok := v.(int64)
		return ok
	case etString:
		_, ok := v.(string)
		return ok
	case etList:
		_, ok := v.(*listVal)
		return ok
	case etMap:
		_, ok := v.(*mapVal)
		return ok
	case etBlob:
		b, ok := v.(blobVal)
		return ok && b.ptype == ptBlob
	case etFloat:
		_, ok := v.(float64)
		return ok
	case etGeo:
		b, ok := v.(blobVal)
		return ok && b.ptype == ptGeoJSON
	case etHLL:
		b, ok := v.(blobVal)
		return ok && b.ptype == ptHLL
	}
	return false
}

func (env *exprEnv) arith(e *expr) (any, *opError) {
	if len(e.args) == 0 {
		return nil, fail(rcParameter, "arithmetic without operands")
	}
	vals := make([]any, 0, len(e.args))
	for _, a := range e.args {
		v, err := env.eval(a)
		if err != nil {
			return nil, err
		}
		if _, u := v.(unknownVal); u {
			return unknownVal{}, nil
		}
		vals = append(vals, v)
	}
	switch first := vals[0].(type) {
	case int64:
		acc := first
		if e.op == expAbs {
			if acc < 0 {
				acc = -acc
			}
			return acc, nil
		}
		if len(vals) == 1 && e.op == expSub {
			return -acc, nil
		}
		for _, v := range vals[1:] {
			x, ok := v.(int64)
			if !ok {
				return nil, fail(rcParameter, "arithmetic mixes types")
			}
			switch e.op {
			case expAdd:
				acc += x
			case expSub:
				acc -= x
			case expMul:
				acc *= x
			case expDiv:
				if x == 0 {
					return unknownVal{}, nil
				}
				acc /= x
			case expMod:
				if x == 0 {
					return unknownVal{}, nil
				}
				acc %= x
			case expMin:
				acc = min(acc, x)
			case expMax:
				acc = max(acc, x)
			}
		}
		return acc, nil
	case float64:
		acc := first
		if e.op == expAbs {
			if acc < 0 {
				acc = -acc
			}
			return acc, nil
		}
		if len(vals) == 1 && e.op == expSub {
			return -acc, nil
		}
		for _, v := range vals[1:] {
			x, ok := v.(float64)
			if !ok {
				return nil, fail(rcParameter, "arithmetic mixes types")
			}
			switch e.op {
			case expAdd:
				acc += x
			case expSub:
				acc -= x
			case expMul:
				acc *= x
			case expDiv:
				acc /= x
			case expMin:
				acc = min(acc, x)
			case expMax:
				acc = max(acc, x)
			default:
				return nil, unsupported(fmt.Sprintf("float arithmetic op %d", e.op))
			}
		}
		return acc, nil
	}
	return nil, fail(rcParameter, "arithmetic on non-numeric value")
}

// call evaluates a CDT call: the list or map op applied to the value of its
// bin expression. A read answers the op's result, a modify the new list or
// map; an unknown operand, a value of another type, a failing op or a
// result of another type than declared make the call unknown (the server
// then fails the expression).
func (env *exprEnv) call(e *expr) (any, *opError) {
	rtype, _ := e.rawArgs[0].(int64)
	flags, _ := e.rawArgs[1].(int64)
	if flags&^expCallModify != 0 {
		return nil, unsupported(fmt.Sprintf("expression call module %d", flags))
	}
	code, ok := e.args[0].lit.(int64)
	if !e.args[0].isLit || !ok {
		return nil, fail(rcParameter, "call expression op is not an integer")
	}
	vals := make([]any, 0, len(e.args)-2)
	for _, a := range e.args[1 : len(e.args)-1] {
		v, err := env.eval(a)
		if err != nil {
			return nil, err
		}
		if _, u := v.(unknownVal); u {
			return unknownVal{}, nil
		}
		n, nerr := normalizeValue(v)
		if nerr != nil {
			return nil, fail(rcParameter, "call expression: "+nerr.Error())
		}
		vals = append(vals, n)
	}
	bin, err := env.eval(e.args[len(e.args)-1])
	if err != nil {
		return nil, err
	}
	if _, u := bin.(unknownVal); u {
		return unknownVal{}, nil
	}
	modify := flags&expCallModify != 0
	var nv, res any
	var changed bool
	var cerr *opError
	if code < 64 {
		if _, isList := bin.(*listVal); !isList {
			return unknownVal{}, nil
		}
		if isListModify(int(code)) != modify {
			return nil, fail(rcParameter, "call expression: list op and modify flag disagree")
		}
		nv, res, changed, cerr = applyListOp(int(code), vals, bin, modify)
	} else {
		m, isMap := bin.(*mapVal)
		if !isMap {
			return unknownVal{}, nil
		}
		name, known := mapOpNames[int(code)]
		if !known {
			return nil, unsupported(fmt.Sprintf("cdt map op %d in an expression", code))
		}
		if isMapModify(int(code)) != modify {
			return nil, fail(rcParameter, "call expression: map op and modify flag disagree")
		}
		nv, res, changed, cerr = mapOp(int(code), name, vals, m)
	}
	if cerr != nil {
		if cerr.unsupported {
			return nil, cerr
		}
		return unknownVal{}, nil
	}
	out := res
	if modify {
		out = bin
		if changed {
			out = nv
		}
	}
	if out == nil || !matchesExpType(out, rtype) {
		return unknownVal{}, nil
	}
	return out, nil
}

// evalExpOp parses and evaluates the expression of an expression op
// (payload [expression, flags]).
func evalExpOp(data []byte, env *exprEnv) (v any, flags int64, err *opError) {
	r := &mpReader{b: data}
	n, derr := r.readArrayLen()
	if derr != nil || n == 0 || n > 2 {
		return nil, 0, fail(rcParameter, "expression op: bad payload")
	}
	e, oerr := parseExpr(r)
	if oerr != nil {
		return nil, 0, oerr
	}
	if n == 2 {
		f, derr := r.decode()
		fi, ok := f.(int64)
		if derr != nil || !ok {
			return nil, 0, fail(rcParameter, "expression op: bad flags")
		}
		flags = fi
	}
	if r.off != len(data) {
		return nil, 0, fail(rcParameter, "expression op: trailing bytes")
	}
	if err := e.check(); err != nil {
		return nil, 0, err
	}
	v, oerr = env.eval(e)
	return v, flags, oerr
}
