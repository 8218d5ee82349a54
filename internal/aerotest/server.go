// Package aerotest is an in-process Aerospike server for tests (in the
// spirit of miniredis). The official Go client
// github.com/aerospike/aerospike-client-go/v8 connects to it over loopback
// TCP and sees a one-node cluster owning all 4096 partitions of every
// configured namespace. Records live in memory, keyed by digest.
//
// It exists for fault injection a real server cannot do (DropResponses,
// SetDelay, Restart, CloseConnections, PauseWrites); everything it models
// follows Aerospike Community Edition 8.1.2.0: the write, read and delete
// paths of the server's source (write.c, read.c, delete.c, particle_map.c,
// particle_list.c, expop.c) and frames captured from a real server
// (testdata/README.txt; TestReplayCapture requires byte-identical replies).
// The behaviour tests run against aerotest and against a real server named
// by DCSYNC_AEROSPIKE, and TestCDTMatrix compares every map selector and
// return type, and the list ops, with testdata/cdt_matrix.txt, recorded
// from the real server.
//
// Supported:
//   - info: node, build, version, edition, features, cluster-name,
//     partition-generation, peers-generation, cluster-generation, partitions,
//     peers-{clear,tls}-{std,alt}, service*, services*, namespaces, replicas,
//     replicas-all, replicas-master, rack-ids, user-agent-set, statistics,
//     truncate, truncate-namespace.
//   - AS_MSG (type 3): get (all bins, named bins, header), exists, put with
//     every RecordExistsAction, generation EQ/GT checks, TTL (0 = namespace
//     default, -1 never, -2 keep), delete, touch, and operate with READ,
//     WRITE, ADD (int/float), APPEND, PREPEND, TOUCH, DELETE, expression
//     reads and writes (ExpReadOp, ExpWriteOp and their flags), CDT map ops
//     without context (put/put_items/add/replace with write flags; increment;
//     clear; size; set_type; every get_by_* / remove_by_* selector with every
//     return type and INVERTED, except on key-value-ordered maps) and CDT
//     list ops without context (set_type, append, insert, set, increment,
//     pop, remove, trim, clear, size, get, get_range, by index and by value
//     with every return type and INVERTED). The server's checks come in its
//     order with its result codes: read-all mixed with ops that answer values
//     or with RESPOND_ALL_OPS is PARAMETER_ERROR; record-level replace refuses
//     bin deletes and modify ops; a write that leaves a missing record
//     without bins is KEY_NOT_FOUND; set-name and key mismatches; TTLs
//     refused on namespaces without nsup (Options.NsupDisabled).
//   - Replies as the server builds them: error replies carry the record's
//     generation and void-time once it was found (never for deletes), touch
//     has no reply entry, a write that deletes the record answers no
//     metadata, KEY_VALUE map results are ordered pair lists, maps are
//     stored in key order, a deleted bin's slot takes the last bin.
//   - Compressed requests (type 4) are ENTERPRISE_ONLY, as on Community
//     Edition; durable deletes too.
//   - Hot keys: a write that finds more than transaction-pending-limit (20)
//     writes waiting on its record fails with KEY_BUSY; SetWriteHold and
//     PauseWrites make writes queue.
//   - filter expressions (field 43): comparisons, and/or/not/exclusive,
//     bin, bin_type (so ExpBinExists), key, key_exists, set_name, ttl,
//     void_time, last_update, since_update, is_tombstone, cond, let/var,
//     unknown, CDT calls on lists and maps, integer and float arithmetic. A
//     filter that is false or unknown gives FILTERED_OUT; filters are not
//     evaluated when a write creates the record.
//   - batch index commands (BatchGet, BatchGetHeader, BatchExists,
//     BatchGetOperate, BatchOperate with reads, writes and deletes),
//     including REPEAT rows and a batch-level filter.
//
// Anything else (bit and HLL ops, other expression ops such as
// digest_modulo or record_size, nested CDT contexts, list sort and list
// rank / value-list / interval selectors, UDFs, scans, queries,
// transactions) is answered with UNSUPPORTED_FEATURE and logged at warn
// level, never silently ignored.
package aerotest

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// Namespaces served; default ["test"].
	Namespaces []string
	// Now is the server clock used for TTLs, void-times and expiry;
	// default time.Now.
	Now func() time.Time
	// Logger receives warnings about unsupported requests and debug
	// traces; default discards.
	Logger *slog.Logger
	// DefaultTTL is the namespace default-ttl applied to writes with TTL 0;
	// 0 means records never expire (the Aerospike default).
	DefaultTTL time.Duration
	// Port to listen on (127.0.0.1 only); 0 picks a free port.
	Port int
	// ClusterName answered to the "cluster-name" info command; default "null".
	ClusterName string
	// NodeName answered to the "node" info command; default derived from
	// the port ("BB9" + 12 hex digits), so it survives Restart.
	NodeName string
	// NsupDisabled lists namespaces (of Namespaces) configured with
	// nsup-period 0 and without allow-ttl-without-nsup: as on the real
	// server, every write that would give a record a TTL fails with
	// FAIL_FORBIDDEN (22).
	NsupDisabled []string
	// NsupPeriod is the namespace nsup-period: expired records stay in
	// storage until the next nsup pass (every NsupPeriod of server clock
	// since Start), and until then a delete finds them and deletes them as
	// live records (reads and writes never see them). 0 reaps records the
	// moment they expire. The real server's window is timing dependent; on
	// the test server (nsup-period 1) a delete about a second after expiry
	// still reported the record as existing.
	NsupPeriod time.Duration
	// TransactionPendingLimit is the namespace transaction-pending-limit: a
	// write or delete that finds more than this many others already waiting
	// behind the one executing on its record fails with KEY_BUSY (14), as on
	// the real server. 0 means the server default, 20; negative disables
	// the check. Writes are normally instantaneous here, so queues only form
	// under SetWriteHold or PauseWrites.
	TransactionPendingLimit int
}

