// Package driver is the contract between dcsync's primitives (packages lock, latch and
// queue) and its back ends (store/memory, store/sqlite, store/hbase, store/aerospike),
// as database/sql/driver is to database/sql: the one [Store] interface a back end
// implements, the optional capabilities it may add (each an interface found by type
// assertion: [CloseNotifier], [LockLister], [LatchLister], [LatchDeleter],
// [QueueLister], [QueueDeleter], [QueueTxCommitter], [LockBatcher], [LockMover],
// [QueueClaimer], [QueueCommitter], [QueueBatchReader], [Baseliner]), the records that cross it (lock states, latch counts,
// queue events, entries and offsets), and the validation and error helpers every back
// end uses so that bad input gets the same typed error, before any write, on every
// store.
//
// A store implements a handful of semantic operations, each atomic in its back end
// (acquire-if-free, owner-checked release, create-only counter, add, read-many,
// conditional append and offset commit); the lock, latch and queue logic is written
// once, above them. A new back end passes the conformance suite in driver/drivertest.
// Users of dcsync meet one name of it: driver.Store, the value storeurl.Open (or a
// store package's New) returns and lock.New, latch.New and queue.Create/Open take; the
// rest is for those who write a back end. The records a user reads have names in the
// primitives' packages (lock.State, queue.Spec, queue.Appended).
package driver
