package dcsync.testenv.javaclients;

import java.io.IOException;
import java.util.NavigableMap;

import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.Get;
import org.apache.hadoop.hbase.client.Increment;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptor;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;
import org.apache.hadoop.hbase.io.compress.Compression;
import org.apache.hadoop.hbase.util.Bytes;

/**
 * DistributedLatch's HBase storage, operation for operation: github.com/PhonePe/DistributedLatch
 * src/main/java/com/phonepe/latch/storage/hbase/HBaseLatchStorage.java (HBaseLatchStorage.java:N).
 * The storage context's ttl (HBaseLatchStorageContext) is passed to {@link #initialize}, the only
 * call that uses it.
 */
final class LatchHBaseStorage {
  // HBaseLatchStorage.java:58-60
  static final byte[] CF_NAME = Bytes.toBytes("C");
  static final String DELIMITER = "_";
  static final String COUNT_COL_PREFIX = "count";

  private final Connection connection;
  private final String tableSuffix;

  LatchHBaseStorage(Connection connection, String tableSuffix) {
    this.connection = connection;
    this.tableSuffix = tableSuffix;
  }

  /**
   * HBaseLatchStorage.initialize (HBaseLatchStorage.java:72-86): create the table if absent, then
   * an INCREMENT of count_farm by count with setTTL(ttl * 1000): creating an existing latch adds
   * count to it and gives the cell a fresh TTL.
   */
  void initialize(String clientId, String farmId, String latchId, long count, int ttlSeconds) {
    try {
      final TableName tableName = TableName.valueOf(tableName());
      createTableIfNotExists(tableName);
      try (Table t = connection.getTable(tableName)) {
        t.increment(new Increment(rowKey(clientId, latchId))
            .addColumn(CF_NAME, countColumn(farmId), count)
            .setTTL(ttlSeconds * 1000L));
      }
    } catch (IOException e) {
      throw LibException.propagate(e);
    }
  }

  /** HBaseLatchStorage.decrementCount (HBaseLatchStorage.java:88-97): Increment -1, NO TTL. */
  void decrementCount(String clientId, String farmId, String latchId) {
    add(clientId, farmId, latchId, -1);
  }

  /** HBaseLatchStorage.incrementCount (HBaseLatchStorage.java:99-108): Increment +1, NO TTL. */
  void incrementCount(String clientId, String farmId, String latchId) {
    add(clientId, farmId, latchId, 1);
  }

  private void add(String clientId, String farmId, String latchId, long delta) {
    try (Table t = connection.getTable(TableName.valueOf(tableName()))) {
      t.increment(new Increment(rowKey(clientId, latchId))
          .addColumn(CF_NAME, countColumn(farmId), delta));
    } catch (IOException e) {
      throw LibException.propagate(e);
    }
  }

  /**
   * HBaseLatchStorage.getCount (HBaseLatchStorage.java:110-141). DC: a Get of C:count_farm and
   * Bytes.toLong of its value (a missing cell: NullPointerException, not caught by the
   * library). XDC: a Get of family C and the sum of Bytes.toLong over every cell of the family
   * (a missing row: getFamilyMap returns null, NullPointerException).
   */
  long getCount(String clientId, String level, String farmId, String latchId) {
    try (Table t = connection.getTable(TableName.valueOf(tableName()))) {
      if ("DC".equals(level)) {
        Result result = t.get(new Get(rowKey(clientId, latchId))
            .addColumn(CF_NAME, countColumn(farmId)));
        return Bytes.toLong(result.getValue(CF_NAME, countColumn(farmId)));
      }
      NavigableMap<byte[], byte[]> qualifierValueMap =
          t.get(new Get(rowKey(clientId, latchId)).addFamily(CF_NAME)).getFamilyMap(CF_NAME);
      return qualifierValueMap.values().stream().mapToLong(Bytes::toLong).sum();
    } catch (IOException e) {
      throw LibException.propagate(e);
    }
  }

  /**
   * HBaseLatchStorage.createTableIfNotExists (HBaseLatchStorage.java:160-171): family C, GZ
   * (default VERSIONS), pre-split on the 256 prefixes. A concurrent creation throws
   * TableExistsException (an IOException), as in the library.
   */
  private void createTableIfNotExists(TableName tableName) throws IOException {
    try (Admin admin = connection.getAdmin()) {
      if (!admin.tableExists(tableName)) {
        TableDescriptor desc = TableDescriptorBuilder.newBuilder(tableName)
            .setColumnFamily(ColumnFamilyDescriptorBuilder.newBuilder(CF_NAME)
                .setCompressionType(Compression.Algorithm.GZ)
                .build())
            .build();
        admin.createTable(desc, OneByteSimpleHash.allPossiblePrefixes());
      }
    }
  }

  /** HBaseLatchStorage.getTableName (HBaseLatchStorage.java:173-175): "D_LTCH_suffix". */
  String tableName() {
    return String.join(DELIMITER, "D_LTCH", tableSuffix);
  }

  /** HBaseLatchStorage.buildRowKey (HBaseLatchStorage.java:177-179): salted "client_latch". */
  static byte[] rowKey(String clientId, String latchId) {
    return OneByteSimpleHash.distributedKey(Bytes.toBytes(String.join(DELIMITER, clientId,
        latchId)));
  }

  /** HBaseLatchStorage.getCountColumn (HBaseLatchStorage.java:181-183): "count_farm". */
  static byte[] countColumn(String farmId) {
    return Bytes.toBytes(String.join(DELIMITER, COUNT_COL_PREFIX, farmId));
  }
}