// defaultTransactionPendingLimit is the server's default
// transaction-pending-limit (namespace.c).
const defaultTransactionPendingLimit = 20

// CommandKind classifies an AS_MSG command.
type CommandKind int

// Command kinds.
const (
	// KindRead is a single-record command without the WRITE flag
	// (Get, GetHeader, Exists, read-only Operate).
	KindRead CommandKind = iota + 1
	// KindWrite is a single-record write (Put, Add, Touch, Operate with a write op).
	KindWrite
	// KindDelete is a single-record Delete.
	KindDelete
	// KindBatch is a batch index command (BatchGet, BatchGetHeader,
	// BatchExists, BatchGetOperate, BatchRead, BatchOperate).
	KindBatch
)

// String returns "read", "write", "delete" or "batch".
func (k CommandKind) String() string {
	switch k {
	case KindRead:
		return "read"
	case KindWrite:
		return "write"
	case KindDelete:
		return "delete"
	case KindBatch:
		return "batch"
	}
	return "unknown"
}

// Command describes a request, for fault matching in DropResponses.
type Command struct {
	Kind      CommandKind
	Namespace string
	Set       string
	// Digest of the record (the first row for batches).
	Digest [20]byte
	// Key is the user key when the client sent it (SendKey), else nil.
	Key any
	// Write reports whether the command (or any batch row) writes.
	Write bool
	// Ops lists the op kinds in request order: "read", "write", "incr",
	// "touch", "delete", "cdt_read", "cdt_modify", ... (first row for batches).
	Ops []string
	// BatchSize is the number of rows of a batch command, 0 otherwise.
	BatchSize int
}

