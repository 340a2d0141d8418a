package io.cluecdc.connect;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.Reader;
import java.net.ConnectException;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.UnknownHostException;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.UnresolvedAddressException;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileTime;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Pattern;

import org.apache.kafka.common.config.ConfigData;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.provider.ConfigProvider;
import org.apache.kafka.common.config.types.Password;

/**
 * Kafka Connect {@link ConfigProvider} that resolves {@code ${cluecdc:<secret_ref>:<field>}} by
 * asking ClueCDC, so that the connector configs Connect stores hold references, never secrets.
 *
 * <pre>
 * config.providers=cluecdc
 * config.providers.cluecdc.class=io.cluecdc.connect.ClueCdcConfigProvider
 * config.providers.cluecdc.param.url=http://127.0.0.1:8080
 * config.providers.cluecdc.param.token=&lt;per-Connect-cluster token&gt;
 * #   or, instead of url + token, a properties file holding url= and token= (re-read when it changes):
 * # config.providers.cluecdc.param.config.file=/path/cluecdc-provider.properties
 * config.providers.cluecdc.param.timeout.ms=5000   # optional
 * config.providers.cluecdc.param.ttl.ms=600000     # optional: TTL of the returned ConfigData
 * config.providers.cluecdc.param.files.dir=/var/lib/cluecdc-provider   # optional: for the *_file fields
 * </pre>
 *
 * <p>{@code get(ref, fields)} sends {@code POST <url>/internal/v1/config-provider/resolve} with
 * {@code Authorization: Bearer <token>} and {@code {"secret_ref":ref,"fields":[...]}}; a 200 answer
 * is {@code {"values":{field:value,...}}}. Every failure is a {@link ConfigException} whose message
 * names the secret reference, fields, URL and HTTP status as relevant, and never a value or the
 * token. Nothing is logged.
 *
 * <p><b>Virtual fields: the CA certificate as a file.</b> The PostgreSQL JDBC driver and Debezium
 * want a CA certificate as a file path ({@code database.sslrootcert=...}), the MySQL/MariaDB
 * connectors a Java truststore. ClueCDC stores the CA certificate (PEM) as the field
 * {@value #CA_CERTIFICATE_FIELD} of a connection. These fields are answered by the provider itself
 * and are never sent to ClueCDC under their own names:
 * <ul>
 * <li>{@value #CA_CERT_FILE_FIELD}: the provider asks ClueCDC for {@value #CA_CERTIFICATE_FIELD}
 *     instead (in the same single request as the other fields), checks that it is PEM (it must
 *     contain {@code -----BEGIN CERTIFICATE-----}), writes it unchanged to
 *     {@code <files.dir>/<secret_ref>-ca.pem} and returns that absolute path.</li>
 * <li>{@value #CA_TRUSTSTORE_FILE_FIELD}: the same source field, parsed as X.509 certificates and
 *     written as a PKCS12 truststore {@code <files.dir>/<secret_ref>-truststore.p12} with one trusted
 *     certificate entry per certificate (aliases {@code ca-0}, {@code ca-1}, ...); returns that
 *     absolute path.</li>
 * <li>{@value #CA_TRUSTSTORE_PASSWORD_FIELD}: the truststore password, always the constant
 *     {@value #TRUSTSTORE_PASSWORD}. It protects nothing secret: a truststore holds only public
 *     certificates, and Java requires some password for the PKCS12 integrity check. Answered without
 *     asking ClueCDC.</li>
 * </ul>
 * {@value #CA_CERTIFICATE_FIELD} is in the returned data only if it was itself asked for. Files are
 * written with mode 0600 (POSIX) to a temporary file in {@code files.dir} that is then atomically
 * renamed over the target, and only when the content differs (a PEM file byte for byte, a truststore
 * by its certificates), so an unchanged certificate leaves the file and its mtime untouched.
 * {@code files.dir} must be absolute; it is created with mode 0700 on first use if missing. For a file
 * name the secret reference must match {@code [A-Za-z0-9_.-]+} without {@code ..}.
 *
 * <p>Thread-safe: the configuration is an immutable snapshot published through a volatile field,
 * the JDK {@link HttpClient} is thread-safe, the config-file cache is guarded by a lock, and files
 * are replaced by atomic renames, so concurrent writers of the same file never leave it partial.
 */
public final class ClueCdcConfigProvider implements ConfigProvider {

    public static final String URL_CONFIG = "url";
    public static final String TOKEN_CONFIG = "token";
    public static final String CONFIG_FILE_CONFIG = "config.file";
    public static final String TIMEOUT_MS_CONFIG = "timeout.ms";
    public static final String TTL_MS_CONFIG = "ttl.ms";
    public static final String FILES_DIR_CONFIG = "files.dir";

