package dcsync.testenv.hbase;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.master.HMaster;
import org.apache.hadoop.hbase.master.HMasterCommandLine;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.util.ToolRunner;

/**
 * The secure standalone HBase: a Kerberos KDC (Hadoop's MiniKdc, Apache Kerby) and HBase
 * (HMaster + one RegionServer + ZooKeeper) in this JVM, HBase's RPC authenticated with
 * Kerberos (SASL GSSAPI). Same code path as {@link LocalHBase}, with security on.
 *
 * <p>Written in the run directory at start-up, before HBase starts (the files a client
 * needs): {@code krb5.conf} (realm EXAMPLE.COM, the KDC on localhost:KDC_PORT over TCP),
 * {@code keytabs/hbase.keytab} (the servers' {@code hbase/localhost}),
 * {@code keytabs/client.keytab} (the client {@code dcsync}), {@code keytabs/other.keytab}
 * (a second client, {@code other}), and {@code secure.env}, the lines a test exports.
 *
 * <p>Environment (besides LocalHBase's ports): DCSYNC_HBASE_RUN_DIR (required, or the first
 * argument), DCSYNC_HBASE_KDC_PORT (19088), DCSYNC_HBASE_RPC_PROTECTION (authentication;
 * integrity and privacy make HBase wrap every RPC in SASL), DCSYNC_HBASE_TLS_DIR (unset: no
 * TLS; else a directory holding {@code server.p12}, the server's key and certificate, and
 * {@code ca.p12}, the trust store, both with password "changeit": HBase's native TLS on
 * the RPC port).
 *
 * <p>ZooKeeper is left open (no SASL) by default: HBase's znodes get open ACLs because no
 * JAAS "Client" section is configured, and a client reads the meta location without
 * authenticating, as in many Kerberized clusters whose ZooKeeper is reachable only from
 * inside. With DCSYNC_HBASE_ZK_SASL=1 ZooKeeper requires SASL (Kerberos) of every client
 * session ({@link #zkSasl}): its principal is {@code zookeeper/localhost}
 * ({@code keytabs/zookeeper.keytab}), and {@code jaas-client.conf} is the JAAS file a Java
 * client uses (section "Client", the {@code dcsync} principal).
 */
public final class LocalHBaseSecure {
  private LocalHBaseSecure() {}

  /** The realm of the test KDC. */
  public static final String REALM = "EXAMPLE.COM";
  /** The servers' principal (no _HOST: one principal for the master and the region server). */
  public static final String SERVER_PRINCIPAL = "hbase/localhost@" + REALM;