// Stats counts what the server has served since Start.
type Stats struct {
	Connections  int64 // client connections accepted
	Info         int64 // info frames answered
	Reads        int64 // single-record read commands
	Writes       int64 // single-record write commands (excluding deletes)
	Deletes      int64 // single-record deletes
	Batches      int64 // batch commands
	BatchRecords int64 // rows in batch commands
	Dropped      int64 // responses dropped by DropResponses
	KeyBusy      int64 // writes refused with KEY_BUSY (single commands and batch rows)
	Compressed   int64 // compressed requests refused with ENTERPRISE_ONLY
}

type dropRule struct {
	remaining int
	match     func(Command) bool
}

// Server is an in-process Aerospike server. Create it with Start.
type Server struct {
	opts     Options
	log      *slog.Logger
	now      func() time.Time
	nodeName string

	mu         sync.Mutex // guards namespaces and all records
	namespaces map[string]*namespace
	nsup       nsupClock

	lmu     sync.Mutex // guards ln, conns, stop, closed
	ln      net.Listener
	port    int
	conns   map[net.Conn]struct{}
	stop    chan struct{}
	closed  bool
	running sync.WaitGroup

	fmu   sync.Mutex // guards drops and pauses
	drops []*dropRule
	pause []*pauseRule
	delay atomic.Int64
	hold  atomic.Int64

	hmu sync.Mutex // guards hot
	hot map[hotKey]*hotRecord

	stConns, stInfo, stReads, stWrites, stDeletes, stBatches, stBatchRecs, stDropped, stKeyBusy, stCompressed atomic.Int64
}

// hotKey identifies a record for the hot-key model.
type hotKey struct {
	ns     string
	digest [20]byte
}

// hotRecord models the server's rw_request hash entry of a record: the
// writes in flight on it (one executing, the rest waiting, in order).
type hotRecord struct {
	n  int        // writes executing or waiting; guarded by Server.hmu
	mu sync.Mutex // held by the executing write
}

type pauseRule struct {
	match func(Command) bool
	done  chan struct{}
}

