package dcsync.testenv.javaclients;

import java.io.IOException;
import java.time.Duration;

import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.ColumnFamilyDescriptorBuilder;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.Delete;
import org.apache.hadoop.hbase.client.Put;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.client.TableDescriptor;
import org.apache.hadoop.hbase.client.TableDescriptorBuilder;
import org.apache.hadoop.hbase.io.compress.Compression;
import org.apache.hadoop.hbase.util.Bytes;

/**
 * DLM's HBase lock store, operation for operation: github.com/PhonePe/DLM
 * src/main/java/com/phonepe/dlm/lock/storage/hbase/HBaseStore.java (cited as HBaseStore.java:N).
 */
final class DlmHBaseStore implements Dlm.Store {
  // HBaseStore.java:45-47
  static final byte[] COLUMN_FAMILY = Bytes.toBytes("D");
  static final byte[] COLUMN_NAME = Bytes.toBytes("L");
  static final byte[] COLUMN_DATA = Bytes.toBytes("M");

  /**
   * The client-clock timestamp of this thread's last acquire Put, so that the contention
   * workers can report it; recording it does not change the operation.
   */
  static final ThreadLocal<Long> LAST_PUT_TS = ThreadLocal.withInitial(() -> 0L);

  private final Connection connection;
  private final String tableName;

  DlmHBaseStore(Connection connection, String tableName) {
    this.connection = connection;
    this.tableName = tableName;
  }

  /**
   * HBaseStore.initialize (HBaseStore.java:52-71): family D, GZ, VERSIONS=1, created when
   * tableExists is false, pre-split on OneByteSimpleHash(256)'s 256 prefixes; any failure is
   * TABLE_CREATION_ERROR (a concurrent creation included).
   */
  @Override
  public void initialize() {
    TableDescriptor desc = TableDescriptorBuilder.newBuilder(TableName.valueOf(tableName))
        .setColumnFamily(ColumnFamilyDescriptorBuilder.newBuilder(COLUMN_FAMILY)
            .setCompressionType(Compression.Algorithm.GZ)
            .setMaxVersions(1)
            .build())
        .build();
    try (Admin admin = connection.getAdmin()) {
      if (!admin.tableExists(TableName.valueOf(Bytes.toBytes(tableName)))) {
        admin.createTable(desc, OneByteSimpleHash.allPossiblePrefixes());
      }
    } catch (Exception e) {
      throw new LibException("TABLE_CREATION_ERROR", "Could not create table: " + tableName, e);
    }
  }

  /**
   * HBaseStore.write (HBaseStore.java:74-98): checkAndMutate "D:L absent" then a Put stamped
   * with the CLIENT clock (new Put(row, System.currentTimeMillis()), line 81) with
   * setTTL(ttl seconds * 1000) and D:L = "M". Not applied: LOCK_UNAVAILABLE; IOException:
   * CONNECTION_ERROR; anything else: propagate.
   */
  @Override
  public void write(String lockId, String level, String farmId, Duration ttl) {
    final byte[] row = rowKey(lockId, level, farmId);
    try (Table table = connection.getTable(TableName.valueOf(tableName))) {
      // The Put's timestamp is read from the client clock BEFORE the request is sent
      // (HBaseStore.java:81): a request that waits in flight carries a stale timestamp.
      final long now = System.currentTimeMillis();
      LAST_PUT_TS.set(now);
      @SuppressWarnings("deprecation") // the builder the library calls (HBaseStore.java:78-82)
      final boolean result = table.checkAndMutate(row, COLUMN_FAMILY)
          .qualifier(COLUMN_NAME)
          .ifNotExists()
          .thenPut(new Put(row, now).setTTL(ttl.getSeconds() * 1_000L)
              .addColumn(COLUMN_FAMILY, COLUMN_NAME, COLUMN_DATA));
      if (!result) {
        throw new LibException("LOCK_UNAVAILABLE",
            String.format("Error acquiring lock in HBase [id = %s]", lockId), null);
      }
    } catch (IOException e) {
      throw new LibException("CONNECTION_ERROR",
          String.format("Error writing lock in HBase [id = %s]", lockId), e);
    } catch (LibException e) {
      throw e;
    } catch (Exception e) {
      throw LibException.propagate(e);
    }
  }

  /**
   * HBaseStore.remove (HBaseStore.java:101-107): an unconditional Delete of the whole row with
   * no timestamp, so the server stamps the delete marker with its current time and it hides
   * every cell of the row up to that millisecond, whoever wrote it.
   */
  @Override
  public void remove(String lockId, String level, String farmId) {
    try (Table table = connection.getTable(TableName.valueOf(tableName))) {
      table.delete(new Delete(rowKey(lockId, level, farmId)));
    } catch (IOException e) {
      throw LibException.propagate(e);
    }
  }

  /**
   * HBaseStore.getNormalisedRowKey (HBaseStore.java:122-135): "DC#farm#lockId" or "XDC#lockId"
   * (LockLevel values, lock/level/LockLevel.java:42-43, joined by Constants.DELIMITER "#"),
   * salted by the one-byte hash prefix.
   */
  static byte[] rowKey(String lockId, String level, String farmId) {
    final String rowKey = "DC".equals(level)
        ? String.join("#", "DC", farmId, lockId)
        : String.join("#", "XDC", lockId);
    return OneByteSimpleHash.distributedKey(Bytes.toBytes(rowKey));
  }
}