  public static void main(String[] args) throws Exception {
    String dir = System.getenv("DCSYNC_HBASE_RUN_DIR");
    if (args.length > 0) {
      dir = args[0];
    }
    if (dir == null || dir.isEmpty()) {
      System.err.println("usage: LocalHBaseSecure RUN_DIR (or DCSYNC_HBASE_RUN_DIR)");
      System.exit(2);
    }
    File runDir = new File(dir).getAbsoluteFile();
    runDir.mkdirs();
    File kdcDir = new File(runDir, "kdc");
    kdcDir.mkdirs();
    File keytabs = new File(runDir, "keytabs");
    keytabs.mkdirs();

    Properties kconf = MiniKdc.createConf();
    kconf.setProperty(MiniKdc.KDC_PORT, Integer.toString(LocalHBase.envInt("DCSYNC_HBASE_KDC_PORT", 19088)));
    kconf.setProperty(MiniKdc.KDC_BIND_ADDRESS, "localhost");
    kconf.setProperty(MiniKdc.ORG_NAME, "EXAMPLE");
    kconf.setProperty(MiniKdc.ORG_DOMAIN, "COM");
    MiniKdc kdc = new MiniKdc(kconf, kdcDir);
    kdc.start();
    Runtime.getRuntime().addShutdownHook(new Thread(kdc::stop));

    File serverKeytab = new File(keytabs, "hbase.keytab");
    File clientKeytab = new File(keytabs, "client.keytab");
    File otherKeytab = new File(keytabs, "other.keytab");
    File zkKeytab = new File(keytabs, "zookeeper.keytab");
    boolean zkSasl = "1".equals(envOr("DCSYNC_HBASE_ZK_SASL", "0"));
    for (File f : new File[] {serverKeytab, clientKeytab, otherKeytab, zkKeytab}) {
      Files.deleteIfExists(f.toPath());
    }
    kdc.createPrincipal(serverKeytab, "hbase/localhost");
    kdc.createPrincipal(clientKeytab, "dcsync");
    kdc.createPrincipal(otherKeytab, "other");
    File[] secrets = {serverKeytab, clientKeytab, otherKeytab};
    if (zkSasl) {
      kdc.createPrincipal(zkKeytab, ZK_PRINCIPAL_NAME);
      secrets = new File[] {serverKeytab, clientKeytab, otherKeytab, zkKeytab};
    }
    // Keytabs are secrets: dcsync refuses one that others may read (chmod 600).
    for (File f : secrets) {
      Files.setPosixFilePermissions(f.toPath(), PosixFilePermissions.fromString("rw-------"));
    }
    File krb5 = new File(runDir, "krb5.conf");
    Files.copy(kdc.getKrb5conf().toPath(), krb5.toPath(), StandardCopyOption.REPLACE_EXISTING);
    System.setProperty("java.security.krb5.conf", krb5.getAbsolutePath());

    Configuration conf = LocalHBase.configure(runDir);
    secure(conf, serverKeytab);
    conf.set("hbase.rpc.protection", envOr("DCSYNC_HBASE_RPC_PROTECTION", "authentication"));
    String tlsDir = System.getenv("DCSYNC_HBASE_TLS_DIR");
    if (tlsDir != null && !tlsDir.isEmpty()) {
      tls(conf, new File(tlsDir));
    }
    if (zkSasl) {
      zkSasl(runDir, serverKeytab, zkKeytab, clientKeytab);
    }
    UserGroupInformation.setConfiguration(conf);
    UserGroupInformation.loginUserFromKeytab(SERVER_PRINCIPAL, serverKeytab.getAbsolutePath());

    File env = new File(runDir, "secure.env");
    Files.writeString(env.toPath(),
        "KRB5_CONFIG=" + krb5.getAbsolutePath() + "\n"
            + "DCSYNC_HBASE_SECURE_KEYTAB=" + clientKeytab.getAbsolutePath() + "\n"
            + "DCSYNC_HBASE_SECURE_PRINCIPAL=dcsync@" + REALM + "\n"
            + "DCSYNC_HBASE_SECURE_OTHER_KEYTAB=" + otherKeytab.getAbsolutePath() + "\n"
            + "DCSYNC_HBASE_SECURE_SERVER_PRINCIPAL=" + SERVER_PRINCIPAL + "\n"
            + (zkSasl ? "DCSYNC_HBASE_SECURE_ZK_PRINCIPAL=" + ZK_PRINCIPAL_NAME + "@" + REALM + "\n"
                + "DCSYNC_HBASE_SECURE_ZK_SASL=1\n" : "")
            + (tlsDir == null || tlsDir.isEmpty() ? ""
                : "DCSYNC_HBASE_SECURE_TLS_CA=" + new File(tlsDir, "ca.pem").getAbsolutePath() + "\n"));
    System.err.println("LocalHBaseSecure: KDC " + kdc.getHost() + ":" + kdc.getPort() + " realm " + kdc.getRealm());

    int rc = ToolRunner.run(conf, new HMasterCommandLine(HMaster.class), new String[] {"start"});
    kdc.stop();
    System.exit(rc);
  }

  /** ZooKeeper's principal in DCSYNC_HBASE_ZK_SASL mode, without the realm. */
  static final String ZK_PRINCIPAL_NAME = "zookeeper/localhost";