// Start starts a server listening on 127.0.0.1 (Options.Port, or a free port).
func Start(opts Options) (*Server, error) {
	if len(opts.Namespaces) == 0 {
		opts.Namespaces = []string{"test"}
	}
	s := &Server{
		opts:       opts,
		log:        opts.Logger,
		now:        opts.Now,
		namespaces: map[string]*namespace{},
		conns:      map[net.Conn]struct{}{},
		hot:        map[hotKey]*hotRecord{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.nsup = nsupClock{start: s.now(), period: opts.NsupPeriod}
	for _, n := range opts.Namespaces {
		if n == "" || len(n) >= 32 {
			return nil, fmt.Errorf("aerotest: invalid namespace name %q", n)
		}
		s.namespaces[n] = &namespace{name: n, records: map[[20]byte]*record{}}
	}
	for _, n := range opts.NsupDisabled {
		ns := s.namespaces[n]
		if ns == nil {
			return nil, fmt.Errorf("aerotest: NsupDisabled names %q, which is not in Namespaces", n)
		}
		ns.nsupDisabled = true
	}
	if err := s.listen(opts.Port); err != nil {
		return nil, err
	}
	s.nodeName = opts.NodeName
	if s.nodeName == "" {
		s.nodeName = fmt.Sprintf("BB9%012X", s.port)
	}
	return s, nil
}

func (s *Server) listen(port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("aerotest: listen: %w", err)
	}
	s.lmu.Lock()
	s.ln = ln
	s.port = ln.Addr().(*net.TCPAddr).Port
	s.stop = make(chan struct{})
	stop := s.stop
	s.running.Add(1)
	s.lmu.Unlock()
	go s.acceptLoop(ln, stop)
	return nil
}

// Host returns the host the server listens on ("127.0.0.1").
func (s *Server) Host() string { return "127.0.0.1" }

// Port returns the TCP port the server listens on.
func (s *Server) Port() int {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.port
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort(s.Host(), strconv.Itoa(s.Port())) }

// NodeName returns the node name the server reports to the "node" info command.
func (s *Server) NodeName() string { return s.nodeName }

// Close stops listening, closes all connections and waits for every
// server goroutine to exit. Records are discarded. Close is idempotent.
func (s *Server) Close() error {
	s.lmu.Lock()
	if s.closed {
		s.lmu.Unlock()
		return nil
	}
	s.closed = true
	s.lmu.Unlock()
	s.shutdown()
	return nil
}

// shutdown closes the listener and all connections and waits for them.
func (s *Server) shutdown() {
	s.lmu.Lock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	if s.stop != nil {
		close(s.stop)
		s.stop = nil
	}
	for c := range s.conns {
		c.Close()
	}
	s.lmu.Unlock()
	s.running.Wait()
}

// Restart simulates a server restart: it stops listening, closes every
// client connection, waits for in-flight commands, then listens again on the
// same port. All records are kept.
func (s *Server) Restart() error {
	s.lmu.Lock()
	if s.closed {
		s.lmu.Unlock()
		return errors.New("aerotest: Restart on a closed server")
	}
	port := s.port
	s.lmu.Unlock()
	s.shutdown()
	var err error
	for i := 0; i < 50; i++ {
		if err = s.listen(port); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// CloseConnections closes every open client connection; the server keeps
// listening, so clients reconnect.
func (s *Server) CloseConnections() {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}

// DropResponses makes the server apply, but not answer, the next n AS_MSG
// commands for which match returns true (nil matches every command that
// writes). The client then sees a timeout; for writes InDoubt is true.
// Rules accumulate; each counts down independently.
func (s *Server) DropResponses(n int, match func(Command) bool) {
	if n <= 0 {
		return
	}
	if match == nil {
		match = func(c Command) bool { return c.Write }
	}
	s.fmu.Lock()
	s.drops = append(s.drops, &dropRule{remaining: n, match: match})
	s.fmu.Unlock()
}

// SetDelay delays every response (info and AS_MSG) by d; 0 disables.
func (s *Server) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

// SetWriteHold makes every single-record write and delete (and every
// writing batch row) hold its record for d before it executes, as a slow
// write on a real server does; other writes to the record queue behind it
// and, beyond the transaction-pending-limit, fail with KEY_BUSY. 0 disables.
func (s *Server) SetWriteHold(d time.Duration) { s.hold.Store(int64(d)) }

// PauseWrites makes the writes and deletes for which match returns true
// (nil matches every write) stop, holding their record, once they reach
// the head of their record's queue, until release is called. Writes that
// arrive meanwhile queue behind them as on a real server, which makes
// KEY_BUSY deterministic in tests. release is idempotent.
func (s *Server) PauseWrites(match func(Command) bool) (release func()) {
	if match == nil {
		match = func(Command) bool { return true }
	}
	r := &pauseRule{match: match, done: make(chan struct{})}
	s.fmu.Lock()
	s.pause = append(s.pause, r)
	s.fmu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.fmu.Lock()
			for i, p := range s.pause {
				if p == r {
					s.pause = append(s.pause[:i:i], s.pause[i+1:]...)
					break
				}
			}
			s.fmu.Unlock()
			close(r.done)
		})
	}
}

func (s *Server) pendingLimit() int {
	switch l := s.opts.TransactionPendingLimit; {
	case l < 0:
		return -1
	case l == 0:
		return defaultTransactionPendingLimit
	default:
		return l
	}
}

