package hbaserpc

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/dcsync/dcsync"
	"github.com/dcsync/dcsync/driver"
)

// RemoteError is an exception thrown by an HBase server (or a condition this client
// reports in the same terms, such as a missing table). Find it in any error this
// package returns with errors.As.
type RemoteError struct {
	// Class is the server's exception class name, such as
	// "org.apache.hadoop.hbase.NotServingRegionException".
	Class string
	// Message is the exception's message (the first line of its stack trace).
	Message string
	// DoNotRetry is set when the server said retrying is pointless.
	DoNotRetry bool
}

// Error formats the error as "Class: Message".
func (e *RemoteError) Error() string {
	if e.Message == "" {
		return e.Class
	}
	return e.Class + ": " + e.Message
}

// Exception classes this package reacts to.
const (
	classNotServingRegion     = "org.apache.hadoop.hbase.NotServingRegionException"
	classRegionMoved          = "org.apache.hadoop.hbase.exceptions.RegionMovedException"
	classRegionOpening        = "org.apache.hadoop.hbase.exceptions.RegionOpeningException"
	classRegionServerStopped  = "org.apache.hadoop.hbase.regionserver.RegionServerStoppedException"
	classRegionServerAborted  = "org.apache.hadoop.hbase.regionserver.RegionServerAbortedException"
	classServerNotRunningYet  = "org.apache.hadoop.hbase.ipc.ServerNotRunningYetException"
	classRegionTooBusy        = "org.apache.hadoop.hbase.RegionTooBusyException"
	classCallQueueTooBig      = "org.apache.hadoop.hbase.CallQueueTooBigException"
	classCallDropped          = "org.apache.hadoop.hbase.CallDroppedException"
	classServerTooBusy        = "org.apache.hadoop.hbase.ipc.ServerTooBusyException"
	classPleaseHold           = "org.apache.hadoop.hbase.PleaseHoldException"
	classRetryImmediately     = "org.apache.hadoop.hbase.RetryImmediatelyException"
	classMultiTooLarge        = "org.apache.hadoop.hbase.MultiActionResultTooLarge"
	classMasterNotRunning     = "org.apache.hadoop.hbase.MasterNotRunningException"
	classNotAllMetaOnline     = "org.apache.hadoop.hbase.NotAllMetaRegionsOnlineException"
	classScannerReset         = "org.apache.hadoop.hbase.exceptions.ScannerResetException"
	classUnknownScanner       = "org.apache.hadoop.hbase.UnknownScannerException"
	classOutOfOrderScanner    = "org.apache.hadoop.hbase.exceptions.OutOfOrderScannerNextException"
	classLeaseException       = "org.apache.hadoop.hbase.regionserver.LeaseException"
	classTableNotFound        = "org.apache.hadoop.hbase.TableNotFoundException"
	classTableExists          = "org.apache.hadoop.hbase.TableExistsException"
	classTableNotEnabled      = "org.apache.hadoop.hbase.TableNotEnabledException"
	classTableNotDisabled     = "org.apache.hadoop.hbase.TableNotDisabledException"
	classNoServerForRegion    = "org.apache.hadoop.hbase.client.NoServerForRegionException"
	classOperationConflict    = "org.apache.hadoop.hbase.exceptions.OperationConflictException"
	classConnectionClosing    = "org.apache.hadoop.hbase.exceptions.ConnectionClosingException"
	classDoNotRetry           = "org.apache.hadoop.hbase.DoNotRetryIOException"
	classFailedServer         = "org.apache.hadoop.hbase.ipc.FailedServerException"
	classRegionInRecovery     = "org.apache.hadoop.hbase.exceptions.RegionInRecoveryException"
	classRegionOffline        = "org.apache.hadoop.hbase.client.RegionOfflineException"
	classNoSuchColumnFamily   = "org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException"
	classWrongRegion          = "org.apache.hadoop.hbase.regionserver.WrongRegionException"
	classFailedSanityCheck    = "org.apache.hadoop.hbase.exceptions.FailedSanityCheckException"
	classRpcThrottling        = "org.apache.hadoop.hbase.quotas.RpcThrottlingException"
	classAccessDenied         = "org.apache.hadoop.hbase.security.AccessDeniedException"
	classUnsupportedCellCodec = "org.apache.hadoop.hbase.ipc.UnsupportedCellCodecException"
)

// IsTableNotFound reports whether err says the table does not exist.
func IsTableNotFound(err error) bool { return hasRemoteClass(err, classTableNotFound) }

// IsTableExists reports whether err says the table already exists (from CreateTable).
func IsTableExists(err error) bool { return hasRemoteClass(err, classTableExists) }

