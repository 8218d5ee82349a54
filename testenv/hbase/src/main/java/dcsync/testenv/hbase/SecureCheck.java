package dcsync.testenv.hbase;

import java.io.File;
import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * The HBase Java client against the secure testenv (LocalHBaseSecure): the proof that
 * the servers demand Kerberos.
 *
 * <pre>
 *   SecureCheck refused    a client with simple authentication is refused (exit 0 when it is)
 * </pre>
 *
 * <p>{@code java-layout health} is the kerberized client: with DCSYNC_HBASE_SECURE_KEYTAB and
 * DCSYNC_HBASE_SECURE_PRINCIPAL set (and KRB5_CONFIG naming the run directory's krb5.conf),
 * {@link #clientSecurity} logs in from the keytab and turns Kerberos on in the client's
 * configuration; DCSYNC_HBASE_TLS_DIR adds the client's TLS (trusting {@code ca.p12}).
 */
public final class SecureCheck {
  private SecureCheck() {}

  /**
   * Configures conf for the secure testenv when DCSYNC_HBASE_SECURE_PRINCIPAL is set (and
   * logs in from DCSYNC_HBASE_SECURE_KEYTAB); leaves it alone otherwise.
   */
  static void clientSecurity(Configuration conf) {
    String principal = System.getenv("DCSYNC_HBASE_SECURE_PRINCIPAL");
    String tlsDir = System.getenv("DCSYNC_HBASE_TLS_DIR");
    if (tlsDir != null && !tlsDir.isEmpty()) {
      conf.setBoolean("hbase.client.netty.tls.enabled", true);
      conf.set("hbase.rpc.tls.truststore.location", new File(tlsDir, "ca.p12").getAbsolutePath());
      conf.set("hbase.rpc.tls.truststore.password", "changeit");
      conf.set("hbase.rpc.tls.truststore.type", "PKCS12");
    }
    if (principal == null || principal.isEmpty()) {
      return;
    }
    String krb5 = System.getenv("KRB5_CONFIG");
    if (krb5 != null && !krb5.isEmpty()) {
      System.setProperty("java.security.krb5.conf", krb5);
    }
    LocalHBaseSecure.secure(conf, new File("/nonexistent"));
    conf.set("hbase.rpc.protection", LocalHBaseSecure.envOr("DCSYNC_HBASE_RPC_PROTECTION", "authentication"));
    try {
      UserGroupInformation.setConfiguration(conf);
      UserGroupInformation.loginUserFromKeytab(principal, System.getenv("DCSYNC_HBASE_SECURE_KEYTAB"));
    } catch (IOException e) {
      throw new RuntimeException("kerberos login as " + principal + ": " + e, e);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 1 || !args[0].equals("refused")) {
      System.err.println("usage: SecureCheck refused");
      System.exit(2);
    }
    Configuration conf = JavaLayout.clientConf();
    // A client with simple authentication (no Kerberos).
    conf.set("hbase.security.authentication", "simple");
    conf.set("hadoop.security.authentication", "simple");
    UserGroupInformation.setConfiguration(conf);
    conf.setInt("hbase.client.retries.number", 1);
    conf.setInt("hbase.client.operation.timeout", 20_000);
    conf.setInt("hbase.rpc.timeout", 10_000);
    try (Connection conn = ConnectionFactory.createConnection(conf);
        Admin admin = conn.getAdmin()) {
      // A master RPC, and a read of hbase:meta from the region server.
      int tables = admin.listTableNames().length;
      int regions = admin.getRegions(TableName.META_TABLE_NAME).size();
      System.out.println("NOT refused: an unauthenticated client was served (" + tables + " tables, "
          + regions + " meta regions)");
      System.exit(1);
    } catch (Exception e) {
      System.out.println("refused: " + e.toString().replace('\n', ' '));
    }
  }
}
