package dcsync.testenv.javaclients;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The row-key salt both Java libraries use: {@code RowKeyDistributorByHashPrefix} with
 * {@code OneByteSimpleHash(256)} from the HBaseWD fork com.sematext.hbase.ds:hbase-ds 0.0.2
 * (DLM HBaseStore.java:42-44, DistributedLatch HBaseLatchStorage.java:54-57), written here
 * from its definition because that artifact is not on Maven Central:
 *
 * <ul>
 *   <li>hash = Arrays.hashCode of the key bytes (h = 1; h = 31*h + signed byte, in int32);
 *   <li>prefix = (long) Math.abs(hash) % 256, as one byte (Math.abs(MIN_VALUE) stays
 *       negative; -2^31 % 256 is 0);
 *   <li>distributed key = prefix byte + key bytes;
 *   <li>all possible prefixes (the split keys of a created table) = {0x00}..{0xFF}.
 * </ul>
 *
 * The golden vectors are layout/testdata/hbase-rowkey-prefix-vectors.tsv ({@link #selftest}).
 */
final class OneByteSimpleHash {
  static final int BUCKETS = 256;

  private OneByteSimpleHash() {}

  static byte prefix(byte[] key) {
    long hash = Math.abs(Arrays.hashCode(key));
    return (byte) (hash % BUCKETS);
  }

  static byte[] distributedKey(byte[] key) {
    byte[] out = new byte[key.length + 1];
    out[0] = prefix(key);
    System.arraycopy(key, 0, out, 1, key.length);
    return out;
  }

  static byte[] distributedKey(String key) {
    return distributedKey(key.getBytes(StandardCharsets.UTF_8));
  }

  static byte[][] allPossiblePrefixes() {
    byte[][] out = new byte[BUCKETS][];
    for (int i = 0; i < BUCKETS; i++) {
      out[i] = new byte[] {(byte) i};
    }
    return out;
  }

  /** Checks every vector of the TSV file; returns "ok N vectors" or throws. */
  static String selftest(Path file) throws IOException {
    int n = 0;
    List<String> failures = new ArrayList<>();
    for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
      if (line.isEmpty() || line.startsWith("#")) {
        continue;
      }
      String[] f = line.split("\t", -1);
      if (f.length != 3) {
        throw new IOException("bad vector line: " + line);
      }
      byte[] key = f[0].getBytes(StandardCharsets.UTF_8);
      int hash = Arrays.hashCode(key);
      int prefix = prefix(key) & 0xff;
      n++;
      if (hash != Integer.parseInt(f[1]) || prefix != Integer.parseInt(f[2])) {
        failures.add("'" + f[0] + "': hash=" + hash + " prefix=" + prefix + ", want " + f[1] + " "
            + f[2]);
      }
    }
    // Math.abs(Integer.MIN_VALUE) is negative: the prefix must still be 0, not a negative
    // byte. No short string hashes to MIN_VALUE, so check the arithmetic directly.
    long minAbs = Math.abs(Integer.MIN_VALUE);
    if ((byte) (minAbs % BUCKETS) != 0) {
      failures.add("MIN_VALUE hash gives prefix " + (byte) (minAbs % BUCKETS) + ", want 0");
    }
    if (n == 0) {
      throw new IOException("no vectors in " + file);
    }
    if (!failures.isEmpty()) {
      throw new IOException("FAIL " + failures.size() + "/" + n + ": " + failures);
    }
    return "ok " + n + " vectors";
  }
}
