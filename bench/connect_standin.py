#!/usr/bin/env python3
"""A scripted Kafka Connect REST API for scale benchmarks.

The real worker cannot hold thousands of connectors on two cores; this stand-in answers the
calls ClueCDC makes (see src/connect/mod.rs) with the shapes Kafka Connect 4 returns, holds
its connectors in memory, and adds a configurable latency to every call and, optionally, a
share of 409 "rebalance in progress" answers. `bench/agreement.py` compares its answers with
the real worker's for the same calls, so that it cannot drift.

    connect_standin.py --port 18999 [--port 19000 ...] [--latency-ms 2.5] [--rebalance-rate 0.0]

Each --port is a stand-in of its own (its own connectors and latency), in one process. The
stand-in's own calls, under /standin (never slowed, never counted as Connect's):
    GET|DELETE /standin/calls                 the calls so far by kind (DELETE: then zeroed)
    PUT /standin/latency {"ms": 2000}          every later Connect call answered this late (a
                                               slow cluster; more than the caller's timeout:
                                               one that times out)
    PUT /standin/connectors/{name}/fail {"trace": "..."}   the connector and its task FAILED
                                               with that trace, also after a restart
    DELETE /standin/connectors/{name}/fail     RUNNING again
"""
import argparse
import json
import random
import re
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