  /**
   * ZooKeeper requiring SASL of every client session (ZooKeeper 3.8: the SASL
   * authentication provider, zookeeper.sessionRequireClientSASLAuth=true, which closes a
   * session that sends a request before authenticating), Kerberos via JAAS: section
   * "Server" for the in-process ZooKeeper server (zookeeper/localhost), section "Client"
   * for HBase's own ZooKeeper sessions (hbase/localhost; HBase then puts SASL ACLs on its
   * znodes, world-readable for the master and meta locations). Also writes
   * jaas-client.conf, a client's JAAS file (the dcsync principal), for the health check.
   */
  static void zkSasl(File runDir, File serverKeytab, File zkKeytab, File clientKeytab) throws Exception {
    File jaas = new File(runDir, "jaas.conf");
    Files.writeString(jaas.toPath(),
        jaasSection("Server", zkKeytab, ZK_PRINCIPAL_NAME + "@" + REALM)
            + jaasSection("Client", serverKeytab, SERVER_PRINCIPAL));
    Files.writeString(new File(runDir, "jaas-client.conf").toPath(),
        jaasSection("Client", clientKeytab, "dcsync@" + REALM));
    System.setProperty("java.security.auth.login.config", jaas.getAbsolutePath());
    System.setProperty("zookeeper.authProvider.1", "org.apache.zookeeper.server.auth.SASLAuthenticationProvider");
    System.setProperty("zookeeper.sessionRequireClientSASLAuth", "true");
    System.setProperty("zookeeper.allowSaslFailedClients", "false");
  }

  static String jaasSection(String name, File keytab, String principal) {
    return name + " {\n  com.sun.security.auth.module.Krb5LoginModule required\n"
        + "  useKeyTab=true storeKey=true useTicketCache=false\n"
        + "  keyTab=\"" + keytab.getAbsolutePath() + "\"\n"
        + "  principal=\"" + principal + "\";\n};\n";
  }

  static String envOr(String name, String def) {
    String v = System.getenv(name);
    return (v == null || v.isEmpty()) ? def : v.trim();
  }

  /** Kerberos for HBase's RPC, the servers logging in from keytab. */
  static void secure(Configuration conf, File serverKeytab) {
    conf.set("hbase.security.authentication", "kerberos");
    conf.set("hadoop.security.authentication", "kerberos");
    conf.set("hbase.security.authorization", "false");
    conf.set("hbase.master.kerberos.principal", SERVER_PRINCIPAL);
    conf.set("hbase.regionserver.kerberos.principal", SERVER_PRINCIPAL);
    conf.set("hbase.master.keytab.file", serverKeytab.getAbsolutePath());
    conf.set("hbase.regionserver.keytab.file", serverKeytab.getAbsolutePath());
    conf.setBoolean("hbase.ipc.server.fallback-to-simple-auth-allowed", false);
  }

  /** HBase 2.6's native TLS on the RPC port (server and, for master to region server, client). */
  static void tls(Configuration conf, File dir) {
    conf.setBoolean("hbase.server.netty.tls.enabled", true);
    conf.setBoolean("hbase.client.netty.tls.enabled", true);
    conf.set("hbase.rpc.tls.keystore.location", new File(dir, "server.p12").getAbsolutePath());
    conf.set("hbase.rpc.tls.keystore.password", "changeit");
    conf.set("hbase.rpc.tls.keystore.type", "PKCS12");
    conf.set("hbase.rpc.tls.truststore.location", new File(dir, "ca.p12").getAbsolutePath());
    conf.set("hbase.rpc.tls.truststore.password", "changeit");
    conf.set("hbase.rpc.tls.truststore.type", "PKCS12");
    // Clients need no certificate of their own (Kerberos authenticates them).
    conf.set("hbase.server.netty.tls.client.auth.mode", "NONE");
    conf.setBoolean("hbase.server.netty.tls.supportplaintext", false);
    conf.setBoolean("hbase.rpc.tls.host-verification", false);
  }
}