func hasRemoteClass(err error, class string) bool {
	var re *RemoteError
	return errors.As(err, &re) && re.Class == class
}

// regionError reports whether the exception means the client's idea of where the
// region lives is stale: the location must be dropped and looked up again.
func (e *RemoteError) regionError() bool {
	switch e.Class {
	case classNotServingRegion, classRegionMoved, classRegionOpening, classRegionServerStopped,
		classRegionServerAborted, classServerNotRunningYet, classNoServerForRegion,
		classRegionOffline, classWrongRegion, classRegionInRecovery, classTableNotEnabled:
		return true
	}
	return false
}

// retryable reports whether the same call may be sent again. These exceptions are
// all raised before the operation is applied, so retrying them is safe even for
// non-idempotent calls.
func (e *RemoteError) retryable() bool {
	if e.regionError() {
		// TableNotEnabled is final for the call but still a reason to re-locate.
		return e.Class != classTableNotEnabled
	}
	switch e.Class {
	case classRegionTooBusy, classCallQueueTooBig, classCallDropped, classServerTooBusy,
		classPleaseHold, classRetryImmediately, classMultiTooLarge, classMasterNotRunning,
		classNotAllMetaOnline, classFailedServer, classRpcThrottling:
		return true
	}
	return false
}

// connError is a transport failure: dialing, writing, reading, or a dead connection.
type connError struct {
	// sent is true when the request may have reached the server, so its outcome
	// is unknown ("in doubt").
	sent bool
	err  error
}

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// timeoutError is a per-attempt RPC timeout (Config.RPCTimeout) that fired while
// the caller's context was still live. Alone, the request was sent: its outcome is
// unknown. A request that timed out before it could be sent is a connError (not
// sent) wrapping a timeoutError.
type timeoutError struct {
	method string
	// closed is set when the timeout closed the connection as dead (see
	// rpcConn.timedOut): the server's region locations are to be dropped.
	closed bool
}

func (e *timeoutError) Error() string {
	if e.closed {
		return "rpc " + e.method + " timed out (server silent: connection closed)"
	}
	return "rpc " + e.method + " timed out"
}

// errorKind tells the retry loop what to do with an attempt's error.
type errorKind int

const (
	kindFatal     errorKind = iota // return it
	kindRetry                      // safe to retry: not applied
	kindInDoubt                    // may have been applied: retry only if idempotent
	kindCancelled                  // the caller's context ended
)

func classify(err error) errorKind {
	// A transport failure first: a dial or write that timed out wraps an error that
	// is also context.DeadlineExceeded (net's i/o timeout), yet it is the server's
	// failure, not the caller's context ending.
	var ce *connError
	if errors.As(err, &ce) {
		if ce.sent {
			return kindInDoubt
		}
		return kindRetry
	}
	var te *timeoutError
	if errors.As(err, &te) {
		return kindInDoubt
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return kindCancelled
	}
	var re *RemoteError
	if errors.As(err, &re) {
		if !re.DoNotRetry && re.retryable() {
			return kindRetry
		}
		return kindFatal
	}
	var le *locateError
	if errors.As(err, &le) {
		if le.retry {
			return kindRetry
		}
		return kindFatal
	}
	return kindFatal
}

// locateError is a region lookup failure that is not a transport or server error.
type locateError struct {
	msg   string
	retry bool
}

func (e *locateError) Error() string { return e.msg }

// toDcsync turns an attempt's error into the package's public error shape.
func toDcsync(op string, err error) error {
	if err == nil {
		return nil
	}
	var de *dcsync.Error
	if errors.As(err, &de) {
		return err
	}
	switch classify(err) {
	case kindCancelled, kindInDoubt:
		return driver.Errorf(dcsync.Connection, op, "outcome unknown: %w", err)
	case kindRetry:
		var ce *connError
		if errors.As(err, &ce) {
			return driver.Errorf(dcsync.Connection, op, "%w", err)
		}
	}
	return driver.Errorf(dcsync.Internal, op, "%w", err)
}

// remoteFromNameBytes builds a RemoteError from the NameBytesPair form that Multi
// responses use: the name is the class, the value the stringified exception.
func remoteFromNameBytes(name string, value []byte) *RemoteError {
	return &RemoteError{Class: name, Message: firstLineMessage(name, string(value))}
}

// firstLineMessage extracts the message from a Java stack trace: the first line,
// without the leading "ClassName: ".
func firstLineMessage(class, trace string) string {
	line, _, _ := strings.Cut(trace, "\n")
	line = strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(line, class+": "); ok {
		return rest
	}
	if line == class {
		return ""
	}
	return line
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
