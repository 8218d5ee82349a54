package driver

import (
	"context"
	"github.com/dcsync/dcsync"
	"time"
)

// Queue limits. Stores may refuse less (a store's doc says so), never more.
const (
	// MaxQueuePartitions bounds a queue's partition count.
	MaxQueuePartitions = 4096
	// MaxQueueGroups bounds a queue's consumer groups (over its whole life: groups are
	// never removed).
	MaxQueueGroups = 64
	// MaxQueuePayload bounds one event's payload.
	MaxQueuePayload = 256 << 10
	// MaxQueueKeyLen bounds an event's partition key and its idempotency id, in bytes.
	MaxQueueKeyLen = 256
	// MaxQueueBatch bounds the events of one AppendQueue call.
	MaxQueueBatch = 10000
	// DefaultQueueDedup is how long a store remembers event ids when the spec says 0.
	DefaultQueueDedup = 24 * time.Hour
)

// QueueSpec describes a queue. Partitions and the order of Groups are fixed once the
// queue exists; groups can be added (AddQueueGroup), never removed.
//
// Storage partitions: 0..Partitions-1 hold the queue's events, shared by every group
// (each group keeps its own offsets). Partition Partitions+i is the dead-letter
// partition of Groups[i]. Stores treat every partition alike.
type QueueSpec struct {
	// Name is the queue's name: 1 to MaxIDLen bytes of UTF-8, no control characters.
	Name string
	// Partitions is the number of event partitions, 1 to MaxQueuePartitions.
	Partitions int
	// Groups are the consumer groups' names, in creation order, each a valid id,
	// distinct; at most MaxQueueGroups.
	Groups []string
	// Dedup is how long event ids are remembered for duplicate detection; 0 means
	// DefaultQueueDedup. An id seen again within it is not appended again.
	Dedup time.Duration
	// Created is when the store created the queue (set by the store, by its clock).
	Created time.Time
}

// StoragePartitions is the number of storage partitions of the queue: its event
// partitions plus one dead-letter partition per group.
func (s QueueSpec) StoragePartitions() int { return s.Partitions + len(s.Groups) }

// GroupIndex returns the index of group g in s.Groups, or -1.
func (s QueueSpec) GroupIndex(g string) int {
	for i, n := range s.Groups {
		if n == g {
			return i
		}
	}
	return -1
}

// DedupWindow returns s.Dedup, or DefaultQueueDedup when it is 0.
func (s QueueSpec) DedupWindow() time.Duration {
	if s.Dedup <= 0 {
		return DefaultQueueDedup
	}
	return s.Dedup
}

// QueueEvent is one event to append.
type QueueEvent struct {
	// Partition is the storage partition the event goes to.
	Partition int
	// Key is the event's partition key ("" when it has none); stored and returned.
	Key string
	// ID is the event's idempotency id ("" when it has none). Within the queue's dedup
	// window, at most one event with a given ID is appended; a later append of the same
	// ID reports Duplicate with the first event's partition and sequence number.
	ID string
	// Payload is the event's body, at most MaxQueuePayload bytes (may be empty).
	Payload []byte
}

// QueueAppend is the outcome of appending one event.
type QueueAppend struct {
	// Partition and Seq locate the event (for a duplicate: the earlier event).
	Partition int
	Seq       uint64
	// Duplicate reports that an event with the same ID was already in the queue and
	// this one was not appended.
	Duplicate bool
}

// QueueEntry is one stored event, or the tombstone of an aborted sequence number.
type QueueEntry struct {
	Seq     uint64
	Key     string
	ID      string
	Payload []byte
	// At is when the event was appended, by the store's clock where it has one.
	At time.Time
	// Aborted marks a tombstone: the sequence number was reserved but its event never
	// written (AbortQueueSeq); it carries no event and readers skip it.
	Aborted bool
}

// QueueBounds are a partition's ends.
type QueueBounds struct {
	// Head is the next sequence number to be reserved: every seq below it is reserved
	// (written, being written, aborted or trimmed).
	Head uint64
	// Floor is the lowest sequence number still stored: entries below it are trimmed.
	Floor uint64
}

// QueueRead is the result of ReadQueue.
type QueueRead struct {
	// Entries are consecutive: Entries[i].Seq == Entries[0].Seq+i, starting at
	// max(from, Floor). The read stops at max entries, at Head, or before the first
	// reserved seq that is neither written nor aborted (a write in flight or a hole).
	Entries []QueueEntry
	QueueBounds
}