// enterWrite queues a write on its record as the server's
// rw_request_hash_insert does (rw_request_hash.c handle_hot_key): with more
// than the pending limit already waiting it fails with KEY_BUSY (busy is
// true); otherwise it waits for its turn, applies any hold or pause, and
// returns the function that ends its turn.
func (s *Server) enterWrite(cmd Command, stop chan struct{}) (leave func(), busy bool) {
	key := hotKey{ns: cmd.Namespace, digest: cmd.Digest}
	s.hmu.Lock()
	h := s.hot[key]
	if h == nil {
		h = &hotRecord{}
		s.hot[key] = h
	}
	if limit := s.pendingLimit(); limit >= 0 && h.n-1 > limit {
		s.hmu.Unlock()
		s.stKeyBusy.Add(1)
		return nil, true
	}
	h.n++
	s.hmu.Unlock()
	h.mu.Lock()
	leave = func() {
		h.mu.Unlock()
		s.hmu.Lock()
		h.n--
		if h.n == 0 {
			delete(s.hot, key)
		}
		s.hmu.Unlock()
	}
	if d := time.Duration(s.hold.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
		}
	}
	s.fmu.Lock()
	var waits []chan struct{}
	for _, p := range s.pause {
		if p.match(cmd) {
			waits = append(waits, p.done)
		}
	}
	s.fmu.Unlock()
	for _, w := range waits {
		select {
		case <-w:
		case <-stop:
		}
	}
	return leave, false
}

// Stats returns the command counters.
func (s *Server) Stats() Stats {
	return Stats{
		Connections:  s.stConns.Load(),
		Info:         s.stInfo.Load(),
		Reads:        s.stReads.Load(),
		Writes:       s.stWrites.Load(),
		Deletes:      s.stDeletes.Load(),
		Batches:      s.stBatches.Load(),
		BatchRecords: s.stBatchRecs.Load(),
		Dropped:      s.stDropped.Load(),
		KeyBusy:      s.stKeyBusy.Load(),
		Compressed:   s.stCompressed.Load(),
	}
}

// RecordCount returns the number of live records in namespace ns.
func (s *Server) RecordCount(ns string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.namespaces[ns]
	if n == nil {
		return 0
	}
	now := s.now()
	count := 0
	for _, r := range n.records {
		if !r.expired(now) {
			count++
		}
	}
	return count
}

func (s *Server) shouldDrop(c Command) bool {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	for i, r := range s.drops {
		if r.match(c) {
			r.remaining--
			if r.remaining <= 0 {
				s.drops = append(s.drops[:i:i], s.drops[i+1:]...)
			}
			return true
		}
	}
	return false
}

func (s *Server) acceptLoop(ln net.Listener, stop chan struct{}) {
	defer s.running.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.lmu.Lock()
		if s.stop != stop {
			s.lmu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.running.Add(1)
		s.lmu.Unlock()
		s.stConns.Add(1)
		go s.serveConn(c, stop)
	}
}

