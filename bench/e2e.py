#!/usr/bin/env python3
"""End to end on the real stack: PostgreSQL commit -> row in a JDBC destination, and PostgreSQL
commit -> object in the bucket, next to the freshness ClueCDC reports for the same window.

    python3 bench/e2e.py [--quick]      prints the figures as JSON (progress on stderr)
    import e2e; e2e.run(quick)          what scripts/bench calls; returns the same dict

Drives ClueCDC only through its HTTP API, against the native stack of `scripts/stack up` (its
endpoints come from `scripts/stack env`):
  1. starts `cluecdc serve` ($CLUECDC_BIN, default $CARGO_TARGET_DIR or
     ~/.cache/cluecdc/target, debug/cluecdc) on a temporary data directory, with an admin and an
     API token from `cluecdc user create` / `cluecdc token create`; registers the stack's Kafka
     and Connect and points Connect's `cluecdc` config provider at it (the previous provider
     file is put back at the end);
  2. creates a PostgreSQL source connection, a PostgreSQL destination connection (the stack's
     destination database) and an S3 destination connection (the stack's bucket, a prefix of
     this run), a schema with one small table `t (id, committed_ms, note)`, a pipeline over it
     with heartbeats on (ClueCDC's freshness comes from them), a database delivery (Debezium
     JDBC sink) and an object-storage delivery (Aiven S3 sink, gzip JSON Lines);
  3. waits until all three connectors run and a warm-up row is in both destinations (so that
     neither table creation nor the sinks' first consumer-group join is measured);
  4. makes K single-row commits (full: 200, quick: 20) 150 ms apart; each row carries its commit
     time (`committed_ms`, the source's clock at the insert, same host as this script); while
     they flow, polls the destination table every 50 ms and the bucket every 250 ms (new
     objects read once each) and reads both deliveries' reported freshness from the API
     (`freshness_secs` of GET /api/v1/deliveries/{id}) every 0.5 s;
  5. reports commit -> row and commit -> object p50/p95 (ms) and, per delivery, the largest
     absolute difference between the freshness ClueCDC reported and the truth at the same
     moment (s). The truth is what freshness means, measured with the benchmark's own rows:
     the age of the newest committed row visible in that destination at the sample time. It is
     only defined while commits still flow, so samples from the first measured row's arrival
     to the last commit count. ClueCDC's monitor history (/api/v1/samples,
     delivery_freshness_seconds) is compared the same way;
  6. removes everything it made, even on failure: the deliveries, the pipeline (dropping its
     slot) and the connections through the API (so Connect loses the connectors; a last-resort
     DELETE on Connect if ClueCDC could not), the run's topics (through the API), the source
     schema, publication and slot, the destination tables, and the objects under the run's
     prefix. The sinks' consumer groups stay in Kafka (ClueCDC has no way to delete them).

The object-storage flush interval is the Connect worker's offset.flush.interval.ms (the Aiven sink
writes at offset commits and ClueCDC refuses a per-delivery flush_interval_ms); it is read from
the stack's worker config and reported as flush_interval_s.

Must not run while anything else uses the same Connect worker's config provider (it repoints it).
Standard library only, plus psql.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parent.parent
ADMIN = "bench"
SPACING_S = 0.150
JDBC_POLL_S = 0.050
S3_POLL_S = 0.250
SAMPLE_EVERY_S = 0.5
KEY_TEMPLATE = "{{topic}}/{{partition}}-{{start_offset}}"  # one flat folder per topic: cheap to poll
GOAL_JDBC_P95_S = 2.0
GOAL_OBJECT_MARGIN_S = 5.0
GOAL_FRESHNESS_S = 2.0


# The demo's clients (ClueCDC's API, S3 with SigV4) and its error types, shared rather than
# copied: both drive the same API and read the same bucket.
_spec = importlib.util.spec_from_file_location(
    "demo_object_storage", Path(__file__).resolve().parent.parent / "scripts/demo-object-storage.py")
_demo = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_demo)
E2EError = _demo.DemoError  # a step failed: the message says which and why
Interrupted = _demo.Interrupted
base36, Api, S3 = _demo.base36, _demo.Api, _demo.S3


def say(msg: str) -> None:
    print(f"e2e: {msg}", file=sys.stderr, flush=True)


def wait_for(what: str, timeout: float, probe: Callable[[], Any], interval: float = 1.0) -> Any:
    """Calls probe until it returns something truthy; E2EError after timeout seconds. A probe
    may raise E2EError to stop at once (a FAILED connector)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise E2EError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def percentile(values: list[float], p: float) -> Optional[float]:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def summary_ms(latencies_s: list[float]) -> dict[str, Any]:
    def r(x: Optional[float]) -> Optional[float]:
        return None if x is None else round(x * 1000.0, 1)
    return {"n": len(latencies_s), "p50": r(percentile(latencies_s, 50)), "p95": r(percentile(latencies_s, 95)),
            "min": r(min(latencies_s) if latencies_s else None), "max": r(max(latencies_s) if latencies_s else None)}


def newest_visible_age(t: float, arrivals: list[tuple[float, float]]) -> Optional[float]:
    """The truth for freshness at time t: t minus the commit time of the newest row visible by
    t. arrivals: (seen_at, committed_at) per row, epoch seconds. None before the first row."""
    newest = None
    for seen, committed in arrivals:
        if seen <= t and (newest is None or committed > newest):
            newest = committed
    return None if newest is None else t - newest


def newest_commit(t: float, arrivals: list[tuple[float, float]]) -> Optional[float]:
    """The commit time of the newest row visible by t (None before the first)."""
    seen = [committed for at, committed in arrivals if at <= t]
    return max(seen) if seen else None