// QueueOffset is a consumer group's position in one partition, and its owner.
type QueueOffset struct {
	// Token is the fencing token of the partition's current owner (0: never owned).
	Token uint64
	// Next is the first sequence number not yet acknowledged: every seq below it is.
	Next uint64
	// Attempts counts failed deliveries of the entry at Next (consumers that died or
	// gave up holding it); a consumer dead-letters the entry when it reaches the limit.
	Attempts int
	// Held reports that an owner holds the partition. ClaimQueuePartition returns the
	// value from before the claim: true means the previous owner ended without
	// releasing (it died, or its lease lapsed).
	Held bool
	// Version orders one owner's writes of the record. CommitQueueOffset applies off
	// only when the stored token is off.Token and the stored Version is below
	// off.Version, so a write whose first attempt lands late, after a later write of
	// the same owner, changes nothing (it cannot move Next back or lose a mark). Owners
	// write the Version they read plus one (gaps are allowed); a claim keeps it.
	Version uint64
	// Marks is the state of entries above Next that the owner persisted: entries acked
	// out of order (a successor skips them, so an Ack that returned nil is never
	// delivered again) and failed attempts of entries not at Next (so MaxAttempts
	// counts the same across owners). Stores keep it verbatim; it is encoded with
	// EncodeQueueMarks relative to Next, at most MaxQueueMarksLen bytes.
	Marks QueueMarks
}

// QueueStore is the storage a queue needs. Every method validates its input before any
// I/O and is atomic per partition; a method that fails in doubt is retried by the
// store so that it applies at most once (AppendQueue: exactly once on success).
// Sequence numbers start at 0 in every partition.
type QueueStore interface {
	// CreateQueue creates the queue (and any tables it needs). It returns
	// AlreadyExists, changing nothing, when a queue of that name exists.
	CreateQueue(ctx context.Context, spec QueueSpec) error
	// ReadQueueSpec returns the queue's spec, or NotFound.
	ReadQueueSpec(ctx context.Context, name string) (QueueSpec, error)
	// AddQueueGroup appends group to the queue's groups and returns the new spec; it
	// returns AlreadyExists (and the spec) when the group exists, NotFound when the
	// queue does not, InvalidArgument beyond MaxQueueGroups. Once it has returned
	// (nil or AlreadyExists), no TrimQueue raises a shared partition's floor above the
	// new group's offset (0 until it commits), including a trim that read the spec
	// before the group was added and whose floor write lands late (conformance:
	// stores' TestTrim*AGroupAdded* / TestReviewTrimHeldBackByAGroupAddedMeanwhile).
	AddQueueGroup(ctx context.Context, name, group string) (QueueSpec, error)
	// AppendQueue appends events; events of one partition get consecutive sequence
	// numbers in the order given. Result i belongs to events[i]. On success every
	// event is stored exactly once (or reported Duplicate), also when attempts failed
	// in doubt. On error, some events may be stored: appending them again with the
	// same IDs is safe.
	AppendQueue(ctx context.Context, name string, events []QueueEvent) ([]QueueAppend, error)
	// ReadQueue reads partition p from seq from: see QueueRead.
	ReadQueue(ctx context.Context, name string, p int, from uint64, max int) (QueueRead, error)
	// AbortQueueSeq writes a tombstone at seq if no event is there, so that a producer
	// that reserved seq and has not written it can never write it. It reports whether
	// seq is now aborted (false: an event is stored there). seq must be below Head.
	AbortQueueSeq(ctx context.Context, name string, p int, seq uint64) (bool, error)
	// QueueBounds reads the bounds of many partitions in one round trip where the back
	// end allows it; result i belongs to ps[i].
	QueueBounds(ctx context.Context, name string, ps []int) ([]QueueBounds, error)
	// ClaimQueuePartition makes token the owner of group's offset in partition p when
	// token is greater than the stored token, writing the token only (Next, Attempts,
	// Held, Version and Marks stay as stored), and returns the stored offset with
	// Token set to token. An equal token (a retried claim) writes nothing and returns
	// the stored offset. A lower token gets LockLost and the stored offset, and changes
	// nothing. So a claim that lands late, after later writes, changes nothing.
	ClaimQueuePartition(ctx context.Context, name, group string, p int, token uint64) (QueueOffset, error)
	// CommitQueueOffset writes off (Next, Attempts, Held, Version, Marks) when the
	// stored token equals off.Token and the stored Version is below off.Version. A
	// write that moves Next back (off.Next below the stored Next: a Seek, a Reset) is
	// a rewind: it is refused with InvalidArgument, writing nothing, when off.Next is
	// below the partition's Floor (those events are trimmed), and a rewind that is
	// stored holds back every trim that has not yet raised the Floor (see TrimQueue):
	// the events from off.Next on stay until the group acks them. When
	// the stored offset already equals off (an earlier attempt of this call landed) it
	// returns nil. Otherwise it returns LockLost (another token owns the partition, or
	// a later write of this owner is stored), changing nothing, unless an attempt of
	// this call failed in doubt and another token now owns the partition: then the
	// outcome is unknown (a Connection error), since the claim keeps Next and Version
	// and nothing stored tells whether the attempt landed before it.
	CommitQueueOffset(ctx context.Context, name, group string, p int, off QueueOffset) error
	// ReadQueueOffsets reads group's offsets of many partitions (the zero offset where
	// none is stored); result i belongs to ps[i].
	ReadQueueOffsets(ctx context.Context, name, group string, ps []int) ([]QueueOffset, error)
	// TrimQueue raises partition p's Floor to below, or to the lowest Next of the
	// offsets that read p if one is lower (every group's for an event partition, the
	// owning group's for a dead-letter partition; a group with no offset stored is at
	// 0), and deletes the entries below the Floor. It never lowers the Floor. below
	// must not exceed Head.
	//
	// The offsets are those that stand when the Floor is raised, not those the caller
	// read to compute below: a trim never deletes an event that a group's offset,
	// moved back by a rewind (CommitQueueOffset) that returned before the Floor was
	// raised, still has to deliver. Stores where the offsets and the Floor cannot be
	// read and written in one atomic step (HBase, Aerospike) order the two by a
	// record both sides compare-and-set (a store's doc says how); the deletes below
	// the Floor may then land at any time, since no rewind goes below the Floor.
	TrimQueue(ctx context.Context, name string, p int, below uint64) error
}

