package dcsync.testenv.javaclients;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The DLM lock manager's logic above its store: DistributedLockManager (lock ids) and
 * LockBase (acquire loop, release). Source: github.com/PhonePe/DLM,
 * src/main/java/com/phonepe/dlm/.
 */
final class Dlm {
  /** ILockStore (lock/storage/ILockStore.java): what HBaseStore and AerospikeStore implement. */
  interface Store {
    void initialize();

    void write(String lockId, String level, String farmId, Duration ttl);

    void remove(String lockId, String level, String farmId);
  }

  /** lock/Lock.java: the lock id, level, farm and the instance's acquired flag. */
  static final class Lock {
    final String lockId;
    final String level;
    final String farmId;
    final AtomicBoolean acquiredStatus = new AtomicBoolean();

    Lock(String lockId, String level, String farmId) {
      this.lockId = lockId;
      this.level = level;
      this.farmId = farmId;
    }
  }

  private final Store store;

  Dlm(Store store) {
    this.store = store;
  }

  Store store() {
    return store;
  }

  /**
   * DistributedLockManager.getLockInstance (DistributedLockManager.java:132-138): the lock id is
   * String.format("%s#%s", clientId, lockId), unescaped.
   */
  static Lock lockInstance(String clientId, String farmId, String lockName, String level) {
    return new Lock(String.format("%s#%s", clientId, lockName), level, farmId);
  }

  /** LockBase.tryAcquireLock (LockBase.java:99-102) -> writeToStore (LockBase.java:146-149). */
  void tryAcquireLock(Lock lock, Duration ttl) {
    writeToStore(lock, ttl);
  }

  /**
   * LockBase.acquireLock(lock, duration, timeout) (LockBase.java:114-134): write; on
   * LOCK_UNAVAILABLE sleep sleepBetweenRetries and try again until the Timer (utils/Timer.java:
   * whole seconds of timeout, System.currentTimeMillis) has expired, then rethrow.
   */
  void acquireLock(Lock lock, Duration ttl, Duration timeout, Duration sleepBetweenRetries) {
    final long start = System.currentTimeMillis();
    final long durationSeconds = timeout.getSeconds();
    boolean success = false;
    do {
      try {
        writeToStore(lock, ttl);
        success = true;
      } catch (LibException e) {
        if (System.currentTimeMillis() - start > durationSeconds * 1000) {
          throw e;
        }
        if ("LOCK_UNAVAILABLE".equals(e.code)) {
          sleep(sleepBetweenRetries);
          continue;
        }
        throw e;
      }
    } while (!success);
  }

  /**
   * LockBase.releaseLock (LockBase.java:136-144): only if this Lock instance acquired it; then an
   * unconditional store remove.
   */
  boolean releaseLock(Lock lock) {
    if (lock.acquiredStatus.get()) {
      store.remove(lock.lockId, lock.level, lock.farmId);
      lock.acquiredStatus.compareAndSet(true, false);
      return !lock.acquiredStatus.get();
    }
    return false;
  }

  private void writeToStore(Lock lock, Duration ttl) {
    store.write(lock.lockId, lock.level, lock.farmId, ttl);
    lock.acquiredStatus.compareAndSet(false, true);
  }

  /** LockBase.sleep (LockBase.java:158-166). */
  private static void sleep(Duration d) {
    try {
      Thread.sleep(d.toMillis());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw LibException.propagate(e);
    }
  }
}
