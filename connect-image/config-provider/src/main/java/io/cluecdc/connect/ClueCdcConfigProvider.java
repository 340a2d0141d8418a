package io.cluecdc.connect;

import java.io.IOException;
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
import java.nio.channels.UnresolvedAddressException;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileTime;
import java.time.Duration;
import java.util.ArrayList;
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
 * </pre>
 *
 * <p>{@code get(ref, fields)} sends {@code POST <url>/internal/v1/config-provider/resolve} with
 * {@code Authorization: Bearer <token>} and {@code {"secret_ref":ref,"fields":[...]}}; a 200 answer
 * is {@code {"values":{field:value,...}}}. Every failure is a {@link ConfigException} whose message
 * names the secret reference, fields, URL and HTTP status as relevant, and never a value or the
 * token. Nothing is logged.
 *
 * <p>Thread-safe: the configuration is an immutable snapshot published through a volatile field,
 * the JDK {@link HttpClient} is thread-safe, and the config-file cache is guarded by a lock.
 */
public final class ClueCdcConfigProvider implements ConfigProvider {

    public static final String URL_CONFIG = "url";
    public static final String TOKEN_CONFIG = "token";
    public static final String CONFIG_FILE_CONFIG = "config.file";
    public static final String TIMEOUT_MS_CONFIG = "timeout.ms";
    public static final String TTL_MS_CONFIG = "ttl.ms";

    static final long DEFAULT_TIMEOUT_MS = 5_000;
    static final long MAX_TIMEOUT_MS = 600_000;
    static final String RESOLVE_PATH = "/internal/v1/config-provider/resolve";

    private static final Set<String> KNOWN_PARAMS =
        Set.of(URL_CONFIG, TOKEN_CONFIG, CONFIG_FILE_CONFIG, TIMEOUT_MS_CONFIG, TTL_MS_CONFIG);
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
        this.settings = new Settings(client, endpoints, timeoutMs, ttlMs);
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
        List<String> fields = new ArrayList<>(new TreeSet<>(keys)); // deterministic request body
        Endpoint endpoint = s.endpoints.current();
        HttpResponse<byte[]> response = send(s, endpoint, path, fields);
        Map<String, String> values = handle(endpoint, path, fields, response);
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

    private static Map<String, String> handle(Endpoint endpoint, String path, List<String> fields,
                                              HttpResponse<byte[]> response) {
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
                missing.add(quoteForMessage(field, endpoint));
            } else {
                notStrings.add(quoteForMessage(field, endpoint));
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

    // ------------------------------------------------------------------ endpoint (url + token)

    private static final class Settings {
        final HttpClient client;
        final EndpointSource endpoints;
        final long timeoutMs;
        final Long ttlMs;

        Settings(HttpClient client, EndpointSource endpoints, long timeoutMs, Long ttlMs) {
            this.client = client;
            this.endpoints = endpoints;
            this.timeoutMs = timeoutMs;
            this.ttlMs = ttlMs;
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