PLUGINS = [
    {"class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "type": "sink", "version": "4.1.1"},
    {"class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "type": "source", "version": "4.1.1"},
    {"class": "io.debezium.connector.postgresql.PostgresConnector", "type": "source", "version": "3.5.0.Final"},
    {"class": "io.debezium.connector.mysql.MySqlConnector", "type": "source", "version": "3.5.0.Final"},
    {"class": "io.debezium.connector.mariadb.MariaDbConnector", "type": "source", "version": "3.5.0.Final"},
    {"class": "io.debezium.connector.jdbc.JdbcSinkConnector", "type": "sink", "version": "3.5.0.Final"},
    {"class": "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector", "type": "sink", "version": "3.4.2"},
]
# The worker id its statuses name: its own address once it listens (ClueCDC asks each worker a
# status names whether it answers; one that does not is a lost worker).
WORKER = "127.0.0.1:8083"


class State:
    def __init__(self, latency_s, rebalance_rate):
        self.lock = threading.Lock()
        self.worker = WORKER  # this stand-in's address, set when it starts serving
        self.connectors = {}  # name -> {"config": {...}, "state": "RUNNING"}
        self.latency_s = latency_s
        self.rebalance_rate = rebalance_rate
        self.calls = {}  # "METHOD /path-shape" -> count
        # The benchmark's hook: called as hook(method, shape) in the handler thread after the
        # call is counted and before it is answered, so the caller (ClueCDC) waits while it
        # runs. scripts/bench uses it to read ClueCDC's CPU at the start of a reconcile pass.
        self.hook = None
        # (ClueCDC's URL, the cluster's provider token): set, the stand-in resolves
        # ${cluecdc:<ref>:<field>} before it validates, as a worker with the ClueCDC config
        # provider does (so ClueCDC's provider check passes and creates are not refused).
        self.provider = None

    def snapshot(self, reset=False):
        """The calls counted so far, by "METHOD /path-shape"; optionally zeroed."""
        with self.lock:
            calls = dict(self.calls)
            if reset:
                self.calls.clear()
        return calls


REFERENCE = re.compile(r"^\$\{cluecdc:([^:}]+):([^}]+)\}$")


def resolve(provider, value):
    """A whole-value ${cluecdc:<ref>:<field>} asked of ClueCDC, as the config provider does;
    anything else (or no provider configured) unchanged."""
    m = REFERENCE.match(str(value))
    if not m or provider is None:
        return value
    url, token = provider
    req = urllib.request.Request(
        url.rstrip("/") + "/internal/v1/config-provider/resolve",
        data=json.dumps({"secret_ref": m.group(1), "fields": [m.group(2)]}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST")
    with urllib.request.urlopen(req, timeout=10) as res:
        return json.load(res)["values"][m.group(2)]


def kind_of(config):
    cls = config.get("connector.class", "")
    for p in PLUGINS:
        if p["class"] == cls or p["class"].rsplit(".", 1)[-1] == cls:
            return p["type"]
    return "source"


def version_of(config):
    cls = config.get("connector.class", "")
    return next((p["version"] for p in PLUGINS if p["class"] == cls), "4.1.1")


def status_of(name, c, worker=WORKER):
    v = version_of(c["config"])
    failing = c.get("failing") if c["state"] == "RUNNING" else None
    state = "FAILED" if failing is not None else c["state"]
    task = {"id": 0, "state": state, "worker_id": worker, "version": v}
    connector = {"state": state, "worker_id": worker, "version": v}
    if failing is not None:  # Connect adds the trace to a FAILED status only
        task["trace"] = connector["trace"] = failing
    tasks = [] if state == "STOPPED" else [task]
    return {"name": name, "connector": connector, "tasks": tasks, "type": kind_of(c["config"])}


def info_of(name, c):
    tasks = [] if c["state"] == "STOPPED" else [{"connector": name, "task": 0}]
    return {"name": name, "config": dict(c["config"], name=name), "tasks": tasks, "type": kind_of(c["config"])}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the body waits for the client's
    # delayed ACK of the headers (up to 40 ms on a kept-alive connection), an artifact no real
    # worker has (Jetty sends them together).
    disable_nagle_algorithm = True
    state: State = None

    def log_message(self, *args):
        pass

    def reply(self, code, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(code)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"null") if n else None

    def handle_any(self, method):
        s = self.state
        url = urlparse(self.path)
        path = url.path.rstrip("/") or "/"
        shape = re.sub(r"^/connectors/[^/]+", "/connectors/{name}", path)
        shape = re.sub(r"^/connector-plugins/[^/]+", "/connector-plugins/{class}", shape)
        with s.lock:
            s.calls[f"{method} {shape}"] = s.calls.get(f"{method} {shape}", 0) + 1
        own = shape.startswith("/standin")
        hook = s.hook
        if hook is not None and not own:
            hook(method, shape)
        if s.latency_s and not own:
            time.sleep(s.latency_s)
        if method != "GET" and s.rebalance_rate and random.random() < s.rebalance_rate:
            return self.reply(409, {"error_code": 409, "message": "Cannot complete request momentarily due to stale configuration (typically caused by a concurrent config change)"})
        if path == "/":
            return self.reply(200, {"version": "4.1.1", "commit": "standin", "kafka_cluster_id": "standin-cluster"})
        if path == "/standin/calls":  # the benchmark's own counter, not Connect's
            # GET: the calls so far by kind; DELETE: the same, then zeroed.
            return self.reply(200, s.snapshot(reset=method == "DELETE"))
        if path == "/standin/latency" and method == "PUT":
            s.latency_s = float((self.body() or {}).get("ms", 0)) / 1000.0
            return self.reply(204)
        m = re.fullmatch(r"/standin/connectors/([^/]+)/fail", path)
        if m and method in ("PUT", "DELETE"):
            trace = (self.body() or {}).get("trace", "failed by the stand-in") if method == "PUT" else None
            with s.lock:
                c = s.connectors.get(unquote(m.group(1)))
                if c is None:
                    return self.reply(404, {"error_code": 404, "message": "no such connector"})
                if trace is None:
                    c.pop("failing", None)
                else:
                    c["failing"] = str(trace)
            return self.reply(204)
        if path == "/connector-plugins":
            return self.reply(200, PLUGINS)
        m = re.fullmatch(r"/connector-plugins/([^/]+)/config/validate", path)
        if m and method == "PUT":
            config = self.body() or {}
            try:
                config = {k: resolve(s.provider, v) for k, v in config.items()}
            except Exception as e:  # what Connect answers when a config provider throws
                return self.reply(500, {"error_code": 500, "message": f"org.apache.kafka.common.config.ConfigException: {e}"})
            configs = [{"definition": {"name": k, "type": "STRING", "required": False, "default_value": None, "importance": "LOW", "documentation": "", "group": None, "width": "NONE", "display_name": k, "dependents": [], "order_in_group": -1},
                        "value": {"name": k, "value": v, "recommended_values": [], "errors": [], "visible": True}} for k, v in config.items()]
            return self.reply(200, {"name": unquote(m.group(1)), "error_count": 0, "groups": ["Common"], "configs": configs})
        if path == "/connectors":
            q = parse_qs(url.query)
            if method == "GET":
                with s.lock:
                    items = list(s.connectors.items())
                expand = q.get("expand", [])
                if not expand:
                    return self.reply(200, [n for n, _ in items])
                out = {}
                for n, c in items:
                    e = {}
                    if "status" in expand:
                        e["status"] = status_of(n, c, self.state.worker)
                    if "info" in expand:
                        e["info"] = info_of(n, c)
                    out[n] = e
                return self.reply(200, out)
            if method == "POST":
                b = self.body() or {}
                name, config = b.get("name"), b.get("config") or {}
                initial = (b.get("initial_state") or "RUNNING").upper()
                with s.lock:
                    if name in s.connectors:
                        return self.reply(409, {"error_code": 409, "message": f"Connector {name} already exists"})
                    s.connectors[name] = {"config": {k: str(v) for k, v in config.items()}, "state": initial}
                    c = s.connectors[name]
                return self.reply(201, info_of(name, c))
        m = re.fullmatch(r"/connectors/([^/]+)(/[a-z]+)?", path)
        if m:
            name, sub = unquote(m.group(1)), m.group(2) or ""
            with s.lock:
                c = s.connectors.get(name)
                if c is None and not (method == "PUT" and sub == "/config"):
                    return self.reply(404, {"error_code": 404, "message": f"Connector {name} not found"})
                if sub == "" and method == "GET":
                    return self.reply(200, info_of(name, c))
                if sub == "" and method == "DELETE":
                    del s.connectors[name]
                    return self.reply(204)
                if sub == "/config" and method == "GET":
                    return self.reply(200, dict(c["config"], name=name))
                if sub == "/config" and method == "PUT":
                    config = {k: str(v) for k, v in (self.body() or {}).items()}
                    created = c is None
                    s.connectors[name] = c = {"config": config, "state": "RUNNING" if created else c["state"]}
                    return self.reply(201 if created else 200, info_of(name, c))
                if sub == "/status":
                    return self.reply(200, status_of(name, c, self.state.worker))
                if sub == "/tasks":
                    return self.reply(200, [] if c["state"] == "STOPPED" else [{"id": {"connector": name, "task": 0}, "config": dict(c["config"])}])
                if sub == "/offsets":
                    return self.reply(200, {"offsets": []})
                if sub in ("/pause", "/resume", "/stop") and method == "PUT":
                    c["state"] = {"/pause": "PAUSED", "/resume": "RUNNING", "/stop": "STOPPED"}[sub]
                    return self.reply(202 if sub != "/stop" else 204)
                if sub == "/restart" and method == "POST":
                    q = parse_qs(url.query)
                    if "true" in q.get("includeTasks", []) + q.get("onlyFailed", []):
                        return self.reply(202, status_of(name, c, self.state.worker))
                    return self.reply(204)
        return self.reply(404, {"error_code": 404, "message": f"no such endpoint: {method} {path}"})

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_DELETE(self):
        self.handle_any("DELETE")


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: with more concurrent clients (ClueCDC's
    # reconciler and the direct script make 8 calls at a time) the kernel drops a SYN and the
    # client retries it a whole second later, an artifact no real worker has.
    request_queue_size = 128


def serve(port, latency_ms=0.0, rebalance_rate=0.0):
    """Starts the stand-in in a background thread; returns the server (stop it with `stop`).
    Each server has its own state; `Handler.state` is the last one started (scripts/bench's)."""
    state = State(latency_ms / 1000.0, rebalance_rate)
    Handler.state = state
    handler = type("StandinHandler", (Handler,), {"state": state})
    server = _Server(("127.0.0.1", port), handler)
    # Each stand-in reports its own address as the worker its connectors run on.
    state.worker = f"127.0.0.1:{server.server_address[1]}"
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server):
    server.shutdown()
    server.server_close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, action="append", help="repeat for more stand-ins (default 18999)")
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--rebalance-rate", type=float, default=0.0)
    a = ap.parse_args()
    servers = []
    for port in a.port or [18999]:
        servers.append(serve(port, a.latency_ms, a.rebalance_rate))
        print(f"connect stand-in on http://127.0.0.1:{servers[-1].server_address[1]}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        for srv in servers:
            srv.shutdown()
