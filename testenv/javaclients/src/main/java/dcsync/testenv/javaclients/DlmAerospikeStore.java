package dcsync.testenv.javaclients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import com.aerospike.client.AerospikeException;
import com.aerospike.client.Bin;
import com.aerospike.client.IAerospikeClient;
import com.aerospike.client.Key;
import com.aerospike.client.ResultCode;
import com.aerospike.client.policy.CommitLevel;
import com.aerospike.client.policy.GenerationPolicy;
import com.aerospike.client.policy.WritePolicy;
import com.github.rholder.retry.BlockStrategies;
import com.github.rholder.retry.RetryException;
import com.github.rholder.retry.Retryer;
import com.github.rholder.retry.RetryerBuilder;
import com.github.rholder.retry.StopStrategies;
import com.github.rholder.retry.WaitStrategies;

/**
 * DLM's Aerospike lock store, operation for operation: github.com/PhonePe/DLM
 * src/main/java/com/phonepe/dlm/lock/storage/aerospike/AerospikeStore.java (AerospikeStore.java:N)
 * and utils/AerospikeUtils.java (AerospikeUtils.java:N).
 */
final class DlmAerospikeStore implements Dlm.Store {
  // AerospikeStore.java:43-44
  static final String DATA_BIN = "data";
  static final String MODIFIED_AT_BIN = "uat";

  /**
   * AerospikeUtils.retryer (AerospikeUtils.java:33-41): retry on any AerospikeException, 5
   * attempts, 80 ms apart, with the same guava-retrying library (2.0.0).
   */
  static final Retryer<Object> RETRYER = RetryerBuilder.newBuilder()
      .retryIfExceptionOfType(AerospikeException.class)
      .withStopStrategy(StopStrategies.stopAfterAttempt(5))
      .withWaitStrategy(WaitStrategies.fixedWait(80, TimeUnit.MILLISECONDS))
      .withBlockStrategy(BlockStrategies.threadSleepStrategy())
      .build();

  private final IAerospikeClient client;
  private final String namespace;
  private final String setSuffix;

  DlmAerospikeStore(IAerospikeClient client, String namespace, String setSuffix) {
    this.client = client;
    this.namespace = namespace;
    this.setSuffix = setSuffix;
  }

  /** AerospikeUtils.getBin (AerospikeUtils.java:31-32,43-45): "%s##%s" of (farm, suffix). */
  static String bin(String binSuffix, String farm) {
    return "%s##%s".formatted(farm, binSuffix);
  }

  /** AerospikeStore.initialize (AerospikeStore.java:50-53): nothing. */
  @Override
  public void initialize() {}

  /**
   * AerospikeStore.write (AerospikeStore.java:55-81): a put with EXPECT_GEN_EQUAL generation 0
   * (only a missing record matches), expiration = TTL seconds, COMMIT_MASTER, bins
   * farm##data = 1 and farm##uat = client epoch ms, through the retryer; GENERATION_ERROR is
   * LOCK_UNAVAILABLE (AerospikeStore.java:116-124, not retried: it is no AerospikeException);
   * retries exhausted on other AerospikeExceptions: CONNECTION_ERROR.
   */
  @Override
  public void write(String lockId, String level, String farmId, Duration ttl) {
    final WritePolicy writePolicy = new WritePolicy(client.getWritePolicyDefault());
    writePolicy.generationPolicy = GenerationPolicy.EXPECT_GEN_EQUAL;
    writePolicy.generation = 0;
    writePolicy.expiration = (int) ttl.getSeconds();
    writePolicy.commitLevel = CommitLevel.COMMIT_MASTER;
    try {
      final List<Bin> bins = new ArrayList<>();
      bins.add(new Bin(bin(DATA_BIN, farmId), 1));
      bins.add(new Bin(bin(MODIFIED_AT_BIN, farmId), System.currentTimeMillis()));
      RETRYER.call(() -> {
        put(lockId, level, farmId, writePolicy, bins);
        return null;
      });
    } catch (ExecutionException | RetryException e) {
      if (e.getCause() instanceof LibException) {
        throw LibException.propagate(e);
      }
      throw new LibException("CONNECTION_ERROR",
          String.format("Error writing lock in aerospike [id = %s]", lockId), e.getCause());
    }
  }

  /**
   * AerospikeStore.remove (AerospikeStore.java:83-103): an unconditional delete with the
   * client's default write policy, through the retryer; RetryException: RETRIES_EXHAUSTED,
   * ExecutionException: CONNECTION_ERROR.
   */
  @Override
  public void remove(String lockId, String level, String farmId) {
    try {
      RETRYER.call(() -> client.delete(client.getWritePolicyDefault(),
          new Key(namespace, setName(level, farmId), lockId)));
    } catch (RetryException e) {
      throw new LibException("RETRIES_EXHAUSTED",
          String.format("Error removing lock in aerospike [id = %s]", lockId), e);
    } catch (ExecutionException e) {
      throw new LibException("CONNECTION_ERROR",
          String.format("Error removing lock in aerospike [id = %s]", lockId), e);
    }
  }

  /** AerospikeStore.write(private) (AerospikeStore.java:110-126). */
  private void put(String lockId, String level, String farmId, WritePolicy policy,
      List<Bin> bins) {
    try {
      client.put(policy, new Key(namespace, setName(level, farmId), lockId),
          bins.toArray(new Bin[0]));
    } catch (AerospikeException ae) {
      if (ae.getResultCode() == ResultCode.GENERATION_ERROR) {
        throw new LibException("LOCK_UNAVAILABLE",
            String.format("Error acquiring lock in aerospike [id = %s]", lockId), ae.getCause());
      }
      throw ae;
    }
  }

  /**
   * AerospikeStore.getSetName (AerospikeStore.java:128-140): "DC#farm#suffix" or "XDC#suffix".
   */
  String setName(String level, String farmId) {
    return "DC".equals(level)
        ? String.join("#", "DC", farmId, setSuffix)
        : String.join("#", "XDC", setSuffix);
  }
}