    /** Virtual field: path of {@code <files.dir>/<secret_ref>-ca.pem}, the CA certificate as PEM. */
    public static final String CA_CERT_FILE_FIELD = "ca_cert_file";
    /** Virtual field: path of {@code <files.dir>/<secret_ref>-truststore.p12}, a PKCS12 truststore. */
    public static final String CA_TRUSTSTORE_FILE_FIELD = "ca_truststore_file";
    /** Virtual field: the (constant, not secret) password of the truststore. */
    public static final String CA_TRUSTSTORE_PASSWORD_FIELD = "ca_truststore_password";
    /** The ClueCDC field holding the CA certificate(s) in PEM, the source of the file fields. */
    public static final String CA_CERTIFICATE_FIELD = "ca_certificate";
    /**
     * Password of every truststore this provider writes. Deliberately a constant: a truststore holds
     * public certificates only, so the password guards nothing; PKCS12 just needs one for its MAC.
     */
    public static final String TRUSTSTORE_PASSWORD = "cluecdc-truststore";

    static final long DEFAULT_TIMEOUT_MS = 5_000;
    static final long MAX_TIMEOUT_MS = 600_000;
    static final String RESOLVE_PATH = "/internal/v1/config-provider/resolve";

    static final String CA_PEM_SUFFIX = "-ca.pem";
    static final String TRUSTSTORE_SUFFIX = "-truststore.p12";
    static final String PEM_CERTIFICATE_MARKER = "-----BEGIN CERTIFICATE-----";

    private static final Set<String> KNOWN_PARAMS = Set.of(URL_CONFIG, TOKEN_CONFIG, CONFIG_FILE_CONFIG,
        TIMEOUT_MS_CONFIG, TTL_MS_CONFIG, FILES_DIR_CONFIG);
    private static final Set<String> VIRTUAL_FIELDS =
        Set.of(CA_CERT_FILE_FIELD, CA_TRUSTSTORE_FILE_FIELD, CA_TRUSTSTORE_PASSWORD_FIELD);
    private static final Pattern FILE_SAFE_REF = Pattern.compile("[A-Za-z0-9_.-]+");
    private static final Set<PosixFilePermission> DIR_MODE = PosixFilePermissions.fromString("rwx------");
    private static final Set<PosixFilePermission> FILE_MODE = PosixFilePermissions.fromString("rw-------");
    private static final String USER_AGENT = "cluecdc-config-provider/0.1.0";
    private static final int MAX_MESSAGE_CHARS = 500;

    private volatile Settings settings;

    /** Public no-arg constructor: Connect and ServiceLoader instantiate the provider reflectively. */
    public ClueCdcConfigProvider() {
    }

    // ------------------------------------------------------------------ configuration

