package io.cluecdc.connect;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileTime;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.apache.kafka.common.config.ConfigData;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.ConfigTransformer;
import org.apache.kafka.common.config.ConfigTransformerResult;
import org.apache.kafka.common.config.provider.ConfigProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ClueCdcConfigProviderTest {

    private static final String TOKEN = "ccdc_tok_S3CR3T_0123456789";
    private static final String PASSWORD = "hunter2-\"quoted\"-\u00e9";

    private final List<AutoCloseable> toClose = new ArrayList<>();

    @TempDir
    Path tmp;

    @AfterEach
    void closeAll() throws Exception {
        Collections.reverse(toClose);
        for (AutoCloseable c : toClose) {
            c.close();
        }
    }

    private <T extends AutoCloseable> T closeLater(T c) {
        toClose.add(c);
        return c;
    }

    private ClueCdcConfigProvider provider(Map<String, String> params) {
        ClueCdcConfigProvider p = closeLater(new ClueCdcConfigProvider());
        p.configure(params);
        return p;
    }

    private ClueCdcConfigProvider provider(StubClueCdc stub) {
        return provider(Map.of("url", stub.url(), "token", TOKEN));
    }

    private static StubClueCdc.Response error(int status, String code, String message) {
        return new StubClueCdc.Response(status,
            "{\"error\":{\"code\":" + Json.quote(code) + ",\"message\":" + Json.quote(message) + "}}");
    }

    private static void assertNoSecrets(Throwable e) {
        String m = String.valueOf(e.getMessage());
        assertFalse(m.contains(TOKEN), () -> "token leaked: " + m);
        assertFalse(m.contains("hunter2"), () -> "value leaked: " + m);
    }

    /** A loopback port that nothing listens on (bound once, then released). */
    private static int closedPort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    // ------------------------------------------------------------------ resolving

    @Test
    void resolvesRequestedFieldsWithTheBearerToken() throws Exception {
        Map<String, String> values = new LinkedHashMap<>();
        values.put("password", PASSWORD);
        values.put("username", "cdc_user");
        values.put("not_requested", "should not be returned");
        StubClueCdc stub = closeLater(StubClueCdc.returning(values));

        ConfigData data = provider(stub).get("sec_01HXYZ", Set.of("username", "password"));

        assertEquals(Map.of("password", PASSWORD, "username", "cdc_user"), data.data());
        assertNull(data.ttl());
        assertEquals(1, stub.requests.size());
        StubClueCdc.Request r = stub.lastRequest();
        assertEquals("POST", r.method);
        assertEquals("/internal/v1/config-provider/resolve", r.path);
        assertEquals("Bearer " + TOKEN, r.header("Authorization"));
        assertEquals("application/json", r.header("Content-Type"));
        assertEquals("application/json", r.header("Accept"));
        // Fields are sorted, so the body is deterministic.
        assertEquals("{\"secret_ref\":\"sec_01HXYZ\",\"fields\":[\"password\",\"username\"]}", r.body);
        assertEquals(Map.of("secret_ref", "sec_01HXYZ", "fields", List.of("password", "username")),
            Json.parse(r.body));
    }

    @Test
    void sendsSecretRefsAndFieldNamesAsEscapedJson() throws Exception {
        String ref = "ref \"with\" \\ quotes\tand \u00fcnicode \uD83D\uDE00";
        String field = "pass\"word\u0001";
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of(field, "v")));

        ConfigData data = provider(stub).get(ref, Set.of(field));

        assertEquals(Map.of(field, "v"), data.data());
        assertEquals(Map.of("secret_ref", ref, "fields", List.of(field)), Json.parse(stub.lastRequest().body));
    }

    @Test
    void aBaseUrlWithATrailingSlashOrAPathPrefixIsJoinedCleanly() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("password", PASSWORD)));
        provider(Map.of("url", stub.url() + "/", "token", TOKEN)).get("r", Set.of("password"));
        assertEquals("/internal/v1/config-provider/resolve", stub.lastRequest().path);
        provider(Map.of("url", stub.url() + "/cluecdc/", "token", TOKEN)).get("r", Set.of("password"));
        assertEquals("/cluecdc/internal/v1/config-provider/resolve", stub.lastRequest().path);
    }

    @Test
    void resolvesPlaceholdersThroughKafkasConfigTransformer() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("password", PASSWORD, "user", "cdc")));
        ClueCdcConfigProvider p = provider(Map.of("url", stub.url(), "token", TOKEN, "ttl.ms", "600000"));
        Map<String, ConfigProvider> providers = Map.of("cluecdc", p);

        Map<String, String> connectorConfig = new HashMap<>();
        connectorConfig.put("database.user", "${cluecdc:sec_42:user}");
        connectorConfig.put("database.password", "${cluecdc:sec_42:password}");
        connectorConfig.put("database.hostname", "db.internal");
        ConfigTransformerResult result = new ConfigTransformer(providers).transform(connectorConfig);

        assertEquals("cdc", result.data().get("database.user"));
        assertEquals(PASSWORD, result.data().get("database.password"));
        assertEquals("db.internal", result.data().get("database.hostname"));
        assertEquals(Map.of("sec_42", 600_000L), result.ttls());
        // Both fields of one reference arrive in a single call.
        assertEquals(1, stub.requests.size());
        assertEquals(List.of("password", "user"),
            ((Map<?, ?>) Json.parse(stub.lastRequest().body)).get("fields"));
    }

    @Test
    void ttlMsSetsTheTtlOfTheReturnedConfigData() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("password", PASSWORD)));
        ConfigData data = provider(Map.of("url", stub.url(), "token", TOKEN, "ttl.ms", "300000"))
            .get("r", Set.of("password"));
        assertEquals(300_000L, data.ttl());
        assertNull(provider(stub).get("r", Set.of("password")).ttl());
    }

    @Test
    void getWithoutKeysReturnsEmptyDataWithoutCallingClueCdc() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("password", PASSWORD)));
        ClueCdcConfigProvider p = provider(stub);
        assertTrue(p.get("sec_1").data().isEmpty());
        assertTrue(p.get("sec_1", Set.of()).data().isEmpty());
        assertTrue(stub.requests.isEmpty());
    }

    @Test
    void anEmptySecretReferenceIsRejected() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("password", PASSWORD)));
        ClueCdcConfigProvider p = provider(stub);
        // ${cluecdc:password} has no path: Connect calls get("", {"password"}).
        ConfigException e = assertThrows(ConfigException.class, () -> p.get("", Set.of("password")));
        assertTrue(e.getMessage().contains("secret reference is required"), e.getMessage());
        assertThrows(ConfigException.class, () -> p.get("  ", Set.of("password")));
        assertThrows(ConfigException.class, () -> p.get(null, Set.of("password")));
        assertTrue(stub.requests.isEmpty());
    }

    @Test
    void getBeforeConfigureOrAfterCloseIsAConfigException() throws Exception {
        ClueCdcConfigProvider p = new ClueCdcConfigProvider();
        assertThrows(ConfigException.class, () -> p.get("r", Set.of("password")));
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("password", PASSWORD)));
        p.configure(Map.of("url", stub.url(), "token", TOKEN));
        p.close();
        assertThrows(ConfigException.class, () -> p.get("r", Set.of("password")));
    }

    @Test
    void resolvesConcurrentlyFromManyThreads() throws Exception {
        StubClueCdc stub = closeLater(new StubClueCdc(r -> {
            String ref = (String) ((Map<?, ?>) Json.parse(r.body)).get("secret_ref");
            return new StubClueCdc.Response(200, "{\"values\":{\"password\":" + Json.quote("pw-" + ref) + "}}");
        }));
        ClueCdcConfigProvider p = provider(stub);
        ExecutorService pool = Executors.newFixedThreadPool(8);
        try {
            List<Callable<Boolean>> calls = new ArrayList<>();
            for (int i = 0; i < 200; i++) {
                String ref = "sec_" + i;
                calls.add(() -> ("pw-" + ref).equals(p.get(ref, Set.of("password")).data().get("password")));
            }
            for (Future<Boolean> f : pool.invokeAll(calls)) {
                assertTrue(f.get());
            }
        } finally {
            pool.shutdownNow();
        }
        assertEquals(200, stub.requests.size());
    }

    // ------------------------------------------------------------------ failures

    @Test
    void unauthorizedBecomesAConfigExceptionWithClueCdcsMessageAndNotTheToken() throws Exception {
        StubClueCdc stub = closeLater(new StubClueCdc(r ->
            error(401, "unauthorized", "invalid Connect cluster token " + TOKEN)));

        ConfigException e = assertThrows(ConfigException.class,
            () -> provider(stub).get("sec_1", Set.of("password")));

        String m = e.getMessage();
        assertTrue(m.contains("HTTP 401"), m);
        assertTrue(m.contains("unauthorized"), m);
        assertTrue(m.contains("invalid Connect cluster token ***"), m);
        assertTrue(m.contains("'sec_1'"), m);
        assertTrue(m.contains("check the token"), m);
        assertNoSecrets(e);
    }

    @Test
    void notFoundBecomesAConfigExceptionWithClueCdcsMessage() throws Exception {
        StubClueCdc stub = closeLater(new StubClueCdc(r ->
            error(404, "secret_ref_not_found", "no secret reference sec_gone for this Connect cluster")));

        ConfigException e = assertThrows(ConfigException.class,
            () -> provider(stub).get("sec_gone", Set.of("password")));

        String m = e.getMessage();
        assertTrue(m.contains("HTTP 404"), m);
        assertTrue(m.contains("secret_ref_not_found"), m);
        assertTrue(m.contains("no secret reference sec_gone for this Connect cluster"), m);
        assertTrue(m.contains(stub.url()), m);
        assertNoSecrets(e);
    }

    @Test
    void anErrorBodyThatIsNotClueCdcJsonStillNamesTheStatus() throws Exception {
        StubClueCdc stub = closeLater(new StubClueCdc(r ->
            new StubClueCdc.Response(502, "<html>Bad Gateway hunter2</html>")));

        ConfigException e = assertThrows(ConfigException.class,
            () -> provider(stub).get("sec_1", Set.of("password")));

        assertTrue(e.getMessage().contains("HTTP 502"), e.getMessage());
        assertTrue(e.getMessage().contains("no error message"), e.getMessage());
        assertFalse(e.getMessage().contains("<html>"), e.getMessage());
        assertNoSecrets(e);
    }

    @Test
    void anUnreachableUrlBecomesAConfigExceptionNamingTheUrl() throws Exception {
        String url = "http://127.0.0.1:" + closedPort();
        ClueCdcConfigProvider p = provider(Map.of("url", url, "token", TOKEN, "timeout.ms", "2000"));

        ConfigException e = assertThrows(ConfigException.class, () -> p.get("sec_1", Set.of("password")));

        assertTrue(e.getMessage().startsWith("ClueCDC at " + url + " is unreachable: "), e.getMessage());
        assertTrue(e.getMessage().contains("connection failed"), e.getMessage());
        assertNoSecrets(e);
    }

    @Test
    void anUnresolvableHostIsReportedAsSuch() {
        String url = "http://no-such-host.invalid:8080";
        ClueCdcConfigProvider p = provider(Map.of("url", url, "token", TOKEN, "timeout.ms", "3000"));

        ConfigException e = assertThrows(ConfigException.class, () -> p.get("sec_1", Set.of("password")));

        assertTrue(e.getMessage().startsWith("ClueCDC at " + url + " is unreachable: "), e.getMessage());
        // A resolver that hangs instead of failing fast ends in the timeout; both say "unreachable".
        assertTrue(e.getMessage().contains("cannot resolve host 'no-such-host.invalid'")
            || e.getMessage().contains("no response within 3000 ms"), e.getMessage());
    }

    @Test
    void aClueCdcThatDoesNotAnswerWithinTimeoutMsIsReportedUnreachable() throws Exception {
        StubClueCdc stub = closeLater(new StubClueCdc(r -> {
            try {
                Thread.sleep(5_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return new StubClueCdc.Response(200, "{\"values\":{}}");
        }));
        ClueCdcConfigProvider p = provider(Map.of("url", stub.url(), "token", TOKEN, "timeout.ms", "300"));

        long start = System.nanoTime();
        ConfigException e = assertThrows(ConfigException.class, () -> p.get("sec_1", Set.of("password")));
        long elapsedMs = (System.nanoTime() - start) / 1_000_000;

        assertTrue(elapsedMs < 3_000, "took " + elapsedMs + " ms");
        assertTrue(e.getMessage().startsWith("ClueCDC at " + stub.url() + " is unreachable: "), e.getMessage());
        assertTrue(e.getMessage().contains("300 ms"), e.getMessage());
    }

    @Test
    void aMissingFieldIsNamedButNoValueIsShown() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("password", PASSWORD)));

        ConfigException e = assertThrows(ConfigException.class,
            () -> provider(stub).get("sec_1", Set.of("password", "ssl_key")));

        assertTrue(e.getMessage().contains("no value for field 'ssl_key'"), e.getMessage());
        assertTrue(e.getMessage().contains("'sec_1'"), e.getMessage());
        assertNoSecrets(e);
    }

    @Test
    void aNonStringValueIsRejectedByFieldName() throws Exception {
        StubClueCdc stub = closeLater(new StubClueCdc(r ->
            new StubClueCdc.Response(200, "{\"values\":{\"password\":\"hunter2\",\"port\":5432}}")));

        ConfigException e = assertThrows(ConfigException.class,
            () -> provider(stub).get("sec_1", Set.of("password", "port")));

        assertTrue(e.getMessage().contains("non-string value for field 'port'"), e.getMessage());
        assertNoSecrets(e);
    }

    @Test
    void anInvalidSuccessBodyIsRejectedWithoutQuotingIt() throws Exception {
        StubClueCdc stub = closeLater(new StubClueCdc(r ->
            new StubClueCdc.Response(200, "{\"values\":{\"password\":\"hunter2\"")));
        ConfigException e = assertThrows(ConfigException.class,
            () -> provider(stub).get("sec_1", Set.of("password")));
        assertTrue(e.getMessage().contains("invalid body"), e.getMessage());
        assertNoSecrets(e);

        stub.respondWith(r -> new StubClueCdc.Response(200, "{\"password\":\"hunter2\"}"));
        e = assertThrows(ConfigException.class, () -> provider(stub).get("sec_1", Set.of("password")));
        assertTrue(e.getMessage().contains("without a \"values\" object"), e.getMessage());
        assertNoSecrets(e);
    }

    // ------------------------------------------------------------------ config.file

    /** Writes url= and token=, padded to a fixed size so that a rewrite can keep the size. */
    private static void writeProviderFile(Path file, String url, String token, Instant mtime) throws IOException {
        StringBuilder b = new StringBuilder("# written by the test\nurl=" + url + "\ntoken=" + token + "\n#");
        while (b.length() < 200) {
            b.append('.');
        }
        b.append('\n');
        Files.write(file, b.toString().getBytes(StandardCharsets.UTF_8));
        Files.setLastModifiedTime(file, FileTime.from(mtime));
    }

    @Test
    void configFileModeReReadsUrlAndTokenAfterTheFileChanges() throws Exception {
        StubClueCdc first = closeLater(StubClueCdc.returning(Map.of("password", "first-pw")));
        StubClueCdc second = closeLater(StubClueCdc.returning(Map.of("password", "second-pw")));
        Path file = tmp.resolve("cluecdc-provider.properties");
        Instant anHourAgo = Instant.now().minus(1, ChronoUnit.HOURS);
        writeProviderFile(file, first.url(), "token-first", anHourAgo);

        ClueCdcConfigProvider p = provider(Map.of("config.file", file.toString()));
        assertEquals("first-pw", p.get("sec_1", Set.of("password")).data().get("password"));
        assertEquals("Bearer token-first", first.lastRequest().header("Authorization"));

        // Tests repoint Connect at another ClueCDC by rewriting the file.
        writeProviderFile(file, second.url(), "token-second", anHourAgo.plusSeconds(60));
        assertEquals("second-pw", p.get("sec_1", Set.of("password")).data().get("password"));
        assertEquals("Bearer token-second", second.lastRequest().header("Authorization"));
        assertEquals(1, first.requests.size());
    }

    @Test
    void configFileIsCachedUntilItsModificationTimeChanges() throws Exception {
        StubClueCdc first = closeLater(StubClueCdc.returning(Map.of("password", "first-pw")));
        StubClueCdc second = closeLater(StubClueCdc.returning(Map.of("password", "second-pw")));
        String secondUrl = second.url();
        // Ephemeral ports have five digits, so the rewritten file keeps its size.
        assertEquals(first.url().length(), secondUrl.length());
        Path file = tmp.resolve("provider.properties");
        Instant mtime = Instant.now().minus(1, ChronoUnit.HOURS);
        writeProviderFile(file, first.url(), "token-1", mtime);
        ClueCdcConfigProvider p = provider(Map.of("config.file", file.toString()));
        assertEquals("first-pw", p.get("r", Set.of("password")).data().get("password"));

        long size = Files.size(file);
        writeProviderFile(file, secondUrl, "token-2", mtime); // same size, same mtime: not noticed
        assertEquals(size, Files.size(file));
        assertEquals("first-pw", p.get("r", Set.of("password")).data().get("password"));
        assertTrue(second.requests.isEmpty());
        Files.setLastModifiedTime(file, FileTime.from(mtime.plusMillis(1)));
        assertEquals("second-pw", p.get("r", Set.of("password")).data().get("password"));
        assertEquals("Bearer token-2", second.lastRequest().header("Authorization"));
    }

    @Test
    void aConfigFileThatDoesNotExistYetIsReportedAtResolveTimeAndUsedOnceWritten() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("password", PASSWORD)));
        Path file = tmp.resolve("later.properties");
        ClueCdcConfigProvider p = provider(Map.of("config.file", file.toString()));

        ConfigException e = assertThrows(ConfigException.class, () -> p.get("r", Set.of("password")));
        assertTrue(e.getMessage().contains(file.toString()) && e.getMessage().contains("does not exist"),
            e.getMessage());

        writeProviderFile(file, stub.url(), TOKEN, Instant.now());
        assertEquals(PASSWORD, p.get("r", Set.of("password")).data().get("password"));
    }

    @Test
    void anInvalidConfigFileIsRejectedWithoutShowingTheToken() throws Exception {
        Path file = tmp.resolve("bad.properties");
        Files.writeString(file, "url=ftp://127.0.0.1:8080\ntoken=" + TOKEN + "\n");
        ConfigException e = assertThrows(ConfigException.class,
            () -> new ClueCdcConfigProvider().configure(Map.of("config.file", file.toString())));
        assertTrue(e.getMessage().contains("http:// or https://"), e.getMessage());
        assertNoSecrets(e);

        Files.writeString(file, "url=http://127.0.0.1:8080\n");
        e = assertThrows(ConfigException.class,
            () -> new ClueCdcConfigProvider().configure(Map.of("config.file", file.toString())));
        assertTrue(e.getMessage().contains("'token' is required"), e.getMessage());

        Files.writeString(file, "url=http://127.0.0.1:8080\ntoken=" + TOKEN + "\ntimeout.ms=1\n");
        e = assertThrows(ConfigException.class,
            () -> new ClueCdcConfigProvider().configure(Map.of("config.file", file.toString())));
        assertTrue(e.getMessage().contains("unknown key(s) [timeout.ms]"), e.getMessage());
        assertNoSecrets(e);
    }

    // ------------------------------------------------------------------ configure validation

    private static ConfigException configureFails(Map<String, String> params) {
        return assertThrows(ConfigException.class, () -> new ClueCdcConfigProvider().configure(params));
    }

    @Test
    void configureRejectsAUrlThatIsNotHttpOrHttps() {
        for (String url : List.of("ftp://127.0.0.1:8080", "127.0.0.1:8080", "localhost", "file:///etc/passwd",
                                  "http://", "http://127.0.0.1:8080/?x=1", "http://127.0.0.1:8080/#f", "http://[::1")) {
            ConfigException e = configureFails(Map.of("url", url, "token", TOKEN));
            assertTrue(e.getMessage().contains("'url'"), e.getMessage());
            assertNoSecrets(e);
        }
        // Upper-case schemes and https are fine.
        new ClueCdcConfigProvider().configure(Map.of("url", "HTTPS://cluecdc.example:8443", "token", TOKEN));
    }

    @Test
    void configureRejectsUserInfoInTheUrlWithoutEchoingIt() {
        for (String url : List.of("http://admin:pa55-SECRET@127.0.0.1:8080", "https://pa55-SECRET@cluecdc/",
                                  "http://a:pa55-SECRET@[bad")) {
            ConfigException e = configureFails(Map.of("url", url, "token", TOKEN));
            assertTrue(e.getMessage().contains("user info"), e.getMessage());
            assertFalse(e.getMessage().contains("pa55-SECRET"), e.getMessage());
        }
    }

    @Test
    void configureRequiresATokenWithTheUrl() {
        ConfigException e = configureFails(Map.of("url", "http://127.0.0.1:8080"));
        assertTrue(e.getMessage().contains("'token' is required"), e.getMessage());
        e = configureFails(Map.of("url", "http://127.0.0.1:8080", "token", "   "));
        assertTrue(e.getMessage().contains("'token' is required"), e.getMessage());
        e = configureFails(Map.of("token", TOKEN));
        assertTrue(e.getMessage().contains("'url' is required"), e.getMessage());
    }

    @Test
    void configureRequiresTokenOrConfigFileButNotBoth() {
        ConfigException e = configureFails(Map.of());
        assertTrue(e.getMessage().contains("'config.file'"), e.getMessage());
        e = configureFails(Map.of("url", "http://127.0.0.1:8080", "token", TOKEN, "config.file", "/x.properties"));
        assertTrue(e.getMessage().contains("not both"), e.getMessage());
        assertNoSecrets(e);
    }

    @Test
    void configureRejectsATokenThatCannotBeAHeaderWithoutShowingIt() {
        ConfigException e = configureFails(Map.of("url", "http://127.0.0.1:8080", "token", "abc\r\nX-Evil: 1"));
        assertTrue(e.getMessage().contains("printable ASCII"), e.getMessage());
        assertFalse(e.getMessage().contains("X-Evil"), e.getMessage());
    }

    @Test
    void configureRejectsBadTimeoutsTtlsAndUnknownParameters() {
        Map<String, String> base = Map.of("url", "http://127.0.0.1:8080", "token", TOKEN);
        for (Map.Entry<String, String> bad : List.of(Map.entry("timeout.ms", "soon"), Map.entry("timeout.ms", "0"),
                Map.entry("timeout.ms", "-5"), Map.entry("ttl.ms", "0"), Map.entry("ttl.ms", "1h"))) {
            Map<String, String> params = new HashMap<>(base);
            params.put(bad.getKey(), bad.getValue());
            ConfigException e = configureFails(params);
            assertTrue(e.getMessage().contains("'" + bad.getKey() + "'"), e.getMessage());
            assertNoSecrets(e);
        }
        Map<String, String> typo = new HashMap<>(base);
        typo.put("timeout", "5000");
        ConfigException e = configureFails(typo);
        assertTrue(e.getMessage().contains("unknown parameter(s) [timeout]"), e.getMessage());
        assertTrue(e.getMessage().contains(
            "known parameters are [config.file, files.dir, timeout.ms, token, ttl.ms, url]"), e.getMessage());
        assertNoSecrets(e);
    }

    @Test
    void configureRejectsAFilesDirThatIsRelativeOrNotADirectory() throws Exception {
        Map<String, String> base = Map.of("url", "http://127.0.0.1:8080", "token", TOKEN);
        Map<String, String> params = new HashMap<>(base);
        params.put("files.dir", "relative/dir");
        ConfigException e = configureFails(params);
        assertTrue(e.getMessage().contains("'files.dir' must be an absolute path, got 'relative/dir'"),
            e.getMessage());
        assertNoSecrets(e);

        Path file = Files.writeString(tmp.resolve("a-file"), "x");
        params.put("files.dir", file.toString());
        e = configureFails(params);
        assertTrue(e.getMessage().contains("'files.dir'") && e.getMessage().contains("not a directory"),
            e.getMessage());

        // A directory that does not exist yet is fine: it is created on first use.
        params.put("files.dir", tmp.resolve("later").toString());
        new ClueCdcConfigProvider().configure(params);
        assertFalse(Files.exists(tmp.resolve("later")));
        params.put("files.dir", "  ");
        new ClueCdcConfigProvider().configure(params); // blank = not set
    }

    @Test
    void endpointToStringNeverShowsTheToken() {
        String s = ClueCdcConfigProvider.Endpoint.of("http://127.0.0.1:8080", TOKEN, "parameter").toString();
        assertFalse(s.contains(TOKEN), s);
    }

    // ------------------------------------------------------------------ files (ca_cert_file, ca_truststore_file)

    /** A throwaway self-signed test certificate under src/test/resources (with a comment header). */
    private static String pem(String resource) throws IOException {
        try (InputStream in = ClueCdcConfigProviderTest.class.getResourceAsStream("/" + resource)) {
            assertNotNull(in, resource);
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    private static List<Certificate> certificates(String pem) throws Exception {
        return new ArrayList<>(CertificateFactory.getInstance("X.509")
            .generateCertificates(new java.io.ByteArrayInputStream(pem.getBytes(StandardCharsets.UTF_8))));
    }

    private ClueCdcConfigProvider provider(StubClueCdc stub, Path filesDir) {
        return provider(Map.of("url", stub.url(), "token", TOKEN, "files.dir", filesDir.toString()));
    }

    private static String mode(Path path) throws IOException {
        return PosixFilePermissions.toString(Files.getPosixFilePermissions(path));
    }

    private static Object inode(Path path) throws IOException {
        return Files.readAttributes(path, BasicFileAttributes.class).fileKey();
    }

    private static List<String> fileNames(Path dir) throws IOException {
        try (Stream<Path> s = Files.list(dir)) {
            return s.map(f -> f.getFileName().toString()).sorted().collect(Collectors.toList());
        }
    }

    /** Every regular file under dir (to show that nothing was written anywhere). */
    private static List<Path> allFiles(Path dir) throws IOException {
        try (Stream<Path> s = Files.walk(dir)) {
            return s.filter(Files::isRegularFile).collect(Collectors.toList());
        }
    }

    private static KeyStore loadTruststore(Path file, String password) throws Exception {
        KeyStore store = KeyStore.getInstance("PKCS12");
        try (InputStream in = Files.newInputStream(file)) {
            store.load(in, password.toCharArray());
        }
        return store;
    }

    @Test
    void caCertFileWritesThePemWithMode0600AndReturnsItsPathInTheSameRequestAsOtherFields() throws Exception {
        String ca = pem("test-ca-1.pem");
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("ca_certificate", ca, "password", PASSWORD)));
        Path dir = tmp.resolve("provider-files").resolve("nested"); // missing: created on first use

        ConfigData data = provider(stub, dir).get("sec_pg-1.a", Set.of("ca_cert_file", "password"));

        Path file = dir.resolve("sec_pg-1.a-ca.pem");
        // ca_certificate itself is not returned: it was not asked for.
        assertEquals(Map.of("ca_cert_file", file.toString(), "password", PASSWORD), data.data());
        assertTrue(Path.of(data.data().get("ca_cert_file")).isAbsolute());
        assertEquals(ca, Files.readString(file, StandardCharsets.UTF_8));
        assertEquals("rw-------", mode(file));
        assertEquals("rwx------", mode(dir));
        assertEquals(List.of("sec_pg-1.a-ca.pem"), fileNames(dir)); // no temporary file left behind
        // One request, asking for ca_certificate in place of ca_cert_file, fields sorted.
        assertEquals(1, stub.requests.size());
        assertEquals("{\"secret_ref\":\"sec_pg-1.a\",\"fields\":[\"ca_certificate\",\"password\"]}",
            stub.lastRequest().body);
    }

    @Test
    void caCertificateIsReturnedAlongsideCaCertFileWhenItIsAskedForToo() throws Exception {
        String ca = pem("test-ca-1.pem");
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("ca_certificate", ca)));

        ConfigData data = provider(stub, tmp).get("sec_1", Set.of("ca_certificate", "ca_cert_file"));

        assertEquals(Map.of("ca_certificate", ca, "ca_cert_file", tmp.resolve("sec_1-ca.pem").toString()),
            data.data());
        assertEquals("{\"secret_ref\":\"sec_1\",\"fields\":[\"ca_certificate\"]}", stub.lastRequest().body);
    }

    @Test
    void anUnchangedCertificateLeavesTheFileAloneAndAChangedOneReplacesIt() throws Exception {
        String ca1 = pem("test-ca-1.pem");
        String ca2 = pem("test-ca-2.pem");
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("ca_certificate", ca1)));
        ClueCdcConfigProvider p = provider(stub, tmp);
        Path file = Path.of(p.get("sec_1", Set.of("ca_cert_file")).data().get("ca_cert_file"));
        FileTime old = FileTime.from(Instant.now().minus(3, ChronoUnit.DAYS).truncatedTo(ChronoUnit.SECONDS));
        Files.setLastModifiedTime(file, old);
        Object inode = inode(file);

        assertEquals(file.toString(), p.get("sec_1", Set.of("ca_cert_file")).data().get("ca_cert_file"));
        assertEquals(old, Files.getLastModifiedTime(file));
        assertEquals(inode, inode(file));
        assertEquals(2, stub.requests.size());

        // ClueCDC now holds another certificate: the file is replaced (atomically: a new inode).
        stub.respondWith(r -> StubClueCdc.values(Map.of("ca_certificate", ca2)));
        assertEquals(file.toString(), p.get("sec_1", Set.of("ca_cert_file")).data().get("ca_cert_file"));
        assertEquals(ca2, Files.readString(file, StandardCharsets.UTF_8));
        assertEquals("rw-------", mode(file));
        assertFalse(old.equals(Files.getLastModifiedTime(file)));
        assertFalse(inode.equals(inode(file)));
        assertEquals(List.of("sec_1-ca.pem"), fileNames(tmp));
    }

    @Test
    void aFileWithTheRightContentButAnotherModeIsRewrittenWithMode0600() throws Exception {
        String ca = pem("test-ca-1.pem");
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("ca_certificate", ca)));
        Path file = Files.writeString(tmp.resolve("sec_1-ca.pem"), ca, StandardCharsets.UTF_8);
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-r--r--"));

        provider(stub, tmp).get("sec_1", Set.of("ca_cert_file"));

        assertEquals("rw-------", mode(file));
        assertEquals(ca, Files.readString(file, StandardCharsets.UTF_8));
    }

    @Test
    void caCertFileWithoutFilesDirSaysWhichParameterToSet() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("ca_certificate", pem("test-ca-1.pem"))));
        ClueCdcConfigProvider p = provider(stub);

        for (String field : List.of("ca_cert_file", "ca_truststore_file")) {
            ConfigException e = assertThrows(ConfigException.class,
                () -> p.get("sec_1", Set.of(field, "password")));
            String m = e.getMessage();
            assertTrue(m.contains("set config.providers.<alias>.param.files.dir to the absolute path of a directory "
                + "the worker can write"), m);
            assertTrue(m.contains("'" + field + "'") && m.contains("'sec_1'"), m);
        }
        assertTrue(stub.requests.isEmpty());
        // Fields that write no file still work without files.dir.
        assertEquals(Map.of("ca_truststore_password", "cluecdc-truststore"),
            p.get("sec_1", Set.of("ca_truststore_password")).data());
    }

    @Test
    void aValueThatIsNotPemIsRejectedWithoutShowingItAndNothingIsWritten() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("ca_certificate", "hunter2-not-a-certificate")));
        ClueCdcConfigProvider p = provider(stub, tmp);

        for (String field : List.of("ca_cert_file", "ca_truststore_file")) {
            ConfigException e = assertThrows(ConfigException.class, () -> p.get("sec_1", Set.of(field)));
            String m = e.getMessage();
            assertTrue(m.contains("field 'ca_certificate' of secret reference 'sec_1' that is not a PEM certificate"),
                m);
            assertTrue(m.contains("needed for '" + field + "'"), m);
            assertNoSecrets(e);
        }

        // PEM armour around something that is not a certificate: the truststore cannot be built.
        String fake = "-----BEGIN CERTIFICATE-----\naHVudGVyMi1ub3QtREVS\n-----END CERTIFICATE-----\n";
        stub.respondWith(r -> StubClueCdc.values(Map.of("ca_certificate", fake)));
        ConfigException e = assertThrows(ConfigException.class,
            () -> p.get("sec_1", Set.of("ca_truststore_file", "ca_cert_file")));
        assertTrue(e.getMessage().contains("cannot be read as X.509 certificates"), e.getMessage());
        assertFalse(e.getMessage().contains("aHVudGVy"), e.getMessage());
        assertTrue(allFiles(tmp).isEmpty(), allFiles(tmp).toString());
    }

    @Test
    void aMissingCaCertificateIsNamedWithTheFieldThatNeedsIt() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("password", PASSWORD)));
        ConfigException e = assertThrows(ConfigException.class,
            () -> provider(stub, tmp).get("sec_1", Set.of("ca_cert_file", "password")));
        assertTrue(e.getMessage().contains("no value for field 'ca_certificate' (needed for 'ca_cert_file') "
            + "of secret reference 'sec_1'"), e.getMessage());
        assertNoSecrets(e);
        assertTrue(allFiles(tmp).isEmpty());
    }

    @Test
    void aSecretReferenceThatIsNotASafeFileNameIsRefusedBeforeAnythingHappens() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("ca_certificate", pem("test-ca-1.pem"))));
        Path dir = tmp.resolve("files");
        ClueCdcConfigProvider p = provider(stub, dir);

        for (String ref : List.of("../x", "..", "x..y", "a/b", "/etc/passwd", "a\\b", "sec 1", "sec\n1", "s\u00e9c")) {
            for (String field : List.of("ca_cert_file", "ca_truststore_file")) {
                ConfigException e = assertThrows(ConfigException.class, () -> p.get(ref, Set.of(field)), ref);
                assertTrue(e.getMessage().contains("cannot be used in a file name"), e.getMessage());
                assertTrue(e.getMessage().contains("'" + field + "'"), e.getMessage());
            }
        }
        assertTrue(stub.requests.isEmpty());
        assertTrue(allFiles(tmp).isEmpty(), allFiles(tmp).toString());
        // Refs are only checked for the file fields.
        stub.respondWith(r -> StubClueCdc.values(Map.of("password", PASSWORD)));
        assertEquals(PASSWORD, p.get("../x", Set.of("password")).data().get("password"));
    }

    @Test
    void aDirectoryThatCannotBeCreatedIsReportedWithTheDirectoryAndTheReference() throws Exception {
        String ca = pem("test-ca-1.pem");
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("ca_certificate", ca)));
        Files.writeString(tmp.resolve("a-file"), "x");
        Path dir = tmp.resolve("a-file").resolve("sub"); // its parent is a regular file

        ConfigException e = assertThrows(ConfigException.class,
            () -> provider(stub, dir).get("sec_1", Set.of("ca_cert_file")));

        String m = e.getMessage();
        assertTrue(m.contains("cannot write 'sec_1-ca.pem' for field 'ca_cert_file' of secret reference 'sec_1' in "
            + "directory '" + dir + "' (parameter 'files.dir')"), m);
        assertFalse(m.contains("MII"), m); // nothing of the certificate
    }

    @Test
    void caTruststoreFileIsAPkcs12TruststoreWithEveryCertificateOfThePem() throws Exception {
        String bundle = pem("test-ca-1.pem") + pem("test-ca-2.pem");
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("ca_certificate", bundle, "user", "cdc")));
        ClueCdcConfigProvider p = provider(stub, tmp);

        ConfigData data = p.get("sec_my", Set.of("ca_truststore_file", "ca_truststore_password", "user"));

        Path file = tmp.resolve("sec_my-truststore.p12");
        assertEquals(Map.of("ca_truststore_file", file.toString(), "ca_truststore_password", "cluecdc-truststore",
            "user", "cdc"), data.data());
        assertEquals("{\"secret_ref\":\"sec_my\",\"fields\":[\"ca_certificate\",\"user\"]}", stub.lastRequest().body);
        assertEquals("rw-------", mode(file));
        assertEquals(List.of("sec_my-truststore.p12"), fileNames(tmp));

        KeyStore store = loadTruststore(file, data.data().get("ca_truststore_password"));
        List<Certificate> expected = certificates(bundle);
        assertEquals(2, expected.size());
        assertEquals(List.of("ca-0", "ca-1"), Collections.list(store.aliases()).stream().sorted()
            .collect(Collectors.toList()));
        for (int i = 0; i < expected.size(); i++) {
            assertTrue(store.isCertificateEntry("ca-" + i));
            assertEquals(expected.get(i), store.getCertificate("ca-" + i));
        }
        assertEquals("CN=ClueCDC throwaway test CA 1",
            ((X509Certificate) store.getCertificate("ca-0")).getSubjectX500Principal().getName());

        // Same certificates: untouched. Other certificates: replaced.
        FileTime old = FileTime.from(Instant.now().minus(3, ChronoUnit.DAYS).truncatedTo(ChronoUnit.SECONDS));
        Files.setLastModifiedTime(file, old);
        Object inode = inode(file);
        p.get("sec_my", Set.of("ca_truststore_file"));
        assertEquals(old, Files.getLastModifiedTime(file));
        assertEquals(inode, inode(file));

        String ca2 = pem("test-ca-2.pem");
        stub.respondWith(r -> StubClueCdc.values(Map.of("ca_certificate", ca2)));
        p.get("sec_my", Set.of("ca_truststore_file"));
        assertFalse(inode.equals(inode(file)));
        store = loadTruststore(file, "cluecdc-truststore");
        assertEquals(1, store.size());
        assertEquals(certificates(ca2).get(0), store.getCertificate("ca-0"));
        assertEquals("rw-------", mode(file));
    }

    @Test
    void caTruststorePasswordAloneNeedsNoRequest() throws Exception {
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of()));
        ConfigData data = provider(stub, tmp).get("sec_1", Set.of("ca_truststore_password"));
        assertEquals(Map.of("ca_truststore_password", "cluecdc-truststore"), data.data());
        assertTrue(stub.requests.isEmpty());
    }

    @Test
    void bothFilesAndASecretResolveThroughKafkasConfigTransformerInOneRequest() throws Exception {
        String ca = pem("test-ca-1.pem");
        StubClueCdc stub = closeLater(StubClueCdc.returning(Map.of("ca_certificate", ca, "password", PASSWORD)));
        Map<String, ConfigProvider> providers = Map.of("cluecdc", provider(stub, tmp));

        Map<String, String> connectorConfig = new HashMap<>();
        connectorConfig.put("database.password", "${cluecdc:sec_42:password}");
        connectorConfig.put("database.sslrootcert", "${cluecdc:sec_42:ca_cert_file}");
        connectorConfig.put("database.ssl.truststore", "${cluecdc:sec_42:ca_truststore_file}");
        connectorConfig.put("database.ssl.truststore.password", "${cluecdc:sec_42:ca_truststore_password}");
        Map<String, String> resolved = new ConfigTransformer(providers).transform(connectorConfig).data();

        assertEquals(PASSWORD, resolved.get("database.password"));
        assertEquals(tmp.resolve("sec_42-ca.pem").toString(), resolved.get("database.sslrootcert"));
        assertEquals(tmp.resolve("sec_42-truststore.p12").toString(), resolved.get("database.ssl.truststore"));
        assertEquals("cluecdc-truststore", resolved.get("database.ssl.truststore.password"));
        assertEquals(1, stub.requests.size());
        assertEquals(List.of("ca_certificate", "password"),
            ((Map<?, ?>) Json.parse(stub.lastRequest().body)).get("fields"));
        assertEquals(ca, Files.readString(tmp.resolve("sec_42-ca.pem"), StandardCharsets.UTF_8));
    }

    @Test
    void concurrentGetsOfTheSameFilesAllSucceedAndLeaveCompleteFiles() throws Exception {
        String ca1 = pem("test-ca-1.pem");
        String ca2 = pem("test-ca-2.pem");
        // Alternate between two certificates so that writers really race.
        java.util.concurrent.atomic.AtomicInteger n = new java.util.concurrent.atomic.AtomicInteger();
        StubClueCdc stub = closeLater(new StubClueCdc(r ->
            StubClueCdc.values(Map.of("ca_certificate", n.getAndIncrement() % 2 == 0 ? ca1 : ca2))));
        ClueCdcConfigProvider p = provider(stub, tmp);
        ExecutorService pool = Executors.newFixedThreadPool(8);
        try {
            List<Callable<Map<String, String>>> calls = new ArrayList<>();
            for (int i = 0; i < 40; i++) {
                calls.add(() -> p.get("sec_1", Set.of("ca_cert_file", "ca_truststore_file")).data());
            }
            for (Future<Map<String, String>> f : pool.invokeAll(calls)) {
                assertEquals(2, f.get().size());
            }
        } finally {
            pool.shutdownNow();
        }
        assertTrue(List.of(ca1, ca2).contains(Files.readString(tmp.resolve("sec_1-ca.pem"), StandardCharsets.UTF_8)));
        assertEquals(1, loadTruststore(tmp.resolve("sec_1-truststore.p12"), "cluecdc-truststore").size());
        assertEquals(List.of("sec_1-ca.pem", "sec_1-truststore.p12"), fileNames(tmp));
    }

    // ------------------------------------------------------------------ discovery

    @Test
    void theServiceLoaderFindsTheProviderViaMetaInfServices() throws Exception {
        List<String> types = ServiceLoader.load(ConfigProvider.class).stream()
            .map(p -> p.type().getName())
            .collect(Collectors.toList());
        assertTrue(types.contains(ClueCdcConfigProvider.class.getName()), types.toString());

        ConfigProvider instance = ServiceLoader.load(ConfigProvider.class).stream()
            .filter(p -> p.type() == ClueCdcConfigProvider.class)
            .findFirst().orElseThrow().get();
        assertNotNull(instance);
        instance.close();

        // And the manifest is ours (not only kafka-clients' list of built-ins).
        String name = "META-INF/services/" + ConfigProvider.class.getName();
        boolean found = false;
        for (URL url : Collections.list(getClass().getClassLoader().getResources(name))) {
            try (InputStream in = url.openStream()) {
                String text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
                if (text.lines().map(String::trim).anyMatch(ClueCdcConfigProvider.class.getName()::equals)) {
                    found = true;
                }
            }
        }
        assertTrue(found, "no " + name + " naming " + ClueCdcConfigProvider.class.getName());
    }
}
