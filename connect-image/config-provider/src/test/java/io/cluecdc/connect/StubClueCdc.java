package io.cluecdc.connect;

import com.sun.net.httpserver.HttpServer;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.function.Function;

/** A stand-in ClueCDC on 127.0.0.1:&lt;ephemeral&gt; that records requests and answers as told. */
final class StubClueCdc implements AutoCloseable {

    /** One request as ClueCDC saw it (header names lower-cased). */
    static final class Request {
        final String method;
        final String path;
        final Map<String, List<String>> headers;
        final String body;

        Request(String method, String path, Map<String, List<String>> headers, String body) {
            this.method = method;
            this.path = path;
            this.headers = headers;
            this.body = body;
        }

        String header(String name) {
            List<String> v = headers.get(name.toLowerCase(java.util.Locale.ROOT));
            return v == null || v.isEmpty() ? null : v.get(0);
        }
    }

    /** What to answer. */
    static final class Response {
        final int status;
        final String body;

        Response(int status, String body) {
            this.status = status;
            this.body = body;
        }
    }

    private final HttpServer server;
    private final ExecutorService executor = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "stub-cluecdc");
        t.setDaemon(true);
        return t;
    });
    final ConcurrentLinkedQueue<Request> requests = new ConcurrentLinkedQueue<>();
    private volatile Function<Request, Response> responder;

    StubClueCdc(Function<Request, Response> responder) throws IOException {
        this.responder = responder;
        server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.createContext("/", exchange -> {
            try {
                String body;
                try (InputStream in = exchange.getRequestBody()) {
                    body = new String(in.readAllBytes(), StandardCharsets.UTF_8);
                }
                Map<String, List<String>> headers = new java.util.TreeMap<>();
                exchange.getRequestHeaders().forEach((k, v) -> headers.put(k.toLowerCase(java.util.Locale.ROOT), v));
                Request request = new Request(exchange.getRequestMethod(),
                    exchange.getRequestURI().getRawPath(), headers, body);
                requests.add(request);
                Response response = this.responder.apply(request);
                byte[] out = response.body.getBytes(StandardCharsets.UTF_8);
                exchange.getResponseHeaders().set("Content-Type", "application/json");
                exchange.sendResponseHeaders(response.status, out.length == 0 ? -1 : out.length);
                if (out.length > 0) {
                    try (OutputStream os = exchange.getResponseBody()) {
                        os.write(out);
                    }
                }
            } catch (RuntimeException | Error e) {
                e.printStackTrace();
                throw e;
            } finally {
                exchange.close();
            }
        });
        server.setExecutor(executor);
        server.start();
    }

    /** Answers 200 {"values":{...}} with the given fields. */
    static StubClueCdc returning(Map<String, String> values) throws IOException {
        Response response = values(values);
        return new StubClueCdc(r -> response);
    }

    /** A 200 {"values":{...}} answer with the given fields (plus keys the provider must ignore). */
    static Response values(Map<String, String> values) {
        StringBuilder b = new StringBuilder("{\"request_id\":\"r-1\",\"values\":{");
        String sep = "";
        for (Map.Entry<String, String> e : values.entrySet()) {
            b.append(sep).append(Json.quote(e.getKey())).append(':').append(Json.quote(e.getValue()));
            sep = ",";
        }
        String body = b.append("},\"meta\":{\"nested\":{\"ignored\":[1,2.5e3,true,null]}}}").toString();
        return new Response(200, body);
    }

    void respondWith(Function<Request, Response> responder) {
        this.responder = responder;
    }

    String url() {
        return "http://127.0.0.1:" + server.getAddress().getPort();
    }

    Request lastRequest() {
        Request last = null;
        for (Request r : requests) {
            last = r;
        }
        return last;
    }

    @Override
    public void close() {
        server.stop(0);
        executor.shutdownNow();
    }
}