    @Override
    public void configure(Map<String, ?> configs) {
        Map<String, ?> params = configs == null ? Map.of() : configs;
        Set<String> unknown = new TreeSet<>(params.keySet());
        unknown.removeAll(KNOWN_PARAMS);
        if (!unknown.isEmpty()) {
            throw new ConfigException("ClueCDC config provider: unknown parameter(s) " + unknown
                + "; known parameters are " + new TreeSet<>(KNOWN_PARAMS)
                + " (set as config.providers.<alias>.param.<name>)");
        }
        String url = param(params, URL_CONFIG);
        String token = param(params, TOKEN_CONFIG);
        String configFile = param(params, CONFIG_FILE_CONFIG);
        long timeoutMs = positiveLong(params, TIMEOUT_MS_CONFIG, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS);
        long ttl = positiveLong(params, TTL_MS_CONFIG, -1, Long.MAX_VALUE);
        Long ttlMs = ttl < 0 ? null : ttl;
        Path filesDir = filesDir(param(params, FILES_DIR_CONFIG));

        EndpointSource endpoints;
        if (configFile != null) {
            if (url != null || token != null) {
                throw new ConfigException("ClueCDC config provider: set either parameter 'config.file' "
                    + "(a properties file holding url= and token=) or parameters 'url' and 'token', not both");
            }
            FileEndpoints fromFile = new FileEndpoints(Path.of(configFile));
            // An existing file must be valid now; a missing one may still appear before the first get().
            fromFile.validateIfPresent();
            endpoints = fromFile;
        } else {
            if (url == null && token == null) {
                throw new ConfigException("ClueCDC config provider: set parameters 'url' and 'token' "
                    + "(config.providers.<alias>.param.url / .param.token), or parameter 'config.file'");
            }
            Endpoint endpoint = Endpoint.of(url, token, "parameter");
            endpoints = () -> endpoint;
        }

        HttpClient client = HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)        // no h2c upgrade dance with the server
            .followRedirects(HttpClient.Redirect.NEVER)  // never carry the token elsewhere
            .connectTimeout(Duration.ofMillis(timeoutMs))
            .build();
        this.settings = new Settings(client, endpoints, timeoutMs, ttlMs, filesDir);
    }

    /** Validates {@code files.dir}: absolute, and a directory if it exists (created on first use). */
    private static Path filesDir(String value) {
        if (value == null) {
            return null;
        }
        Path dir;
        try {
            dir = Path.of(value);
        } catch (InvalidPathException e) {
            throw new ConfigException("ClueCDC config provider: parameter '" + FILES_DIR_CONFIG
                + "' is not a valid path: '" + clip(value, 200) + "'");
        }
        if (!dir.isAbsolute()) {
            throw new ConfigException("ClueCDC config provider: parameter '" + FILES_DIR_CONFIG
                + "' must be an absolute path, got '" + clip(value, 200) + "'");
        }
        if (Files.exists(dir) && !Files.isDirectory(dir)) {
            throw new ConfigException("ClueCDC config provider: parameter '" + FILES_DIR_CONFIG + "' names '"
                + clip(value, 200) + "', which exists but is not a directory");
        }
        return dir;
    }

    private static String param(Map<String, ?> params, String name) {
        Object v = params.get(name);
        if (v == null) {
            return null;
        }
        String s = v instanceof Password ? ((Password) v).value() : String.valueOf(v);
        s = s.trim();
        return s.isEmpty() ? null : s;
    }

    private static long positiveLong(Map<String, ?> params, String name, long dflt, long max) {
        String s = param(params, name);
        if (s == null) {
            return dflt;
        }
        long v;
        try {
            v = Long.parseLong(s);
        } catch (NumberFormatException e) {
            throw new ConfigException("ClueCDC config provider: parameter '" + name
                + "' must be a whole number of milliseconds, got '" + clip(s, 40) + "'");
        }
        if (v <= 0 || v > max) {
            throw new ConfigException("ClueCDC config provider: parameter '" + name + "' must be between 1 and "
                + max + " ms, got " + v);
        }
        return v;
    }

    // ------------------------------------------------------------------ ConfigProvider

    /**
     * Connect only calls the keyed form for {@code ${cluecdc:ref:field}}; resolving "all fields" of a
     * reference is deliberately not supported, so this returns no data.
     */
    @Override
    public ConfigData get(String path) {
        return new ConfigData(Collections.emptyMap());
    }

    @Override
    public ConfigData get(String path, Set<String> keys) {
        Settings s = this.settings;
        if (s == null) {
            throw new ConfigException("ClueCDC config provider: get() called before configure() (or after close())");
        }
        if (path == null || path.isBlank()) {
            throw new ConfigException("ClueCDC config provider: a secret reference is required; "
                + "use ${<alias>:<secret_ref>:<field>}, e.g. ${cluecdc:<secret_ref>:password}");
        }
        if (keys == null || keys.isEmpty()) {
            return new ConfigData(Collections.emptyMap());
        }
        Set<String> asked = new TreeSet<>(keys);
        List<String> fileFields = new ArrayList<>();
        for (String field : List.of(CA_CERT_FILE_FIELD, CA_TRUSTSTORE_FILE_FIELD)) {
            if (asked.contains(field)) {
                fileFields.add(field);
            }
        }
        // Before any request: nothing is asked of ClueCDC for a file that could not be written.
        if (!fileFields.isEmpty()) {
            checkFileTarget(s, path, fileFields);
        }

        // Virtual fields are answered here; the file fields need ca_certificate from ClueCDC.
        Set<String> wanted = new TreeSet<>(asked);
        wanted.removeAll(VIRTUAL_FIELDS);
        Map<String, String> notes = Map.of();
        if (!fileFields.isEmpty()) {
            wanted.add(CA_CERTIFICATE_FIELD);
            if (!asked.contains(CA_CERTIFICATE_FIELD)) {
                notes = Map.of(CA_CERTIFICATE_FIELD, " (needed for " + quotedList(fileFields) + ")");
            }
        }
        Map<String, String> fetched = Map.of();
        if (!wanted.isEmpty()) {
            List<String> fields = new ArrayList<>(wanted); // sorted: deterministic request body
            Endpoint endpoint = s.endpoints.current();
            HttpResponse<byte[]> response = send(s, endpoint, path, fields);
            fetched = handle(endpoint, path, fields, notes, response);
        }
        Map<String, String> files = fileFields.isEmpty() ? Map.of()
            : materialize(s.filesDir, path, fileFields, fetched.get(CA_CERTIFICATE_FIELD));

        Map<String, String> values = new LinkedHashMap<>();
        for (String key : asked) {
            if (key.equals(CA_TRUSTSTORE_PASSWORD_FIELD)) {
                values.put(key, TRUSTSTORE_PASSWORD);
            } else if (files.containsKey(key)) {
                values.put(key, files.get(key));
            } else {
                values.put(key, fetched.get(key));
            }
        }
        return new ConfigData(values, s.ttlMs);
    }

    @Override
    public void close() {
        // The JDK 17 HttpClient has no close(); its daemon threads end once it is unreachable.
        this.settings = null;
    }

    // ------------------------------------------------------------------ HTTP

    static String requestBody(String secretRef, List<String> fields) {
        StringBuilder b = new StringBuilder(64);
        b.append("{\"secret_ref\":");
        Json.appendQuoted(b, secretRef);
        b.append(",\"fields\":[");
        for (int i = 0; i < fields.size(); i++) {
            if (i > 0) {
                b.append(',');
            }
            Json.appendQuoted(b, fields.get(i));
        }
        return b.append("]}").toString();
    }

    private static HttpResponse<byte[]> send(Settings s, Endpoint endpoint, String path, List<String> fields) {
        HttpRequest request = HttpRequest.newBuilder(endpoint.resolveUri)
            .timeout(Duration.ofMillis(s.timeoutMs))
            .header("Authorization", "Bearer " + endpoint.token)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .header("User-Agent", USER_AGENT)
            .POST(HttpRequest.BodyPublishers.ofString(requestBody(path, fields), StandardCharsets.UTF_8))
            .build();
        CompletableFuture<HttpResponse<byte[]>> future =
            s.client.sendAsync(request, HttpResponse.BodyHandlers.ofByteArray());
        try {
            // One overall deadline (connect + request + body) of timeout.ms.
            return future.get(s.timeoutMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            future.cancel(true);
            throw unreachable(endpoint, "no response within " + s.timeoutMs + " ms (timeout.ms)");
        } catch (InterruptedException e) {
            future.cancel(true);
            Thread.currentThread().interrupt();
            throw new ConfigException("ClueCDC config provider: interrupted while resolving secret reference "
                + quoteForMessage(path, endpoint));
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            if (cause instanceof HttpTimeoutException) {
                throw unreachable(endpoint, "no response within " + s.timeoutMs + " ms (timeout.ms)");
            }
            throw unreachable(endpoint, describe(cause, endpoint));
        }
    }

    private static ConfigException unreachable(Endpoint endpoint, String why) {
        return new ConfigException("ClueCDC at " + endpoint.baseUrl + " is unreachable: " + why);
    }

    /**
     * Why a request failed. The JDK client's ConnectException usually has no message, so the cause
     * chain is searched for an unresolvable host or else the first exception that has a message.
     */
    private static String describe(Throwable t, Endpoint endpoint) {
        Throwable cur = t;
        for (int i = 0; cur != null && i < 8; i++, cur = cur.getCause()) {
            if (cur instanceof UnresolvedAddressException || cur instanceof UnknownHostException) {
                return "cannot resolve host '" + endpoint.resolveUri.getHost() + "' (" + cur.getClass().getSimpleName() + ")";
            }
        }
        cur = t;
        for (int i = 0; cur != null && i < 8; i++, cur = cur.getCause()) {
            String m = cur.getMessage();
            if (m != null && !m.isBlank()) {
                return cur.getClass().getSimpleName() + ": " + sanitize(m, endpoint);
            }
        }
        if (t instanceof ConnectException) {
            return "connection failed (ConnectException: nothing listening there, or the network refused it)";
        }
        return t.getClass().getSimpleName();
    }

    /** {@code notes} adds context to a field named in an error, e.g. " (needed for 'ca_cert_file')". */
    private static Map<String, String> handle(Endpoint endpoint, String path, List<String> fields,
                                              Map<String, String> notes, HttpResponse<byte[]> response) {
        int status = response.statusCode();
        String ref = quoteForMessage(path, endpoint);
        if (status != 200) {
            throw new ConfigException(errorMessage(endpoint, ref, status, response.body()));
        }
        Object doc;
        try {
            doc = Json.parse(utf8(response.body()));
        } catch (IllegalArgumentException e) { // JsonException or bad UTF-8; neither quotes the body
            throw new ConfigException("ClueCDC at " + endpoint.baseUrl + " returned HTTP 200 with an invalid body "
                + "for secret reference " + ref + ": " + e.getMessage());
        }
        Object values = doc instanceof Map ? ((Map<?, ?>) doc).get("values") : null;
        if (!(values instanceof Map)) {
            throw new ConfigException("ClueCDC at " + endpoint.baseUrl + " returned HTTP 200 without a \"values\" "
                + "object for secret reference " + ref);
        }
        Map<?, ?> valueMap = (Map<?, ?>) values;
        Map<String, String> result = new LinkedHashMap<>();
        List<String> missing = new ArrayList<>();
        List<String> notStrings = new ArrayList<>();
        for (String field : fields) {
            Object v = valueMap.get(field);
            if (v instanceof String) {
                result.put(field, (String) v);
            } else if (v == null) {
                missing.add(quoteForMessage(field, endpoint) + notes.getOrDefault(field, ""));
            } else {
                notStrings.add(quoteForMessage(field, endpoint) + notes.getOrDefault(field, ""));
            }
        }
        if (!missing.isEmpty()) {
            throw new ConfigException("ClueCDC returned no value for field" + (missing.size() > 1 ? "s " : " ")
                + String.join(", ", missing) + " of secret reference " + ref);
        }
        if (!notStrings.isEmpty()) {
            throw new ConfigException("ClueCDC returned a non-string value for field"
                + (notStrings.size() > 1 ? "s " : " ") + String.join(", ", notStrings)
                + " of secret reference " + ref);
        }
        return result;
    }

    /** "ClueCDC ... (HTTP 404, not_found): message", from {"error":{"code":..,"message":..}} if present. */
    private static String errorMessage(Endpoint endpoint, String ref, int status, byte[] body) {
        String code = null;
        String message = null;
        try {
            Object doc = Json.parse(utf8(body));
            Object error = doc instanceof Map ? ((Map<?, ?>) doc).get("error") : null;
            if (error instanceof Map) {
                Object c = ((Map<?, ?>) error).get("code");
                Object m = ((Map<?, ?>) error).get("message");
                code = c instanceof String ? sanitize((String) c, endpoint) : null;
                message = m instanceof String ? sanitize((String) m, endpoint) : null;
            }
        } catch (IllegalArgumentException e) {
            // Not ClueCDC's error JSON (e.g. a proxy's HTML page): report the status only.
        }
        StringBuilder b = new StringBuilder("ClueCDC at ").append(endpoint.baseUrl)
            .append(" could not resolve secret reference ").append(ref)
            .append(" (HTTP ").append(status);
        if (code != null && !code.isEmpty()) {
            b.append(", ").append(code);
        }
        b.append("): ").append(message != null && !message.isEmpty() ? message : "no error message in the response");
        if (status == 401 || status == 403) {
            b.append(" - check the token configured for this Connect cluster");
        }
        return b.toString();
    }

    private static String utf8(byte[] body) {
        try {
            return StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT)
                .decode(ByteBuffer.wrap(body == null ? new byte[0] : body))
                .toString();
        } catch (CharacterCodingException e) {
            throw new IllegalArgumentException("body is not valid UTF-8");
        }
    }

    /** Single-quoted, sanitized and clipped, for names (secret refs, fields) echoed in messages. */
    private static String quoteForMessage(String s, Endpoint endpoint) {
        return "'" + sanitize(s, endpoint) + "'";
    }

    /** Control characters become spaces, the token (if somehow echoed) is masked, length is capped. */
    private static String sanitize(String s, Endpoint endpoint) {
        String out = s;
        if (endpoint != null && endpoint.token.length() >= 4) {
            out = out.replace(endpoint.token, "***");
        }
        StringBuilder b = new StringBuilder(Math.min(out.length(), MAX_MESSAGE_CHARS + 3));
        for (int i = 0; i < out.length() && b.length() < MAX_MESSAGE_CHARS; i++) {
            char c = out.charAt(i);
            b.append(Character.isISOControl(c) ? ' ' : c);
        }
        if (out.length() > MAX_MESSAGE_CHARS) {
            b.append("...");
        }
        return b.toString();
    }

    private static String clip(String s, int max) {
        return sanitize(s.length() > max ? s.substring(0, max) + "..." : s, null);
    }

    private static String quotedList(List<String> names) {
        StringBuilder b = new StringBuilder();
        for (String name : names) {
            b.append(b.length() == 0 ? "" : ", ").append(quoteForMessage(name, null));
        }
        return b.toString();
    }

    // ------------------------------------------------------------------ files (ca_cert_file, ca_truststore_file)

    /** files.dir is set and the secret reference can safely be part of a file name. */
    private static void checkFileTarget(Settings s, String ref, List<String> fileFields) {
        String what = "field" + (fileFields.size() > 1 ? "s " : " ") + quotedList(fileFields);
        if (s.filesDir == null) {
            throw new ConfigException("ClueCDC config provider: " + what + " of secret reference "
                + quoteForMessage(ref, null) + " must write a file, but no directory is configured; set "
                + "config.providers.<alias>.param." + FILES_DIR_CONFIG + " to the absolute path of a directory "
                + "the worker can write");
        }
        if (!FILE_SAFE_REF.matcher(ref).matches() || ref.contains("..")) {
            throw new ConfigException("ClueCDC config provider: secret reference " + quoteForMessage(ref, null)
                + " cannot be used in a file name (for " + what + "): it may contain only letters, digits, "
                + "'_', '.' and '-', and not '..'");
        }
    }

    /** Writes the requested files from the PEM (if they differ) and returns field -> absolute path. */
    private static Map<String, String> materialize(Path dir, String ref, List<String> fileFields, String pem) {
        String quotedRef = quoteForMessage(ref, null);
        String neededFor = "needed for " + quotedList(fileFields);
        if (pem == null || !pem.contains(PEM_CERTIFICATE_MARKER)) {
            throw new ConfigException("ClueCDC returned a value for field '" + CA_CERTIFICATE_FIELD
                + "' of secret reference " + quotedRef + " that is not a PEM certificate (it has no "
                + PEM_CERTIFICATE_MARKER + " line), " + neededFor);
        }
        byte[] pemBytes = pem.getBytes(StandardCharsets.UTF_8);
        // Parsed before anything is written, so a bad certificate leaves every file as it was.
        List<Certificate> certificates =
            fileFields.contains(CA_TRUSTSTORE_FILE_FIELD) ? parseCertificates(quotedRef, pemBytes) : null;

        Map<String, String> paths = new LinkedHashMap<>();
        for (String field : fileFields) {
            boolean pemFile = field.equals(CA_CERT_FILE_FIELD);
            Path target = dir.resolve(ref + (pemFile ? CA_PEM_SUFFIX : TRUSTSTORE_SUFFIX));
            try {
                ensureDirectory(dir);
                if (pemFile) {
                    if (!sameBytes(target, pemBytes)) {
                        writeAtomically(dir, target, pemBytes);
                    }
                } else if (!sameTruststore(target, certificates)) {
                    writeAtomically(dir, target, truststore(certificates));
                }
            } catch (IOException | GeneralSecurityException e) {
                String why = e.getMessage() == null || e.getMessage().isBlank() ? ""
                    : ": " + sanitize(e.getMessage(), null);
                throw new ConfigException("ClueCDC config provider: cannot write '" + target.getFileName()
                    + "' for field '" + field + "' of secret reference " + quotedRef + " in directory '" + dir
                    + "' (parameter '" + FILES_DIR_CONFIG + "'): " + e.getClass().getSimpleName() + why);
            }
            paths.put(field, target.toAbsolutePath().toString());
        }
        return paths;
    }

    private static List<Certificate> parseCertificates(String quotedRef, byte[] pem) {
        Collection<? extends Certificate> certificates;
        try {
            certificates = CertificateFactory.getInstance("X.509")
                .generateCertificates(new ByteArrayInputStream(pem));
        } catch (GeneralSecurityException | RuntimeException e) {
            // The type only: the parser's message is not needed and the PEM is never quoted.
            throw new ConfigException("ClueCDC returned a value for field '" + CA_CERTIFICATE_FIELD
                + "' of secret reference " + quotedRef + " that cannot be read as X.509 certificates ("
                + e.getClass().getSimpleName() + "), needed for '" + CA_TRUSTSTORE_FILE_FIELD + "'");
        }
        if (certificates.isEmpty()) {
            throw new ConfigException("ClueCDC returned a value for field '" + CA_CERTIFICATE_FIELD
                + "' of secret reference " + quotedRef + " that holds no X.509 certificate, needed for '"
                + CA_TRUSTSTORE_FILE_FIELD + "'");
        }
        return new ArrayList<>(certificates);
    }

    /** A PKCS12 truststore with one trusted-certificate entry per certificate: aliases ca-0, ca-1, ... */
    private static byte[] truststore(List<Certificate> certificates) throws IOException, GeneralSecurityException {
        KeyStore store = KeyStore.getInstance("PKCS12");
        store.load(null, null);
        for (int i = 0; i < certificates.size(); i++) {
            store.setCertificateEntry(truststoreAlias(i), certificates.get(i));
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        store.store(out, TRUSTSTORE_PASSWORD.toCharArray());
        return out.toByteArray();
    }

    private static String truststoreAlias(int i) {
        return "ca-" + i;
    }

    private static boolean posix(Path path) {
        return path.getFileSystem().supportedFileAttributeViews().contains("posix");
    }

    /** Creates a missing files.dir (and missing parents) with mode 0700; an existing one is left as is. */
    private static void ensureDirectory(Path dir) throws IOException {
        if (Files.isDirectory(dir)) {
            return;
        }
        if (posix(dir)) {
            Files.createDirectories(dir, PosixFilePermissions.asFileAttribute(DIR_MODE));
        } else {
            Files.createDirectories(dir);
        }
    }

    /** True if target is a regular file (not a symlink) with mode 0600 (on POSIX). */
    private static boolean isOwnFile(Path target, BasicFileAttributes attrs) throws IOException {
        return attrs.isRegularFile()
            && (!posix(target) || Files.getPosixFilePermissions(target, LinkOption.NOFOLLOW_LINKS).equals(FILE_MODE));
    }

    /** True if target already holds exactly these bytes (and is a 0600 regular file); false if missing. */
    private static boolean sameBytes(Path target, byte[] content) {
        try {
            BasicFileAttributes attrs = Files.readAttributes(target, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
            return isOwnFile(target, attrs) && attrs.size() == content.length
                && Arrays.equals(Files.readAllBytes(target), content);
        } catch (IOException e) {
            return false; // missing or unreadable: write it
        }
    }

    /** True if target is a truststore of ours holding exactly these certificates, in order. */
    private static boolean sameTruststore(Path target, List<Certificate> certificates) {
        try {
            BasicFileAttributes attrs = Files.readAttributes(target, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
            if (!isOwnFile(target, attrs)) {
                return false;
            }
            KeyStore store = KeyStore.getInstance("PKCS12");
            try (InputStream in = Files.newInputStream(target)) {
                store.load(in, TRUSTSTORE_PASSWORD.toCharArray());
            }
            if (store.size() != certificates.size()) {
                return false;
            }
            for (int i = 0; i < certificates.size(); i++) {
                String alias = truststoreAlias(i);
                Certificate stored = store.isCertificateEntry(alias) ? store.getCertificate(alias) : null;
                if (stored == null || !Arrays.equals(stored.getEncoded(), certificates.get(i).getEncoded())) {
                    return false;
                }
            }
            return true;
        } catch (IOException | GeneralSecurityException | RuntimeException e) {
            return false; // missing, corrupt or not ours: write it
        }
    }

    /**
     * Writes content to a 0600 temporary file in dir, flushes it to disk and renames it over target
     * (atomic: readers see the old file or the new one, never a partial one).
     */
    private static void writeAtomically(Path dir, Path target, byte[] content) throws IOException {
        boolean posix = posix(dir);
        String prefix = "." + target.getFileName() + ".";
        Path tmp = posix
            ? Files.createTempFile(dir, prefix, ".tmp", PosixFilePermissions.asFileAttribute(FILE_MODE))
            : Files.createTempFile(dir, prefix, ".tmp");
        boolean moved = false;
        try {
            if (posix) {
                Files.setPosixFilePermissions(tmp, FILE_MODE); // exactly 0600, whatever the umask
            }
            try (FileChannel channel = FileChannel.open(tmp, StandardOpenOption.WRITE,
                                                        StandardOpenOption.TRUNCATE_EXISTING)) {
                ByteBuffer buffer = ByteBuffer.wrap(content);
                while (buffer.hasRemaining()) {
                    channel.write(buffer);
                }
                channel.force(true);
            }
            Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            moved = true;
        } finally {
            if (!moved) {
                try {
                    Files.deleteIfExists(tmp);
                } catch (IOException suppressed) {
                    // The original failure is the one worth reporting.
                }
            }
        }
    }

    // ------------------------------------------------------------------ endpoint (url + token)

    private static final class Settings {
        final HttpClient client;
        final EndpointSource endpoints;
        final long timeoutMs;
        final Long ttlMs;
        final Path filesDir; // null: files.dir not set

        Settings(HttpClient client, EndpointSource endpoints, long timeoutMs, Long ttlMs, Path filesDir) {
            this.client = client;
            this.endpoints = endpoints;
            this.timeoutMs = timeoutMs;
            this.ttlMs = ttlMs;
            this.filesDir = filesDir;
        }
    }

    /** A validated ClueCDC base URL plus token. toString() never shows the token. */
    static final class Endpoint {
        final String baseUrl;
        final URI resolveUri;
        final String token;

        private Endpoint(String baseUrl, URI resolveUri, String token) {
            this.baseUrl = baseUrl;
            this.resolveUri = resolveUri;
            this.token = token;
        }

        /** Validates url and token; {@code origin} ("parameter" or "config file ... key") prefixes errors. */
        static Endpoint of(String url, String token, String origin) {
            String prefix = "ClueCDC config provider: ";
            if (url == null) {
                throw new ConfigException(prefix + origin + " 'url' is required (the ClueCDC base URL, "
                    + "e.g. http://127.0.0.1:8080)");
            }
            // Checked before anything echoes the URL: user info may carry a password.
            int schemeEnd = url.indexOf("://");
            String afterScheme = schemeEnd < 0 ? url : url.substring(schemeEnd + 3);
            int authorityEnd = indexOfAny(afterScheme, "/?#");
            String authority = authorityEnd < 0 ? afterScheme : afterScheme.substring(0, authorityEnd);
            if (authority.contains("@")) {
                throw new ConfigException(prefix + origin + " 'url' must not contain user info (user:password@); "
                    + "authenticate with 'token' instead");
            }
            URI uri;
            try {
                uri = new URI(url);
            } catch (URISyntaxException e) {
                throw new ConfigException(prefix + origin + " 'url' is not a valid URL: '" + clip(url, 200) + "'");
            }
            String scheme = uri.getScheme() == null ? "" : uri.getScheme().toLowerCase(Locale.ROOT);
            if (!scheme.equals("http") && !scheme.equals("https")) {
                throw new ConfigException(prefix + origin + " 'url' must be an http:// or https:// URL, got '"
                    + clip(url, 200) + "'");
            }
            if (uri.getRawUserInfo() != null) {
                throw new ConfigException(prefix + origin + " 'url' must not contain user info (user:password@); "
                    + "authenticate with 'token' instead");
            }
            if (uri.getHost() == null || uri.getHost().isEmpty()) {
                throw new ConfigException(prefix + origin + " 'url' has no host: '" + clip(url, 200) + "'");
            }
            if (uri.getRawQuery() != null || uri.getRawFragment() != null) {
                throw new ConfigException(prefix + origin + " 'url' must be a base URL without query or fragment, got '"
                    + clip(url, 200) + "'");
            }
            String base = url;
            while (base.endsWith("/")) {
                base = base.substring(0, base.length() - 1);
            }
            if (token == null) {
                throw new ConfigException(prefix + origin + " 'token' is required (the per-Connect-cluster token "
                    + "issued by ClueCDC)");
            }
            for (int i = 0; i < token.length(); i++) {
                char c = token.charAt(i);
                if (c <= 0x20 || c >= 0x7f) {
                    throw new ConfigException(prefix + origin + " 'token' may only contain printable ASCII "
                        + "without spaces (the token itself is not shown)");
                }
            }
            return new Endpoint(base, URI.create(base + RESOLVE_PATH), token);
        }

        private static int indexOfAny(String s, String chars) {
            for (int i = 0; i < s.length(); i++) {
                if (chars.indexOf(s.charAt(i)) >= 0) {
                    return i;
                }
            }
            return -1;
        }

        @Override
        public String toString() {
            return "Endpoint[" + baseUrl + ", token=***]";
        }
    }

    @FunctionalInterface
    private interface EndpointSource {
        Endpoint current();
    }

    /**
     * url= and token= from a properties file, re-read whenever the file's identity, size or mtime
     * changes. A file modified less than {@link #RACY_WINDOW_MS} before it was last read is re-read
     * on every call (mtime granularity can hide a rewrite within the same clock tick).
     */
    static final class FileEndpoints implements EndpointSource {
        static final long RACY_WINDOW_MS = 2_000;

        private final Path file;
        private Endpoint cached;     // guarded by this
        private Object cachedKey;    // guarded by this
        private boolean cachedRacy;  // guarded by this

        FileEndpoints(Path file) {
            this.file = file;
        }

        /** At configure time: a file that exists must be valid; a missing one may appear later. */
        void validateIfPresent() {
            if (Files.exists(file)) {
                current();
            }
        }

        @Override
        public synchronized Endpoint current() {
            BasicFileAttributes attrs;
            try {
                attrs = Files.readAttributes(file, BasicFileAttributes.class);
            } catch (NoSuchFileException e) {
                throw new ConfigException("ClueCDC config provider: config file '" + file + "' does not exist");
            } catch (IOException e) {
                throw new ConfigException("ClueCDC config provider: cannot read config file '" + file + "': " + e);
            }
            if (!attrs.isRegularFile()) {
                throw new ConfigException("ClueCDC config provider: config file '" + file + "' is not a regular file");
            }
            FileTime mtime = attrs.lastModifiedTime();
            List<Object> key = List.of(String.valueOf(attrs.fileKey()), mtime, attrs.size());
            if (cached != null && !cachedRacy && key.equals(cachedKey)) {
                return cached;
            }
            long readAt = System.currentTimeMillis();
            Properties props = new Properties();
            try (Reader in = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
                props.load(in);
            } catch (NoSuchFileException e) {
                throw new ConfigException("ClueCDC config provider: config file '" + file + "' does not exist");
            } catch (IOException | IllegalArgumentException e) {
                // Message is the exception type only: a parse error could quote the token.
                throw new ConfigException("ClueCDC config provider: cannot read config file '" + file + "' ("
                    + e.getClass().getSimpleName() + ")");
            }
            Set<String> unknown = new TreeSet<>(props.stringPropertyNames());
            unknown.removeAll(Set.of(URL_CONFIG, TOKEN_CONFIG));
            if (!unknown.isEmpty()) {
                throw new ConfigException("ClueCDC config provider: config file '" + file + "' has unknown key(s) "
                    + unknown + "; it holds only url= and token=");
            }
            String url = Objects.toString(props.getProperty(URL_CONFIG), "").trim();
            String token = Objects.toString(props.getProperty(TOKEN_CONFIG), "").trim();
            Endpoint endpoint = Endpoint.of(url.isEmpty() ? null : url, token.isEmpty() ? null : token,
                "config file '" + file + "' key");
            cached = endpoint;
            cachedKey = key;
            cachedRacy = readAt - mtime.toMillis() < RACY_WINDOW_MS;
            return endpoint;
        }
    }
}