// QueueTxCommitter is implemented by stores whose offsets live in a SQL database the
// application can write to (SQLite): CommitQueueOffsetTx is CommitQueueOffset inside
// the caller's transaction tx (a *sql.Tx of the store's own database, see the store's
// DB method), so the ack commits or rolls back with the application's own writes.
type QueueTxCommitter interface {
	CommitQueueOffsetTx(ctx context.Context, tx any, name, group string, p int, off QueueOffset) error
}

// ValidateQueueSpec checks a spec given to CreateQueue.
func ValidateQueueSpec(s QueueSpec) error {
	if err := ValidateID("queue", s.Name); err != nil {
		return err
	}
	if s.Partitions < 1 || s.Partitions > MaxQueuePartitions {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "queue partitions %d is outside [1, %d]", s.Partitions, MaxQueuePartitions)
	}
	if len(s.Groups) == 0 {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "queue %q has no consumer group", s.Name)
	}
	if len(s.Groups) > MaxQueueGroups {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "queue has %d groups, more than %d", len(s.Groups), MaxQueueGroups)
	}
	seen := make(map[string]bool, len(s.Groups))
	for _, g := range s.Groups {
		if err := ValidateID("group", g); err != nil {
			return err
		}
		if seen[g] {
			return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "group %q is listed twice", g)
		}
		seen[g] = true
	}
	if s.Dedup < 0 {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "queue dedup window %v is negative", s.Dedup)
	}
	return nil
}

// ValidateQueuePartition checks a storage partition index against the store-wide
// bound (the queue's own bound, StoragePartitions, is checked by the queue package).
func ValidateQueuePartition(p int) error {
	if p < 0 || p >= MaxQueuePartitions+MaxQueueGroups {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "queue partition %d is outside [0, %d)", p, MaxQueuePartitions+MaxQueueGroups)
	}
	return nil
}

// ValidateQueuePartitions checks a queue name and a list of storage partitions (of
// QueueBounds and ReadQueueOffsets).
func ValidateQueuePartitions(name string, ps []int) error {
	if err := ValidateID("queue", name); err != nil {
		return err
	}
	for _, p := range ps {
		if err := ValidateQueuePartition(p); err != nil {
			return err
		}
	}
	return nil
}

// ValidateQueueEvents checks an AppendQueue batch: its size and every event's
// partition, key, id and payload.
func ValidateQueueEvents(events []QueueEvent) error {
	if len(events) == 0 {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "no events to append")
	}
	if len(events) > MaxQueueBatch {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "%d events in one batch, more than %d", len(events), MaxQueueBatch)
	}
	for i, e := range events {
		if err := ValidateQueuePartition(e.Partition); err != nil {
			return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "event %d: %v", i, err)
		}
		if len(e.Key) > MaxQueueKeyLen || len(e.ID) > MaxQueueKeyLen {
			return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "event %d: key or id longer than %d bytes", i, MaxQueueKeyLen)
		}
		if len(e.Payload) > MaxQueuePayload {
			return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "event %d: payload is %d bytes, more than %d", i, len(e.Payload), MaxQueuePayload)
		}
	}
	return nil
}

// ValidateQueueRead checks ReadQueue's and AbortQueueSeq's arguments (max is ignored
// when negative is not possible: pass 1 for calls without it).
func ValidateQueueRead(name string, p, max int) error {
	if err := ValidateID("queue", name); err != nil {
		return err
	}
	if err := ValidateQueuePartition(p); err != nil {
		return err
	}
	if max < 1 || max > MaxQueueBatch {
		return Errorf(dcsync.InvalidArgument, "dcsync.Validate", "read max %d is outside [1, %d]", max, MaxQueueBatch)
	}
	return nil
}