def compare_freshness(samples: list[tuple[float, float, float]], arrivals: list[tuple[float, float]],
                      window: tuple[float, float], poll_s: float) -> dict[str, Any]:
    """samples: (at, reported freshness s, took s: how long the read took). Only samples
    inside window count.

    Two differences per sample. Strict: against the truth at `at`. In the read's window: the
    destination was looked at some moment during the read (ClueCDC lists the bucket, then reads
    its clock), and the benchmark sees a new row or object up to one poll late, so what was
    visible is known only for t' in [at - took, at + poll]; over that range the truth, aged to
    `at`, spans [at - newest(at + poll), at - newest(at - took)], and the difference is the
    distance from the reported figure to that range. At an object-storage flush the truth drops
    by the whole flush interval, so a strict comparison that lands between the data file and the
    heartbeat file appearing is off by that much while both figures are right."""
    rows = []
    for at, reported, took in samples:
        if not window[0] <= at <= window[1]:
            continue
        truth = newest_visible_age(at, arrivals)
        if truth is None:
            continue
        early = newest_commit(at - took, arrivals)
        late = newest_commit(at + poll_s, arrivals)
        lo = at - late if late is not None else truth
        hi = at - early if early is not None else truth
        within = 0.0 if lo <= reported <= hi else min(abs(reported - lo), abs(reported - hi))
        rows.append((at, reported, truth, reported - truth, within))
    if not rows:
        return {"samples": 0, "max_abs_diff_s": None, "max_abs_diff_strict_s": None}
    diffs = [r[3] for r in rows]
    return {
        "samples": len(rows),
        "max_abs_diff_s": round(max(r[4] for r in rows), 2),
        "max_abs_diff_strict_s": round(max(abs(d) for d in diffs), 2),
        "mean_diff_s": round(sum(diffs) / len(diffs), 2),
        "reported_s": [round(min(r[1] for r in rows), 2), round(max(r[1] for r in rows), 2)],
        "truth_s": [round(min(r[2] for r in rows), 2), round(max(r[2] for r in rows), 2)],
    }


def stack_env() -> dict[str, str]:
    out = subprocess.run(["bash", "-c", 'eval "$("$0"/scripts/stack env)" && env -0', str(REPO)], capture_output=True, check=False)
    if out.returncode != 0:
        raise E2EError(f"scripts/stack env failed: {out.stderr.decode(errors='replace').strip()}")
    env = {}
    for item in out.stdout.split(b"\0"):
        k, _, v = item.decode(errors="replace").partition("=")
        if k:
            env[k] = v
    return env


