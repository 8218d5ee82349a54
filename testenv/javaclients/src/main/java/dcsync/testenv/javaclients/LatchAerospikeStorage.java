package dcsync.testenv.javaclients;

import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import com.aerospike.client.AerospikeException;
import com.aerospike.client.Bin;
import com.aerospike.client.IAerospikeClient;
import com.aerospike.client.Key;
import com.aerospike.client.Operation;
import com.aerospike.client.Record;
import com.aerospike.client.ResultCode;
import com.aerospike.client.policy.RecordExistsAction;
import com.aerospike.client.policy.WritePolicy;
import com.github.rholder.retry.BlockStrategies;
import com.github.rholder.retry.RetryException;
import com.github.rholder.retry.Retryer;
import com.github.rholder.retry.RetryerBuilder;
import com.github.rholder.retry.StopStrategies;
import com.github.rholder.retry.WaitStrategies;

/**
 * DistributedLatch's Aerospike storage, operation for operation:
 * github.com/PhonePe/DistributedLatch
 * src/main/java/com/phonepe/latch/storage/aerospike/AerospikeLatchStorage.java
 * (AerospikeLatchStorage.java:N), plus DistributedLatchFactory.getOrCreateCountUpDownLatch's
 * KEY_EXISTS handling (DistributedLatchFactory.java:67-81,120-128). The storage context's ttl
 * (AerospikeLatchStorageContext) is passed to every write, as the library uses it for creation
 * AND every update.
 */
final class LatchAerospikeStorage {
  /** AerospikeLatchStorage.java:41 and Constants.DELIMITER "#". */
  static final String COUNT_BIN_PREFIX = "count";

  /**
   * readRetryer / writeRetryer (AerospikeLatchStorage.java:53-61): retry on any
   * AerospikeException, 5 attempts, 10 ms apart (guava-retrying 2.0.0, as the library).
   */
  private static <T> Retryer<T> retryer() {
    return RetryerBuilder.<T>newBuilder().retryIfExceptionOfType(AerospikeException.class)
        .withStopStrategy(StopStrategies.stopAfterAttempt(5))
        .withWaitStrategy(WaitStrategies.fixedWait(10, TimeUnit.MILLISECONDS))
        .withBlockStrategy(BlockStrategies.threadSleepStrategy()).build();
  }

  private final Retryer<Long> readRetryer = retryer();
  private final Retryer<Void> writeRetryer = retryer();
  private final IAerospikeClient client;
  private final String namespace;
  private final String setSuffix;

  LatchAerospikeStorage(IAerospikeClient client, String namespace, String setSuffix) {
    this.client = client;
    this.namespace = namespace;
    this.setSuffix = setSuffix;
  }

  /**
   * AerospikeLatchStorage.initialize (AerospikeLatchStorage.java:65-83): a CREATE_ONLY put of
   * count#farm = count with expiration = ttl, through the write retryer (KEY_EXISTS_ERROR is an
   * AerospikeException: retried 5 times, then RetryException -> INTERNAL_ERROR).
   */
  void initialize(String clientId, String farmId, String latchId, long count, int ttl) {
    try {
      final WritePolicy policy = new WritePolicy(client.getWritePolicyDefault());
      policy.recordExistsAction = RecordExistsAction.CREATE_ONLY;
      policy.expiration = ttl;
      writeRetryer.call(() -> {
        client.put(policy, new Key(namespace, setName(), key(clientId, latchId)),
            new Bin(countBin(farmId), count));
        return null;
      });
    } catch (ExecutionException | RetryException e) {
      throw LibException.propagate(e);
    }
  }

  /**
   * DistributedLatchFactory.getOrCreateCountUpDownLatch (DistributedLatchFactory.java:67-81):
   * initialize(0), and handleException (lines 120-128) swallows exactly a RetryException whose
   * last attempt failed with KEY_EXISTS_ERROR.
   */
  void getOrCreate(String clientId, String farmId, String latchId, int ttl) {
    try {
      initialize(clientId, farmId, latchId, 0, ttl);
    } catch (LibException e) {
      if (e.getCause() instanceof RetryException
          && e.getCause().getCause() instanceof AerospikeException ae
          && ae.getResultCode() == ResultCode.KEY_EXISTS_ERROR) {
        return;
      }
      throw e;
    }
  }

  /** AerospikeLatchStorage.decrementCount (AerospikeLatchStorage.java:85-88). */
  void decrementCount(String clientId, String farmId, String latchId, int ttl) {
    updateCount(clientId, farmId, latchId, -1, ttl);
  }

  /** AerospikeLatchStorage.incrementCount (AerospikeLatchStorage.java:90-93). */
  void incrementCount(String clientId, String farmId, String latchId, int ttl) {
    updateCount(clientId, farmId, latchId, 1, ttl);
  }

  /**
   * AerospikeLatchStorage.getCount (AerospikeLatchStorage.java:95-124): a get of the whole record
   * through the read retryer. DC: record.getLong(count#farm) (0 when the bin is missing; a
   * missing record: NullPointerException -> INTERNAL_ERROR). XDC: the sum of every bin whose
   * name CONTAINS "count#" (0 when none).
   */
  long getCount(String clientId, String level, String farmId, String latchId) {
    try {
      return readRetryer.call(() -> {
        final Record record = client.get(client.getReadPolicyDefault(),
            new Key(namespace, setName(), key(clientId, latchId)));
        if ("DC".equals(level)) {
          return record.getLong(countBin(farmId));
        }
        return record.bins.keySet().stream()
            .filter(bin -> bin.contains(COUNT_BIN_PREFIX.concat("#")))
            .map(record::getLong)
            .reduce(Long::sum)
            .orElse(0L);
      });
    } catch (ExecutionException | RetryException e) {
      throw LibException.propagate(e);
    }
  }

  /**
   * AerospikeLatchStorage.updateCount (AerospikeLatchStorage.java:143-160): operate add(count#farm,
   * delta) with UPDATE_ONLY and expiration = the context's ttl, so every update RESETS the whole
   * record's TTL to the updater's ttl; through the write retryer (a timed-out attempt that was
   * applied is applied again by the retry).
   */
  private void updateCount(String clientId, String farmId, String latchId, long delta, int ttl) {
    try {
      final WritePolicy policy = new WritePolicy(client.getWritePolicyDefault());
      policy.recordExistsAction = RecordExistsAction.UPDATE_ONLY;
      policy.expiration = ttl;
      writeRetryer.call(() -> {
        client.operate(policy, new Key(namespace, setName(), key(clientId, latchId)),
            Operation.add(new Bin(countBin(farmId), delta)));
        return null;
      });
    } catch (ExecutionException | RetryException e) {
      throw LibException.propagate(e);
    }
  }

  /** AerospikeLatchStorage.getSetName (AerospikeLatchStorage.java:162-164): "D_LTCH#suffix". */
  String setName() {
    return String.join("#", "D_LTCH", setSuffix);
  }

  /**
   * AerospikeLatchStorage.buildKey (AerospikeLatchStorage.java:42,166-168):
   * "D_LTCH#client#latch".
   */
  static String key(String clientId, String latchId) {
    return String.format(String.join("#", "D_LTCH", "%s#%s"), clientId, latchId);
  }

  /** AerospikeLatchStorage.getCountBin (AerospikeLatchStorage.java:170-172): "count#farm". */
  static String countBin(String farmId) {
    return String.join("#", COUNT_BIN_PREFIX, farmId);
  }
}