func (s *Server) serveConn(c net.Conn, stop chan struct{}) {
	defer s.running.Done()
	defer func() {
		s.lmu.Lock()
		delete(s.conns, c)
		s.lmu.Unlock()
		c.Close()
	}()
	br := bufio.NewReader(c)
	for {
		f, err := readFrame(br)
		if err != nil {
			return
		}
		var out []byte
		drop := false
		switch f.typ {
		case protoTypeInfo:
			s.stInfo.Add(1)
			body := s.handleInfo(f.body)
			out = append(appendProtoHeader(nil, protoTypeInfo, len(body)), body...)
		case protoTypeMsg:
			out, drop = s.handleMsg(f.body, stop)
		case protoTypeMsgZlib:
			// Community Edition refuses compressed requests
			// (proto_ce.c as_proto_uncompress): a plain reply, no LAST flag,
			// even for a batch.
			s.stCompressed.Add(1)
			out = msgFrame(msgHeader{resultCode: rcEnterpriseOnly}, nil)
		default:
			s.log.Warn("aerotest: unsupported proto type; closing connection", "type", f.typ)
			return
		}
		if d := time.Duration(s.delay.Load()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return
			}
		}
		if drop {
			s.stDropped.Add(1)
			continue
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// handleMsg executes one AS_MSG and returns the reply frames, and whether
// the reply must be dropped.
func (s *Server) handleMsg(body []byte, stop chan struct{}) ([]byte, bool) {
	m, err := parseMsg(body)
	if err != nil {
		s.log.Warn("aerotest: malformed AS_MSG", "err", err)
		return msgFrame(msgHeader{resultCode: rcParameter}, nil), false
	}
	if m.hdr.info1&info1Batch != 0 {
		return s.handleBatch(m, stop)
	}
	q, oerr := requestFromMsg(m)
	if oerr != nil {
		if oerr.unsupported {
			s.log.Warn("aerotest: unsupported request", "reason", oerr.reason)
		}
		return msgFrame(msgHeader{resultCode: oerr.rc}, nil), false
	}
	kind := q.kind()
	switch kind {
	case KindRead:
		s.stReads.Add(1)
	case KindWrite:
		s.stWrites.Add(1)
	case KindDelete:
		s.stDeletes.Add(1)
	}
	cmd := q.describe(kind)
	if q.isWrite() {
		leave, busy := s.enterWrite(cmd, stop)
		if busy {
			return msgFrame(msgHeader{resultCode: rcKeyBusy}, nil), false
		}
		defer leave()
	}
	s.mu.Lock()
	res := s.execute(q)
	s.mu.Unlock()
	drop := s.shouldDrop(cmd)
	return msgFrame(msgHeader{resultCode: res.rc, generation: res.gen, ttl: res.voidTime}, res.ops), drop
}

func (s *Server) handleBatch(m *asMsg, stop chan struct{}) ([]byte, bool) {
	var batchField []byte
	var filter []byte
	for _, f := range m.fields {
		switch f.typ {
		case fieldBatch, fieldBatchSet:
			batchField = f.data
		case fieldFilterExpr:
			filter = f.data
		default:
			s.log.Warn("aerotest: unsupported batch field", "type", f.typ)
			return batchErrorFrame(rcUnsupportedFeature), false
		}
	}
	if batchField == nil {
		return batchErrorFrame(rcParameter), false
	}
	rows, err := parseBatch(batchField, filter)
	if err != nil {
		var oe *opError
		if errors.As(err, &oe) {
			if oe.unsupported {
				s.log.Warn("aerotest: unsupported batch request", "reason", oe.reason)
			}
			return batchErrorFrame(oe.rc), false
		}
		s.log.Warn("aerotest: malformed batch", "err", err)
		return batchErrorFrame(rcParameter), false
	}
	s.stBatches.Add(1)
	s.stBatchRecs.Add(int64(len(rows)))
	cmd := Command{Kind: KindBatch, BatchSize: len(rows)}
	if len(rows) > 0 {
		first := rows[0].req.describe(KindBatch)
		cmd.Namespace, cmd.Set, cmd.Digest, cmd.Ops, cmd.Key = first.Namespace, first.Set, first.Digest, first.Ops, first.Key
	}
	var body []byte
	for _, row := range rows {
		var res result
		if row.req.isWrite() {
			cmd.Write = true
			leave, busy := s.enterWrite(row.req.describe(KindBatch), stop)
			if busy {
				res = result{rc: rcKeyBusy}
			} else {
				s.mu.Lock()
				res = s.execute(row.req)
				s.mu.Unlock()
				leave()
			}
		} else {
			s.mu.Lock()
			res = s.execute(row.req)
			s.mu.Unlock()
		}
		body = appendMsg(body, msgHeader{resultCode: res.rc, generation: res.gen, ttl: res.voidTime, txnTTL: row.index}, res.ops)
	}
	var out []byte
	if len(body) > 0 {
		out = appendProtoHeader(out, protoTypeMsg, len(body))
		out = append(out, body...)
	}
	out = append(out, msgFrame(msgHeader{info3: info3Last}, nil)...)
	return out, s.shouldDrop(cmd)
}

func batchErrorFrame(rc byte) []byte {
	return msgFrame(msgHeader{info3: info3Last, resultCode: rc}, nil)
}
