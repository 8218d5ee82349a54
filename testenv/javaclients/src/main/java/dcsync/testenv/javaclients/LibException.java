package dcsync.testenv.javaclients;

/**
 * Stands for the libraries' exceptions: DLM's {@code DLMException} (exception/DLMException.java,
 * codes in exception/ErrorCode.java: CONNECTION_ERROR, INTERNAL_ERROR, RETRIES_EXHAUSTED,
 * LOCK_UNAVAILABLE, TABLE_CREATION_ERROR) and DistributedLatch's
 * {@code DistributedLatchException} (codes INTERNAL_ERROR, NOT_IMPLEMENTED). The tool reports
 * {@link #code} and the cause chain to its caller.
 */
final class LibException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  final String code;

  LibException(String code, String message, Throwable cause) {
    super(message, cause);
    this.code = code;
  }

  /**
   * DLMException.propagate (DLMException.java:40-50) and DistributedLatchException.propagate
   * (DistributedLatchException.java:38-45): the exception itself or its cause when it is one,
   * else INTERNAL_ERROR wrapping it.
   */
  static LibException propagate(Throwable t) {
    if (t instanceof LibException e) {
      return e;
    }
    if (t.getCause() instanceof LibException e) {
      return e;
    }
    return new LibException("INTERNAL_ERROR", "Error occurred", t);
  }
}