def default_binary() -> str:
    if os.environ.get("CLUECDC_BIN"):
        return os.environ["CLUECDC_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(os.path.expanduser("~/.cache"), "cluecdc", "target")
    return os.path.join(target, "debug", "cluecdc")


def worker_flush_interval_s(stack_dir: str) -> Optional[float]:
    """offset.flush.interval.ms of the stack's Connect worker (Connect's default: 60 s)."""
    path = os.path.join(stack_dir, "connect", "connect-distributed.properties")
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    m = re.search(r"^\s*offset\.flush\.interval\.ms\s*=\s*(\d+)\s*$", text, re.M)
    return int(m.group(1)) / 1000.0 if m else 60.0


# ---- ClueCDC -------------------------------------------------------------------------------------

class App:
    """`cluecdc serve` on a free loopback port with a temporary data directory."""

    def __init__(self, binary: str, env: dict[str, str]):
        if not os.access(binary, os.X_OK):
            raise E2EError(f"no ClueCDC binary at {binary}: build it (cargo build) or set CLUECDC_BIN")
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="cluecdc-e2e-")
        self.data = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "cluecdc.log")
        base = {k: v for k, v in os.environ.items() if not k.startswith("CLUECDC_") or k in ("CLUECDC_BIN",)}
        self.env = {**base, "CLUECDC_LOG": "info", **env}
        self.proc: Optional[subprocess.Popen] = None
        self.url = ""

    def start(self) -> str:
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen([self.binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", self.data],
                                         cwd=self.dir, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_file)
        found: list[str] = []

        def read() -> None:
            assert self.proc and self.proc.stdout
            for raw in self.proc.stdout:
                m = re.search(r"ClueCDC listening on (\S+)", raw.decode(errors="replace"))
                if m and not found:
                    found.append(m.group(1))
        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 60
        while not found:
            if self.proc.poll() is not None:
                raise E2EError(f"cluecdc serve exited with {self.proc.returncode}; its log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise E2EError(f"cluecdc serve printed no URL within 60 s; its log:\n{self.log_tail()}")
            time.sleep(0.05)
        self.url = found[0].rstrip("/")
        return self.url

    def cli(self, *args: str, stdin: Optional[str] = None) -> str:
        out = subprocess.run([self.binary, *args, "--data-dir", self.data], input=stdin, capture_output=True, text=True,
                             env=self.env, check=False, timeout=60)
        if out.returncode != 0:
            raise E2EError(f"cluecdc {args[0]} {args[1] if len(args) > 1 else ''} failed: {out.stderr.strip()[-500:]}")
        return out.stdout.strip()

    def admin_token(self, password: str) -> str:
        self.cli("user", "create", "--name", ADMIN, "--role", "admin", stdin=password + "\n")
        token = self.cli("token", "create", "--user", ADMIN, "--label", "e2e benchmark")
        if not token or "\n" in token:
            raise E2EError("cluecdc token create printed no single token")
        return token

    def log_tail(self, lines: int = 25) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join([ln for ln in f if " INFO " not in ln and "setup_url" not in ln][-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def object_rows(key: str, body: bytes) -> list[dict[str, Any]]:
    """The `after` images in one JSON Lines object (gzip when the key says so)."""
    text = (gzip.decompress(body) if key.endswith(".gz") or body[:2] == b"\x1f\x8b" else body).decode("utf-8")
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        doc = json.loads(line)
        value = doc.get("value") if isinstance(doc, dict) else None
        if isinstance(value, dict) and set(value) == {"schema", "payload"}:
            value = value["payload"]
        after = value.get("after") if isinstance(value, dict) else None
        if isinstance(after, dict):
            rows.append(after)
    return rows


# ---- PostgreSQL: one long-lived psql per database (sub-millisecond round trips) ----------------

class Psql:
    MARK = "__e2e_done__"

    def __init__(self, host: str, port: int, user: str, password: str, db: str):
        env = {**os.environ, "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10", "PGAPPNAME": "cluecdc-e2e"}
        try:
            self.proc = subprocess.Popen(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=0", "-h", host, "-p", str(port), "-U", user, "-d", db],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env)
        except FileNotFoundError:
            raise E2EError("psql is not installed (apt-get install postgresql-client)") from None
        self.what = f"{user}@{db}"
        self.lines: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        self.run("SELECT 1;")

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def run(self, sql: str, timeout: float = 60) -> list[list[str]]:
        """Rows (fields split on |); E2EError with PostgreSQL's message on an error."""
        with self.lock:
            try:
                assert self.proc.stdin
                self.proc.stdin.write(sql.rstrip().rstrip(";") + ";\n\\echo " + self.MARK + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as e:
                raise E2EError(f"psql as {self.what} is gone: {e}") from None
            out, errors = [], []
            deadline = time.monotonic() + timeout
            while True:
                try:
                    line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
                except queue.Empty:
                    raise E2EError(f"psql as {self.what} did not answer within {timeout:.0f} s: {sql[:200]}") from None
                if line is None:
                    raise E2EError(f"psql as {self.what} exited: {' '.join(errors)[-500:]}")
                if line == self.MARK:
                    break
                if re.match(r"^(psql:.*)?(ERROR|FATAL):", line) or errors:
                    errors.append(line)
                elif line:
                    out.append(line.split("|"))
            if errors:
                raise E2EError(f"psql as {self.what}: {' '.join(errors)[:800]}\n  SQL: {sql[:300]}")
            return out

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


# ---- the benchmark ----------------------------------------------------------------------------------

class E2E:
    def __init__(self, quick: bool, binary: Optional[str] = None, heartbeat_ms: Optional[int] = None):
        self.quick = quick
        self.heartbeat_ms = heartbeat_ms
        self.k = 20 if quick else 200
        env = dict(os.environ) if os.environ.get("KAFKA_BOOTSTRAP") and os.environ.get("CLUECDC_PROVIDER_FILE") else {**os.environ, **stack_env()}

        def need(name: str) -> str:
            v = env.get(name)
            if not v:
                raise E2EError(f"{name} is not set: is the stack up (scripts/stack status)? `eval \"$(scripts/stack env)\"` exports it")
            return v
        self.env = {n: need(n) for n in ("KAFKA_BOOTSTRAP", "CONNECT_URL", "PG_HOST", "PG_PORT", "PG_USER", "PG_PASSWORD", "PG_SOURCE_DB",
                                         "PG_DEST_DB", "PG_SUPERUSER", "PG_SUPERUSER_PASSWORD", "S3_ENDPOINT", "S3_REGION", "S3_BUCKET",
                                         "S3_ACCESS_KEY", "S3_SECRET_KEY", "CLUECDC_PROVIDER_FILE")}
        self.connect_url = self.env["CONNECT_URL"].rstrip("/")
        self.stack_dir = env.get("STACK_DIR", str(REPO / ".stack"))
        self.binary = binary or default_binary()
        rid = base36(int(time.time() * 1000) + os.getpid())[-5:]
        self.rid = rid
        self.schema = f"e2e_{rid}"
        self.table = "t"
        self.slot = f"e2e_{rid}"
        self.topic_prefix = f"e2e{rid}"
        self.data_topic = f"{self.topic_prefix}.{self.schema}.{self.table}"
        self.dest_prefix = f"e2e_{rid}_"
        self.dest_table = f"{self.dest_prefix}{self.table}"
        self.s3_prefix = f"e2e-{rid}/"
        self.names = {"pipeline": f"e2e {rid}", "jdbc": f"e2e-{rid}-jdbc", "s3": f"e2e-{rid}-s3"}
        self.s3 = S3(self.env["S3_ENDPOINT"], self.env["S3_REGION"], self.env["S3_BUCKET"], self.env["S3_ACCESS_KEY"], self.env["S3_SECRET_KEY"])
        self.password = "e2e-" + hashlib.sha256(os.urandom(16)).hexdigest()[:24]
        self.app: Optional[App] = None
        self.api: Optional[Api] = None
        self.ids: dict[str, str] = {}
        self.connectors: dict[str, str] = {}
        self.provider_before: Optional[str] = None
        self.provider_written = False
        self.provider_lock: Optional[Any] = None
        self.schema_created = False
        self.src: Optional[Psql] = None
        self.dest: Optional[Psql] = None
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.thread_errors: list[str] = []
        # measurements (epoch seconds)
        self.committed: dict[int, float] = {}   # id -> committed_ms carried by the row / 1000
        self.acked: dict[int, float] = {}       # id -> when the commit returned to the writer
        self.seen_jdbc: dict[int, float] = {}
        self.seen_obj: dict[int, float] = {}
        self.samples: dict[str, list[dict[str, Any]]] = {"jdbc": [], "s3": []}
        self.sampling = threading.Event()
        self.lock = threading.Lock()  # guards committed / seen_* (written by the pollers)
        self.sample_errors = 0
        self.heartbeats: dict[float, float] = {}  # heartbeat source time -> first seen in the destination table
        self.timings: dict[str, float] = {}
        self.notes: list[str] = []
        self.t0 = time.monotonic()

    # -- helpers ---------------------------------------------------------------------------------

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        say(f"{name} ...")
        t = time.monotonic()
        try:
            return fn()
        except E2EError as e:
            raise E2EError(f"{name}: {e}") from None
        finally:
            self.timings[name] = round(time.monotonic() - t, 1)

    def connector(self, kind: str) -> dict[str, Any]:
        assert self.api
        path = f"/api/v1/pipelines/{self.ids['pipeline']}" if kind == "pipeline" else f"/api/v1/deliveries/{self.ids[kind]}"
        c = (self.api.get(path) or {}).get("connector") or {}
        if c.get("name"):
            self.connectors[kind] = c["name"]
        return c

    def running(self, kind: str) -> bool:
        c = self.connector(kind)
        if c.get("phase") == "FAILED" or any(t.get("state") == "FAILED" for t in c.get("tasks") or []):
            raise E2EError(f"the {kind} connector {c.get('name')} FAILED: {c.get('message')} {str(c.get('trace'))[:800]}")
        tasks = c.get("tasks") or []
        return c.get("phase") == "RUNNING" and bool(tasks) and all(t.get("state") == "RUNNING" for t in tasks)

    def state_of(self, kind: str) -> str:
        try:
            assert self.api
            d = self.api.get(f"/api/v1/deliveries/{self.ids[kind]}")
        except (E2EError, KeyError, AssertionError) as e:
            return f"(cannot read it: {e})"
        c = d.get("connector") or {}
        return json.dumps({"phase": c.get("phase"), "message": c.get("message"), "tasks": [t.get("state") for t in c.get("tasks") or []],
                           "trace": (c.get("trace") or "")[:300], "lag": d.get("lag"), "lag_secs": d.get("lag_secs"),
                           "freshness_secs": d.get("freshness_secs")})

    def spawn(self, name: str, fn: Callable[[], None]) -> None:
        def body() -> None:
            try:
                fn()
            except Exception as e:  # reported by the main thread
                self.thread_errors.append(f"{name}: {e}")
        t = threading.Thread(target=body, name=name, daemon=True)
        t.start()
        self.threads.append(t)

    # -- set-up ----------------------------------------------------------------------------------

    def start_app(self) -> None:
        self.app = App(self.binary, {"CLUECDC_RECONCILE_INTERVAL": "1s", "CLUECDC_MONITOR_INTERVAL": "2s", "CLUECDC_LEAK_SCAN_INTERVAL": "1h"})
        url = self.app.start()
        self.api = Api(url, self.app.admin_token(self.password))
        say(f"ClueCDC at {url} ({self.binary})")

    def register_clusters(self) -> None:
        assert self.api
        kafka = self.api.post("/api/v1/kafka-clusters", {"name": f"stack kafka {self.rid}", "bootstrap_servers": self.env["KAFKA_BOOTSTRAP"]})
        connect = self.api.post("/api/v1/connect-clusters", {"name": f"stack connect {self.rid}", "url": self.connect_url, "kafka_cluster_id": kafka["id"]})
        self.ids["kafka"], self.ids["connect"] = kafka["id"], connect["id"]
        token = connect.get("provider_token")
        if not token:
            raise E2EError(f"POST /api/v1/connect-clusters returned no provider_token (keys {sorted(connect)})")
        path = self.env["CLUECDC_PROVIDER_FILE"]
        self.provider_lock = _demo.ProviderLock(path)
        self.provider_lock.take()
        try:
            self.provider_before = Path(path).read_text()
        except OSError:
            self.provider_before = None
        tmp = path + ".e2e.tmp"
        Path(tmp).write_text(f"url={self.api.url}\ntoken={token}\n")
        os.replace(tmp, path)
        self.provider_written = True

    def create_connections(self) -> None:
        assert self.api
        e = self.env
        db = lambda database: {"host": e["PG_HOST"], "port": int(e["PG_PORT"]), "database": database, "user": e["PG_USER"], "tls_mode": "disable"}
        src = self.api.post("/api/v1/connections", {"name": f"e2e pg source {self.rid}", "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
                                                    "settings": {**db(e["PG_SOURCE_DB"]), "slot_name": self.slot, "publication_name": self.slot},
                                                    "secrets": {"password": e["PG_PASSWORD"]}})
        self.ids["source"] = src["id"]
        jdbc = self.api.post("/api/v1/connections", {"name": f"e2e pg dest {self.rid}", "provider": "POSTGRESQL", "capabilities": ["DESTINATION"],
                                                     "settings": db(e["PG_DEST_DB"]), "secrets": {"password": e["PG_PASSWORD"]}})
        self.ids["jdbc_dest"] = jdbc["id"]
        s3 = self.api.post("/api/v1/connections", {"name": f"e2e s3 {self.rid}", "provider": "MINIO", "capabilities": ["DESTINATION"],
                                                   "settings": {"bucket": e["S3_BUCKET"], "region": e["S3_REGION"], "prefix": self.s3_prefix,
                                                                "endpoint": e["S3_ENDPOINT"], "path_style": True, "use_ssl": e["S3_ENDPOINT"].startswith("https:")},
                                                   "secrets": {"access_key_id": e["S3_ACCESS_KEY"], "secret_access_key": e["S3_SECRET_KEY"]}})
        self.ids["s3_dest"] = s3["id"]
        for what in ("source", "jdbc_dest", "s3_dest"):
            result = self.api.post(f"/api/v1/connections/{self.ids[what]}/test", {})
            if not result.get("ok"):
                raise E2EError(f"the {what} connection test failed: {json.dumps(result.get('checks'))[:1000]}")

    def create_table(self) -> None:
        e = self.env
        self.src = Psql(e["PG_HOST"], int(e["PG_PORT"]), e["PG_USER"], e["PG_PASSWORD"], e["PG_SOURCE_DB"])
        self.dest = Psql(e["PG_HOST"], int(e["PG_PORT"]), e["PG_USER"], e["PG_PASSWORD"], e["PG_DEST_DB"])
        self.schema_created = True
        self.src.run(f"CREATE SCHEMA {self.schema}; CREATE TABLE {self.schema}.{self.table} "
                     "(id int PRIMARY KEY, committed_ms bigint NOT NULL, note text NOT NULL)")

    def create_pipeline_and_deliveries(self) -> None:
        assert self.api
        p = self.api.post("/api/v1/pipelines", {"name": self.names["pipeline"], "source_connection_id": self.ids["source"],
                                                "kafka_cluster_id": self.ids["kafka"], "connect_cluster_id": self.ids["connect"],
                                                "tables": [f"{self.schema}.{self.table}"], "topic_prefix": self.topic_prefix, "heartbeat": True,
                                                **({"options": {"heartbeat.interval.ms": str(self.heartbeat_ms)}} if self.heartbeat_ms else {})})
        self.ids["pipeline"] = p.get("pipeline", p)["id"]
        self.connectors["pipeline"] = f"cluecdc-capture-{self.topic_prefix}"
        for kind, body in (("jdbc", {"destination_connection_id": self.ids["jdbc_dest"], "table_name_format": self.dest_prefix + "${source.table}"}),
                           ("s3", {"destination_connection_id": self.ids["s3_dest"], "key_template": KEY_TEMPLATE})):
            d = self.api.post("/api/v1/deliveries", {"name": self.names[kind], "pipeline_id": self.ids["pipeline"], **body})
            d = d.get("delivery", d)
            self.ids[kind] = d["id"]
            topics = d.get("topics") or []
            if self.data_topic not in topics:
                raise E2EError(f"the {kind} delivery reads {topics}, not {self.data_topic}")
            if not any(t.endswith(".cluecdc_heartbeat") for t in topics):
                self.notes.append(f"the {kind} delivery does not carry the heartbeat topic ({topics}): no freshness to compare")

    def wait_running(self) -> None:
        for kind in ("pipeline", "jdbc", "s3"):
            wait_for(f"the {kind} connector and its tasks RUNNING", 180, lambda kind=kind: self.running(kind))
        c = self.connector("pipeline")
        hb = (c.get("config") or {}).get("heartbeat.interval.ms")
        self.heartbeat_interval_s = int(hb) / 1000.0 if hb and str(hb).isdigit() else None

    # -- measuring -------------------------------------------------------------------------------

    def poll_jdbc(self) -> None:
        """Also watches the delivered heartbeat row (to explain the reported freshness)."""
        assert self.dest
        hb_table = f"{self.dest_prefix}cluecdc_heartbeat"

        def query(sql: str) -> list[list[str]]:
            try:
                return self.dest.run(sql, timeout=30)  # type: ignore[union-attr]
            except E2EError as e:
                if "does not exist" not in str(e):
                    raise
                return []
        while not self.stop.is_set():
            t = time.time()  # the query's snapshot is taken after this: a row it returns was visible by then
            rows = query(f"SELECT id, committed_ms FROM {self.dest_table}")
            for r in query(f"SELECT ts_ms FROM {hb_table}"):
                self.heartbeats.setdefault(int(r[0]) / 1000.0, t)
            with self.lock:
                for r in rows:
                    i = int(r[0])
                    if i not in self.seen_jdbc:
                        self.seen_jdbc[i] = t
                        self.committed.setdefault(i, int(r[1]) / 1000.0)
            self.stop.wait(max(0.0, JDBC_POLL_S - (time.time() - t)))

    def poll_bucket(self) -> None:
        done: set[str] = set()
        scope = self.s3_prefix + self.data_topic + "/"
        while not self.stop.is_set():
            t = time.time()  # every object the listing shows existed by then
            for o in self.s3.list(scope):
                if o["key"] in done:
                    continue
                rows = object_rows(o["key"], self.s3.get(o["key"]))
                with self.lock:
                    for after in rows:
                        i = int(after["id"])
                        if i not in self.seen_obj:
                            self.seen_obj[i] = t
                            self.committed.setdefault(i, int(after["committed_ms"]) / 1000.0)
                done.add(o["key"])
            self.stop.wait(max(0.0, S3_POLL_S - (time.time() - t)))

    def sample_freshness(self) -> None:
        assert self.api
        while not self.stop.is_set():
            t = time.time()
            if self.sampling.is_set():
                for kind in ("jdbc", "s3"):
                    a = time.time()
                    try:
                        d = self.api.get(f"/api/v1/deliveries/{self.ids[kind]}", timeout=30)
                    except E2EError as e:
                        self.sample_errors += 1
                        if self.sample_errors == 1:
                            self.notes.append(f"a freshness read failed (later ones are only counted): {e}")
                        continue
                    b = time.time()
                    # ClueCDC reads the newest heartbeat, then its clock, at the end of the
                    # request (after the lag reads): the answer's arrival is when it holds.
                    self.samples[kind].append({"at": b, "took": b - a, "freshness_secs": d.get("freshness_secs"),
                                               "current_as_of": d.get("current_as_of"), "lag_secs": d.get("lag_secs")})
            self.stop.wait(max(0.0, SAMPLE_EVERY_S - (time.time() - t)))

    def check_threads(self) -> None:
        if self.thread_errors:
            raise E2EError("; ".join(self.thread_errors))

    def warm_up(self) -> None:
        """Row 0 in both destinations (the sinks have joined their groups and created the table),
        and a first freshness from each delivery."""
        assert self.src and self.api
        self.src.run(f"INSERT INTO {self.schema}.{self.table} VALUES (0, (extract(epoch from clock_timestamp()) * 1000)::bigint, 'warm-up')")

        def arrived() -> bool:
            self.check_threads()
            with self.lock:
                return 0 in self.seen_jdbc and 0 in self.seen_obj
        try:
            wait_for("the warm-up row in the destination table and in the bucket", 120, arrived, interval=0.2)
        except E2EError as e:
            raise E2EError(f"{e} (table: {0 in self.seen_jdbc}, bucket: {0 in self.seen_obj}); jdbc delivery: {self.state_of('jdbc')}; "
                           f"s3 delivery: {self.state_of('s3')}") from None
        say(f"warm-up row: {1000 * (self.seen_jdbc[0] - self.committed[0]):.0f} ms to the table, "
            f"{1000 * (self.seen_obj[0] - self.committed[0]):.0f} ms to the bucket")
        missing = []

        def fresh() -> bool:
            missing.clear()
            for kind in ("jdbc", "s3"):
                if self.api.get(f"/api/v1/deliveries/{self.ids[kind]}").get("freshness_secs") is None:  # type: ignore[union-attr]
                    missing.append(kind)
            return not missing
        limit = 30 if self.quick else 60
        try:
            wait_for("a first freshness from both deliveries", limit, fresh, interval=1)
        except E2EError:
            self.notes.append(f"no freshness reported within {limit} s by: {', '.join(missing)} (heartbeat interval "
                              f"{self.heartbeat_interval_s} s); comparisons start once it appears")

    def commits(self) -> None:
        assert self.src
        self.sampling.set()
        start = time.monotonic()
        for i in range(1, self.k + 1):
            self.check_threads()
            self.src.run(f"INSERT INTO {self.schema}.{self.table} VALUES ({i}, (extract(epoch from clock_timestamp()) * 1000)::bigint, 'e2e')")
            self.acked[i] = time.time()
            pause = start + i * SPACING_S - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        self.last_commit_at = time.time()

    def drain(self, flush_s: float) -> None:
        want = set(range(1, self.k + 1))

        def all_in() -> bool:
            self.check_threads()
            with self.lock:
                return want <= set(self.seen_jdbc) and want <= set(self.seen_obj)
        try:
            wait_for("every committed row in the destination table and in the bucket", 60 + 2 * flush_s, all_in, interval=0.2)
        except E2EError as e:
            with self.lock:
                counts = len(want & set(self.seen_jdbc)), len(want & set(self.seen_obj))
            raise E2EError(f"{e}: {counts[0]}/{self.k} in the table, {counts[1]}/{self.k} in the bucket; "
                           f"jdbc delivery: {self.state_of('jdbc')}; s3 delivery: {self.state_of('s3')}") from None
        self.sampling.clear()

    def monitor_samples(self, kind: str) -> list[tuple[float, float]]:
        assert self.api
        subject = urllib.parse.quote(self.names[kind], safe="")
        items = self.api.get(f"/api/v1/samples?kind=delivery_freshness_seconds&subject={subject}&limit=10000").get("items") or []
        return [(it["at"] / 1000.0, float(it["value"])) for it in items if it.get("value") is not None]

    def figures(self, flush_s: Optional[float]) -> dict[str, Any]:
        ids = range(1, self.k + 1)
        jdbc = [self.seen_jdbc[i] - self.committed[i] for i in ids]
        obj = [self.seen_obj[i] - self.committed[i] for i in ids]
        skew = [self.acked[i] - self.committed[i] for i in ids]
        arrivals = {"jdbc": [(self.seen_jdbc[i], self.committed[i]) for i in self.seen_jdbc],
                    "s3": [(self.seen_obj[i], self.committed[i]) for i in self.seen_obj]}
        fresh: dict[str, Any] = {}
        for kind, seen in (("jdbc", self.seen_jdbc), ("s3", self.seen_obj)):
            window = (seen[1], self.last_commit_at)
            poll = JDBC_POLL_S if kind == "jdbc" else S3_POLL_S
            api = [(s["at"], float(s["freshness_secs"]), s["took"]) for s in self.samples[kind] if s["freshness_secs"] is not None]
            fresh[kind] = compare_freshness(api, arrivals[kind], window, poll)
            fresh[kind]["api_calls"] = len(self.samples[kind])
            fresh[kind]["api_call_ms_p50"] = round(1000 * (percentile([s["took"] for s in self.samples[kind]], 50) or 0), 1)
            # A monitor sample's moment is its cycle's, not a read the benchmark timed.
            fresh[kind]["monitor"] = compare_freshness([(at, v, 0.0) for at, v in self.monitor_samples(kind)], arrivals[kind], window, poll)
            fresh[kind]["window_s"] = round(max(0.0, window[1] - window[0]), 1)
        jd, ob = summary_ms(jdbc), summary_ms(obj)
        hb = sorted(self.heartbeats.items())
        gaps = [b[0] - a[0] for a, b in zip(hb, hb[1:])]
        fresh["jdbc"]["heartbeats_seen_in_table"] = {
            "count": len(hb), "source_interval_s_p50": round(percentile(gaps, 50), 2) if gaps else None,
            "commit_to_row_ms_p50": round(1000 * (percentile([seen - ts for ts, seen in hb[1:]], 50) or 0), 1) if len(hb) > 1 else None}
        diffs = [fresh[k]["max_abs_diff_s"] for k in ("jdbc", "s3") if fresh[k]["max_abs_diff_s"] is not None]
        worst = max(diffs) if diffs else None
        for k, what in (("jdbc", "database"), ("s3", "object-storage")):
            if fresh[k]["max_abs_diff_s"] is None:
                self.notes.append(f"no {what} freshness sample fell inside its window ({fresh[k]['window_s']} s from the first row's arrival to the last commit): "
                                  "freshness_max_abs_diff_s covers the other delivery only")
        object_goal_s = (flush_s or 60.0) + GOAL_OBJECT_MARGIN_S
        goals = [
            {"figure": "commit -> JDBC row p95", "goal": f"<= {GOAL_JDBC_P95_S:g} s", "measured": f"{jd['p95'] / 1000:.2f} s",
             "met": jd["p95"] <= GOAL_JDBC_P95_S * 1000},
            {"figure": "commit -> object p95", "goal": f"<= flush interval + {GOAL_OBJECT_MARGIN_S:g} s = {object_goal_s:g} s",
             "measured": f"{ob['p95'] / 1000:.2f} s", "met": ob["p95"] <= object_goal_s * 1000},
            {"figure": "reported freshness vs truth, largest |difference|", "goal": f"<= {GOAL_FRESHNESS_S:g} s",
             "measured": "no sample in the window" if worst is None else f"{worst:.2f} s", "met": worst is not None and worst <= GOAL_FRESHNESS_S},
        ]
        return {
            "scenario": "end to end on the real stack: PostgreSQL commit -> JDBC row (PostgreSQL) and -> object (S3), with ClueCDC's reported freshness",
            "quick": self.quick,
            "commits": self.k,
            "spacing_ms": round(SPACING_S * 1000),
            "flush_interval_s": flush_s,
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "jdbc_p50_ms": jd["p50"], "jdbc_p95_ms": jd["p95"],
            "object_p50_ms": ob["p50"], "object_p95_ms": ob["p95"],
            "freshness_max_abs_diff_s": worst,
            "freshness_jdbc_max_abs_diff_s": fresh["jdbc"]["max_abs_diff_s"],
            "freshness_object_max_abs_diff_s": fresh["s3"]["max_abs_diff_s"],
            "freshness_max_abs_diff_strict_s": max((fresh[k]["max_abs_diff_strict_s"] for k in ("jdbc", "s3") if fresh[k]["max_abs_diff_strict_s"] is not None), default=None),
            "commit_to_jdbc_row_ms": jd,
            "commit_to_object_ms": ob,
            "freshness": {
                "truth": "age of the newest committed row visible in the destination at the sample time; samples from the first row's arrival to the last commit; "
                         "max_abs_diff_s: against the truth anywhere in the read's window (see compare_freshness), max_abs_diff_strict_s: at the answer's arrival",
                "reported": "freshness_secs of GET /api/v1/deliveries/{id} (live); monitor: /api/v1/samples delivery_freshness_seconds",
                "jdbc": fresh["jdbc"], "object_storage": fresh["s3"],
            },
            "measurement_resolution_ms": {"jdbc_poll": round(JDBC_POLL_S * 1000), "bucket_poll": round(S3_POLL_S * 1000),
                                          "commit_ack_after_row_time_p50": round(1000 * (percentile(skew, 50) or 0), 1)},
            "goals": goals,
            "notes": self.notes,
        }

    # -- the whole run ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        flush_s = worker_flush_interval_s(self.stack_dir)
        if flush_s is None:
            self.notes.append(f"the Connect worker's config is not under {self.stack_dir}/connect: flush interval unknown (Connect's default is 60 s)")
        self.heartbeat_interval_s: Optional[float] = None
        self.step("start ClueCDC", self.start_app)
        self.step("register Kafka and Connect", self.register_clusters)
        self.step("connections", self.create_connections)
        self.step("source table", self.create_table)
        self.step("pipeline and deliveries", self.create_pipeline_and_deliveries)
        self.step("connectors running", self.wait_running)
        self.spawn("table poller", self.poll_jdbc)
        self.spawn("bucket poller", self.poll_bucket)
        self.spawn("freshness sampler", self.sample_freshness)
        self.step("warm-up", self.warm_up)
        self.step(f"{self.k} commits", self.commits)
        self.step("every row delivered", lambda: self.drain(flush_s or 60.0))
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        self.check_threads()
        return self.step("figures", lambda: self.figures(flush_s))

    def cleanup(self) -> list[str]:
        """Removes everything the run made; returns what could not be removed."""
        problems: list[str] = []
        soft: list[str] = []

        def attempt(what: str, fn: Callable[[], Any], hard: bool = True) -> None:
            try:
                fn()
            except Exception as e:  # cleanup goes on whatever one step says
                (problems if hard else soft).append(f"{what}: {e}")
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        api = self.api
        if api:
            for kind in ("jdbc", "s3"):
                if kind in self.ids:
                    attempt(f"delete the {kind} delivery", lambda kind=kind: api.delete(f"/api/v1/deliveries/{self.ids[kind]}"))
            if "pipeline" in self.ids:
                attempt("delete the pipeline", lambda: api.delete(f"/api/v1/pipelines/{self.ids['pipeline']}?drop_slot=true"))
            if "kafka" in self.ids:
                attempt("delete the run's topics", self.delete_topics, hard=False)
            for what in ("source", "jdbc_dest", "s3_dest"):
                if what in self.ids:
                    attempt(f"delete the {what} connection", lambda what=what: api.delete(f"/api/v1/connections/{self.ids[what]}"), hard=False)
        # Whatever ClueCDC could not remove, straight from Connect: nothing else would.
        attempt("remove the run's connectors from Connect", self.connect_leftovers)
        if self.app:
            attempt("stop ClueCDC", self.app.stop, hard=False)
        if self.provider_written:
            attempt("restore Connect's config provider file", self.restore_provider)
        if self.provider_lock:
            self.provider_lock.release()
        for s in (self.src, self.dest):
            if s:
                s.close()
        if self.schema_created:
            attempt("drop the slot, publication and source schema", self.drop_source)
            attempt("drop the destination tables", self.drop_dest)
        attempt("remove the run's objects", self.remove_objects)
        for s in soft:
            say(f"cleanup (left behind, harmless): {s}")
        return problems

    def delete_topics(self) -> None:
        assert self.api
        res = self.api.get(f"/api/v1/kafka-clusters/{self.ids['kafka']}/topics")
        items = res.get("items", res) if isinstance(res, dict) else res
        names = [t["name"] if isinstance(t, dict) else t for t in items or []]
        mine = [n for n in names if n.startswith(self.topic_prefix + ".") or n == f"__debezium-heartbeat.{self.topic_prefix}"]
        failed = []
        for n in mine:
            q = urllib.parse.quote(n, safe="")
            try:
                self.api.delete(f"/api/v1/kafka-clusters/{self.ids['kafka']}/topics/{q}?confirm={q}")
            except E2EError as e:
                failed.append(f"{n} ({e})")
        if failed:
            raise E2EError(f"topics not deleted: {failed}")

    def connect_leftovers(self) -> None:
        names = {self.connectors.get("pipeline") or f"cluecdc-capture-{self.topic_prefix}"}
        names |= {self.connectors[k] for k in ("jdbc", "s3") if k in self.connectors}
        names |= {f"cluecdc-deliver-{self.names[k]}" for k in ("jdbc", "s3")}

        def live() -> set[str]:
            with urllib.request.urlopen(f"{self.connect_url}/connectors", timeout=30) as r:
                return set(json.loads(r.read())) & names
        left = live()
        for n in left:
            say(f"cleanup: {n} is still in Connect; deleting it there")
            try:
                urllib.request.urlopen(urllib.request.Request(f"{self.connect_url}/connectors/{n}", method="DELETE"), timeout=30)
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    raise
        if left:
            wait_for("Connect to drop the run's connectors", 30, lambda: not live(), interval=1)

    def restore_provider(self) -> None:
        path = self.env["CLUECDC_PROVIDER_FILE"]
        if self.provider_before is None:
            Path(path).unlink(missing_ok=True)
        else:
            tmp = path + ".e2e.tmp"
            Path(tmp).write_text(self.provider_before)
            os.replace(tmp, path)

    def superuser(self, db: str) -> Psql:
        e = self.env
        return Psql(e["PG_HOST"], int(e["PG_PORT"]), e["PG_SUPERUSER"], e["PG_SUPERUSER_PASSWORD"], db)

    def drop_source(self) -> None:
        su = self.superuser(self.env["PG_SOURCE_DB"])
        try:
            def slot_gone() -> bool:
                su.run(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '{self.slot}' AND NOT active")
                return su.run(f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{self.slot}'") == [["0"]]
            wait_for(f"the replication slot {self.slot} to be dropped", 30, slot_gone, interval=1)
            su.run(f"DROP PUBLICATION IF EXISTS {self.slot}; DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        finally:
            su.close()

    def drop_dest(self) -> None:
        su = self.superuser(self.env["PG_DEST_DB"])
        try:
            like = self.dest_prefix.replace("_", "\\_") + "%"  # _ is a LIKE wildcard
            tables = [r[0] for r in su.run(f"SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE '{like}'")]
            for t in tables:
                su.run(f'DROP TABLE IF EXISTS public."{t}"')
        finally:
            su.close()

    def remove_objects(self) -> None:
        for o in self.s3.list(self.s3_prefix):
            self.s3.delete(o["key"])
        left = self.s3.list(self.s3_prefix)
        if left:
            raise E2EError(f"{len(left)} objects left under {self.s3_prefix}")


def run(quick: bool, binary: Optional[str] = None, heartbeat_ms: Optional[int] = None) -> dict[str, Any]:
    """The end-to-end scenario; the figures as a dict (ms / s). Raises E2EError when a step
    fails or something it made could not be removed. heartbeat_ms: an experiment, the
    pipeline's Debezium heartbeat.interval.ms instead of ClueCDC's own (None: ClueCDC's)."""
    b = E2E(quick, binary, heartbeat_ms)
    say(f"run {b.rid}: schema {b.schema}, topics {b.topic_prefix}.*, destination tables {b.dest_prefix}*, objects under s3://{b.env['S3_BUCKET']}/{b.s3_prefix}")
    result: Optional[dict[str, Any]] = None
    error: Optional[BaseException] = None
    try:
        result = b.run()
    except BaseException as e:  # cleaned up below, then raised again
        error = e
        if b.app:
            tail = b.app.log_tail()
            if tail:
                say("ClueCDC log, warnings and errors (last lines):\n" + tail)
    finally:
        say("cleanup ...")
        t = time.monotonic()
        problems = b.cleanup()
        b.timings["cleanup"] = round(time.monotonic() - t, 1)
    if error is not None:
        if problems:
            say("cleanup left behind: " + "; ".join(problems))
        if isinstance(error, E2EError) and problems:
            raise E2EError(f"{error}\n  cleanup left behind: {'; '.join(problems)}") from None
        raise error
    assert result is not None
    result["timings_s"] = {**b.timings, "total": round(time.monotonic() - b.t0, 1)}
    for g in result["goals"]:
        say(f"{g['figure']}: {g['measured']} (goal {g['goal']}) {'met' if g['met'] else 'MISSED'}")
    if problems:
        raise E2EError("the run measured, but its cleanup left behind: " + "; ".join(problems) + "\n  figures: " + json.dumps(result))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 commits instead of 200 (inside scripts/bench --quick)")
    ap.add_argument("--heartbeat-ms", type=int, help="experiment: the pipeline's heartbeat.interval.ms (a pipeline option) instead of ClueCDC's default")
    a = ap.parse_args()

    def on_term(signum: int, frame: Any) -> None:
        raise Interrupted(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    try:
        print(json.dumps(run(a.quick, heartbeat_ms=a.heartbeat_ms), indent=2))
    except (E2EError, Interrupted, KeyboardInterrupt) as e:
        print(f"e2e: FAILED: {e or type(e).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
