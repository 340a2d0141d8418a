#!/usr/bin/env python3
"""Object-storage acceptance demo (seed 000, "Local acceptance").

Proves object-storage deliveries end to end through ClueCDC's JSON API only: PostgreSQL changes
are captured by a ClueCDC pipeline (Debezium) into Kafka and written by a ClueCDC delivery (the
Aiven S3 sink) as gzip JSON Lines objects; the script then reads those objects back through the
S3 API and checks every change. The script touches nothing else: the databases only to make
changes (and to clean up), the bucket only to read objects (and to remove the run's prefix).

What it does, step by step:
  1. starts ClueCDC (or uses a running one, --url/--token), registers the stack's Kafka and
     Connect clusters and points Connect's `cluecdc` config provider at it;
  2. creates a PostgreSQL source connection and a MinIO destination connection (prefix
     demo-object-storage/<run id>/; object keys of about 200 bytes) and requires the
     destination's connection test to pass;
  3. creates a schema with two tables (one with a composite primary key, REPLICA IDENTITY FULL)
     and rows that exist before capture starts (snapshot `r` events);
  4. creates a pipeline over both tables and waits until it runs and its snapshot is in Kafka;
  5. previews the object-storage delivery (recorded in the report), creates it (gzip, 50
     records per file, default key template), and makes inserts, updates and deletes;
  6. once the sink has written them, makes a burst of changes and kills the Connect worker with
     SIGKILL in the middle of it, keeps changing both tables while the worker is down, starts
     the worker again and waits until ClueCDC reports the delivery's connector RUNNING again,
     then makes a last batch of changes;
  7. waits (bounded) until every record of every topic partition is in the bucket, lists and
     gunzips every object under the prefix, and verifies: no offset from Kafka's low to high
     watermark is missing (duplicates are allowed, at-least-once, and counted), each primary
     key's events are exactly the expected sequence (snapshot r, c, u with full before/after,
     d with before followed by a tombstone), source metadata (db, schema, table), and that
     every timestamp lies inside the run window; the delivery's own object listing
     (GET /api/v1/deliveries/{id}/objects) agrees with the bucket;
  8. deletes the delivery and checks that its objects are still there (deleting a delivery never
     deletes objects), deletes the pipeline (dropping its slot), drops the schema, and removes
     the run's prefix from the bucket (--keep-objects leaves it);
  9. writes a sanitized report, artifacts/object-storage-verification.json (it is checked for
     every secret value the script knows before it is written).

Exit status 0 and a last line `demo: 1 passed, 0 failed` on success; non-zero and the reason
otherwise. Cleanup runs in every case, and a killed worker is always started again.

Modes
-----
Native (default; what `scripts/test` runs): the stack of `scripts/stack up`. Endpoints and
fixture credentials come from the environment that `eval "$(scripts/stack env)"` exports (the
script runs `scripts/stack env` itself when KAFKA_BOOTSTRAP is not set). ClueCDC is spawned from
$CLUECDC_BIN (default $CARGO_TARGET_DIR/debug/cluecdc) on 127.0.0.1:0 with a temporary data
directory, an admin and an API token made with `cluecdc user create` / `cluecdc token create`;
it is stopped (SIGTERM) and its directory removed at the end. Connect's config provider is
pointed at it through $CLUECDC_PROVIDER_FILE; the worker is killed through
$STACK_DIR/run/connect.pid and started with `scripts/stack up connect`.

Compose (--compose; untested here: these machines have no container engine): the pair
`docker compose -f compose.yaml -f compose.test.yaml up -d --build --wait` already running, with
ClueCDC at --url (default http://127.0.0.1:8080) and an admin API token in --token or
$CLUECDC_TOKEN (e.g. `docker compose exec cluecdc cluecdc token create --user admin`). It assumes
the addresses and fixture credentials written in compose.yaml / compose.test.yaml: ClueCDC and
Connect reach kafka:9092, http://connect:8083, postgres:5432 and http://minio:9000; the script
itself reaches PostgreSQL at 127.0.0.1:5432 (psql on the host, superuser postgres) and MinIO at
http://127.0.0.1:9000. Connect's provider token is handed over by recreating the connect service
with CLUECDC_PROVIDER_TOKEN set (`docker compose ... up -d --wait connect`); the worker is
killed with `docker compose ... kill -s SIGKILL connect` and started with the same `up` command.
Each of those can be overridden by a flag or the usual environment variable (see --help).

Requirements: Python 3.9+ (standard library only: S3 requests are signed with SigV4 here),
psql. The Kafka topics of the run are left in Kafka (ClueCDC never deletes topics); they are
named after the run id.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import hmac
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S3_SINK = "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector"
RECORDS_PER_FILE = 50
# S3's limit on an object key (UTF-8 bytes), and MinIO's on each '/'-separated segment of one (it
# keeps objects as files). With the default key template a key is prefix + 2 x topic + 68 bytes.
MAX_KEY_BYTES = 1024
MAX_KEY_SEGMENT_BYTES = 255
ADMIN = "demo"
T0 = time.monotonic()


class DemoError(Exception):
    """A failed check or step: the message says what and why."""


class ProviderLock:
    """The stack's one config-provider file points Connect at one ClueCDC at a time; this takes
    the lock file that tests/it's `provider_lock`, the browser tests, the API contract and the
    end-to-end benchmark take (`<file>.lock` holding the holder's pid; a dead holder's lock is
    taken over), so nothing run beside the holder repoints Connect mid-run."""

    def __init__(self, provider_file: str):
        self.file = provider_file + ".lock"
        self.held = False

    def take(self, timeout: float = 600) -> float:
        t0 = time.monotonic()
        while True:
            try:
                fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                self.held = True
                return time.monotonic() - t0
            except FileExistsError:
                try:
                    holder = open(self.file).read().strip()
                except OSError:
                    continue
                if holder and not os.path.exists(f"/proc/{holder}"):
                    try:
                        os.remove(self.file)
                    except OSError:
                        pass
                    continue
                if time.monotonic() - t0 > timeout:
                    raise DemoError(f"the provider lock {self.file} is held by pid {holder or '?'} for more than {timeout:.0f} s")
                time.sleep(0.2)

    def release(self) -> None:
        try:
            if self.held and open(self.file).read().strip() == str(os.getpid()):
                os.remove(self.file)
        except OSError:
            pass
        self.held = False



class Interrupted(BaseException):
    """SIGTERM: leave through the same cleanup as a failure."""


def base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out or "0"


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(value: Any) -> Optional[float]:
    """Epoch seconds from epoch milliseconds (number or digit string) or an RFC 3339 string."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) / 1000.0
    if isinstance(value, str):
        if re.fullmatch(r"-?\d+", value):
            return int(value) / 1000.0
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def wait_for(what: str, timeout: float, probe: Callable[[], Any], interval: float = 2.0) -> Any:
    """Calls probe until it returns something truthy; DemoError after timeout seconds."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except DemoError as e:
            last_error = e
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval)


# ---- settings ---------------------------------------------------------------------------------

@dataclass
class Settings:
    """Where everything is. `*_for_cluecdc` addresses are registered in ClueCDC (Connect uses them
    too); the others are how this script reaches the same servers."""
    compose: bool
    url: Optional[str]
    token: Optional[str]
    cluecdc_bin: str
    kafka_for_cluecdc: str
    connect_for_cluecdc: str
    pg_host_for_cluecdc: str
    pg_port_for_cluecdc: int
    pg_host: str
    pg_port: int
    pg_user: str
    pg_password: str
    pg_db: str
    pg_superuser: str
    pg_superuser_password: str
    s3_endpoint_for_cluecdc: str
    s3_endpoint: str
    s3_region: str
    s3_bucket: str
    s3_access_key: str
    s3_secret_key: str
    provider_file: Optional[str]
    connect_pid_file: Optional[str]
    worker_kill_cmd: Optional[str]
    worker_start_cmd: str
    compose_cmd: str
    kill_worker: bool
    keep_objects: bool
    objects_timeout: float
    report: str


def stack_env() -> dict[str, str]:
    """The native stack's environment, as `scripts/stack env` exports it."""
    out = subprocess.run(["bash", "-c", 'eval "$("$0"/scripts/stack env)" && env -0', REPO], capture_output=True, check=False)
    if out.returncode != 0:
        raise DemoError(f"scripts/stack env failed: {out.stderr.decode(errors='replace').strip()}")
    env = {}
    for item in out.stdout.split(b"\0"):
        k, _, v = item.decode(errors="replace").partition("=")
        if k:
            env[k] = v
    return env


def parse_args(argv: list[str]) -> Settings:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the module docstring (head -n 60 scripts/demo-object-storage.py) for what is checked.")
    p.add_argument("--compose", action="store_true", help="against the docker compose pair instead of the native stack")
    p.add_argument("--url", default=os.environ.get("CLUECDC_URL"), help="a running ClueCDC (default: spawn $CLUECDC_BIN; compose: http://127.0.0.1:8080)")
    p.add_argument("--token", default=None, help="admin API token for --url (better: $CLUECDC_TOKEN, which stays out of ps)")
    p.add_argument("--kafka-bootstrap", help="Kafka bootstrap servers as ClueCDC and Connect reach them")
    p.add_argument("--connect-url", help="Kafka Connect REST URL as ClueCDC reaches it")
    p.add_argument("--pg-host", help="PostgreSQL host as ClueCDC and Connect reach it")
    p.add_argument("--pg-port", type=int, help="PostgreSQL port as ClueCDC and Connect reach it")
    p.add_argument("--s3-endpoint", help="S3 endpoint as ClueCDC and Connect reach it")
    p.add_argument("--s3-local-endpoint", help="S3 endpoint as this script reaches it (default: --s3-endpoint)")
    p.add_argument("--worker-kill-cmd", help="shell command that kills the Connect worker with SIGKILL (native: kill -9 of $STACK_DIR/run/connect.pid)")
    p.add_argument("--worker-start-cmd", help="shell command that starts the Connect worker again (native: scripts/stack up connect)")
    p.add_argument("--no-worker-kill", action="store_true", help="skip the worker kill (for development while others use Connect)")
    p.add_argument("--keep-objects", action="store_true", help="leave the run's objects in the bucket")
    p.add_argument("--objects-timeout", type=float, default=180.0, help="seconds to wait for every change to reach the bucket (default 180)")
    p.add_argument("--report", default=os.path.join(REPO, "artifacts", "object-storage-verification.json"))
    a = p.parse_args(argv)

    if a.compose:
        env = dict(os.environ)
        compose_cmd = env.get("COMPOSE_CMD", "docker compose -f compose.yaml -f compose.test.yaml")
        dflt = {
            "KAFKA_BOOTSTRAP": "kafka:9092", "CONNECT_URL": "http://connect:8083", "PG_HOST": "127.0.0.1", "PG_PORT": "5432",
            "PG_USER": "cdc_user", "PG_PASSWORD": "cdc_user_fixture_pw", "PG_SOURCE_DB": "cdc_source",
            "PG_SUPERUSER": "postgres", "PG_SUPERUSER_PASSWORD": "postgres_fixture_pw",
            "S3_ENDPOINT": "http://minio:9000", "S3_LOCAL_ENDPOINT": "http://127.0.0.1:9000", "S3_REGION": "us-east-1",
            "S3_BUCKET": "cluecdc-test", "S3_ACCESS_KEY": "cluecdc-fixture", "S3_SECRET_KEY": "cluecdc-fixture-secret-0123456789",
        }
        for k, v in dflt.items():
            env.setdefault(k, v)
        pg_for_cluecdc = ("postgres", 5432)
    else:
        env = dict(os.environ) if os.environ.get("KAFKA_BOOTSTRAP") else {**os.environ, **stack_env()}
        compose_cmd = ""
        pg_for_cluecdc = (env.get("PG_HOST", ""), int(env.get("PG_PORT", "0") or 0))

    def need(name: str) -> str:
        v = env.get(name)
        if not v:
            raise DemoError(f"{name} is not set: run `eval \"$(scripts/stack env)\"` (native) or pass the endpoints as flags")
        return v

    url = a.url or ("http://127.0.0.1:8080" if a.compose else None)
    token = a.token or os.environ.get("CLUECDC_TOKEN")
    if url and not token:
        raise DemoError("--url needs an admin API token: --token or $CLUECDC_TOKEN")
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cluecdc", "target")
    stack_dir = env.get("STACK_DIR", os.path.join(REPO, ".stack"))
    s3_endpoint = a.s3_endpoint or need("S3_ENDPOINT")
    if a.compose:
        kill_cmd = a.worker_kill_cmd or f"{compose_cmd} kill -s SIGKILL connect"
        start_cmd = a.worker_start_cmd or f"{compose_cmd} up -d --wait connect"
    else:
        kill_cmd = a.worker_kill_cmd
        start_cmd = a.worker_start_cmd or shlex.quote(os.path.join(REPO, "scripts", "stack")) + " up connect"
    return Settings(
        compose=a.compose, url=url.rstrip("/") if url else None, token=token,
        cluecdc_bin=os.environ.get("CLUECDC_BIN") or os.path.join(target, "debug", "cluecdc"),
        kafka_for_cluecdc=a.kafka_bootstrap or need("KAFKA_BOOTSTRAP"),
        connect_for_cluecdc=a.connect_url or need("CONNECT_URL"),
        pg_host_for_cluecdc=a.pg_host or pg_for_cluecdc[0], pg_port_for_cluecdc=a.pg_port or pg_for_cluecdc[1],
        pg_host=need("PG_HOST"), pg_port=int(need("PG_PORT")), pg_user=need("PG_USER"), pg_password=need("PG_PASSWORD"),
        pg_db=need("PG_SOURCE_DB"), pg_superuser=need("PG_SUPERUSER"), pg_superuser_password=need("PG_SUPERUSER_PASSWORD"),
        s3_endpoint_for_cluecdc=s3_endpoint, s3_endpoint=a.s3_local_endpoint or env.get("S3_LOCAL_ENDPOINT") or s3_endpoint,
        s3_region=need("S3_REGION"), s3_bucket=need("S3_BUCKET"), s3_access_key=need("S3_ACCESS_KEY"), s3_secret_key=need("S3_SECRET_KEY"),
        provider_file=None if a.compose else need("CLUECDC_PROVIDER_FILE"),
        connect_pid_file=None if a.compose else os.path.join(stack_dir, "run", "connect.pid"),
        worker_kill_cmd=kill_cmd, worker_start_cmd=start_cmd, compose_cmd=compose_cmd,
        kill_worker=not a.no_worker_kill, keep_objects=a.keep_objects, objects_timeout=a.objects_timeout, report=a.report,
    )


# ---- ClueCDC: the spawned app and the JSON API -------------------------------------------------

class App:
    """`cluecdc serve` on a free loopback port with its own temporary data directory."""

    def __init__(self, binary: str):
        if not os.access(binary, os.X_OK):
            raise DemoError(f"no ClueCDC binary at {binary}: build it (cargo build) or set CLUECDC_BIN")
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="cluecdc-demo-")
        self.data = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "cluecdc.log")
        self.proc: Optional[subprocess.Popen] = None
        self.url = ""

    def start(self) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("CLUECDC_LISTEN", "CLUECDC_DATA_DIR")}
        env["CLUECDC_LOG"] = "info"
        cwd = os.path.join(self.dir, "cwd")
        os.makedirs(cwd)
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen([self.binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", self.data],
                                         cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_file)
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
                raise DemoError(f"cluecdc serve exited with {self.proc.returncode}; its log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise DemoError(f"cluecdc serve printed no URL within 60 s; its log:\n{self.log_tail()}")
            time.sleep(0.1)
        self.url = found[0].rstrip("/")
        return self.url

    def admin_token(self, password: str) -> str:
        out = subprocess.run([self.binary, "user", "create", "--name", ADMIN, "--role", "admin", "--data-dir", self.data],
                             input=password + "\n", capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise DemoError(f"cluecdc user create failed: {out.stderr.strip()}")
        out = subprocess.run([self.binary, "token", "create", "--user", ADMIN, "--label", "object-storage demo", "--data-dir", self.data],
                             capture_output=True, text=True, check=False)
        token = out.stdout.strip()
        if out.returncode != 0 or not token or "\n" in token:
            raise DemoError(f"cluecdc token create failed: {out.stderr.strip()}")
        return token

    def log_tail(self, lines: int = 30) -> str:
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


class ApiError(DemoError):
    def __init__(self, method: str, path: str, status: int, body: Any):
        super().__init__(f"{method} {path} answered {status}: {json.dumps(body)[:2000]}")
        self.status = status
        self.body = body


class Api:
    """ClueCDC's JSON API with a bearer token. Every response text is kept (without the one
    response that shows the provider token) so that the run can check none carries a secret."""

    def __init__(self, url: str, token: str):
        self.url = url
        self.token = token
        self.responses: list[str] = []

    def call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201, 202, 204),
             keep: bool = True, timeout: float = 150) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"authorization": f"Bearer {self.token}", "content-type": "application/json", "accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                status, text = res.status, res.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as e:
            raise DemoError(f"{method} {path}: ClueCDC at {self.url} did not answer: {e}") from None
        if keep:
            self.responses.append(text)
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        if status not in ok:
            raise ApiError(method, path, status, parsed)
        return parsed

    def get(self, path: str, **kw: Any) -> Any:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        return self.call("POST", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.call("DELETE", path, **kw)


# ---- S3 (path-style, SigV4 with the standard library) ----------------------------------------

class S3:
    def __init__(self, endpoint: str, region: str, bucket: str, access_key: str, secret_key: str):
        u = urllib.parse.urlsplit(endpoint)
        self.scheme, self.host, self.base = u.scheme, u.netloc, u.path.rstrip("/")
        self.region, self.bucket, self.access_key, self.secret_key = region, bucket, access_key, secret_key

    @staticmethod
    def _q(s: str, safe: str = "-_.~") -> str:
        return urllib.parse.quote(s, safe=safe)

    def request(self, method: str, key: str = "", query: Optional[dict[str, str]] = None) -> tuple[int, bytes]:
        query = query or {}
        path = self._q(f"{self.base}/{self.bucket}" + (f"/{key}" if key else ""), safe="/-_.~")
        qs = "&".join(f"{self._q(k)}={self._q(v)}" for k, v in sorted(query.items()))
        now = dt.datetime.now(dt.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload_hash = hashlib.sha256(b"").hexdigest()
        headers = {"host": self.host, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
        signed = ";".join(sorted(headers))
        canonical = "\n".join([method, path, qs, "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed, payload_hash])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        k = f"AWS4{self.secret_key}".encode()
        for part in (day, self.region, "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
        auth = f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
        url = f"{self.scheme}://{self.host}{path}" + (f"?{qs}" if qs else "")
        req = urllib.request.Request(url, method=method, headers={**{k: v for k, v in headers.items() if k != "host"}, "authorization": auth})
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                return res.status, res.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (urllib.error.URLError, OSError) as e:
            raise DemoError(f"S3 {method} {self.bucket}/{key}: no answer from {self.scheme}://{self.host}: {e}") from None

    def list(self, prefix: str, page_size: int = 1000) -> list[dict[str, Any]]:
        """Every object under prefix: [{key, size, etag, last_modified}], ListObjectsV2 pages."""
        items, token = [], None
        while True:
            q = {"list-type": "2", "prefix": prefix, "max-keys": str(page_size)}
            if token:
                q["continuation-token"] = token
            status, body = self.request("GET", query=q)
            if status != 200:
                raise DemoError(f"S3 ListObjectsV2 {self.bucket}/{prefix} answered {status}: {body[:300]!r}")
            root = ET.fromstring(body)
            for el in root:
                if el.tag.endswith("Contents"):
                    f = {c.tag.split("}")[-1]: (c.text or "") for c in el}
                    items.append({"key": f["Key"], "size": int(f.get("Size", "0")), "etag": f.get("ETag", ""), "last_modified": f.get("LastModified", "")})
            truncated = next((c.text for c in root if c.tag.endswith("IsTruncated")), "false")
            token = next((c.text for c in root if c.tag.endswith("NextContinuationToken")), None)
            if truncated != "true" or not token:
                return items

    def get(self, key: str) -> bytes:
        status, body = self.request("GET", key)
        if status != 200:
            raise DemoError(f"S3 GetObject {self.bucket}/{key} answered {status}: {body[:300]!r}")
        return body

    def delete(self, key: str) -> None:
        status, body = self.request("DELETE", key)
        if status not in (200, 204):
            raise DemoError(f"S3 DeleteObject {self.bucket}/{key} answered {status}: {body[:300]!r}")


# ---- PostgreSQL through psql -------------------------------------------------------------------

class Postgres:
    def __init__(self, s: Settings):
        self.s = s

    def run(self, sql: str, superuser: bool = False) -> str:
        user, password = (self.s.pg_superuser, self.s.pg_superuser_password) if superuser else (self.s.pg_user, self.s.pg_password)
        env = {**os.environ, "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10", "PGAPPNAME": "cluecdc-demo"}
        cmd = ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", self.s.pg_host, "-p", str(self.s.pg_port), "-U", user, "-d", self.s.pg_db, "-f", "-"]
        try:
            out = subprocess.run(cmd, input=sql, env=env, capture_output=True, text=True, timeout=120, check=False)
        except FileNotFoundError:
            raise DemoError("psql is not installed (apt-get install postgresql-client)") from None
        if out.returncode != 0:
            raise DemoError(f"psql as {user} failed: {out.stderr.strip()}\nSQL: {sql[:500]}")
        return out.stdout.strip()


# ---- the workload and what it must produce ----------------------------------------------------

@dataclass
class Table:
    schema: str
    name: str
    key_cols: tuple[str, ...]
    cols: tuple[str, ...]
    numeric_cols: frozenset[str] = frozenset()
    rows: dict[tuple, dict] = field(default_factory=dict)
    # per primary key: the events Debezium must emit, in order: (op, before, after); a tombstone
    # is ("tombstone", None, None)
    events: dict[tuple, list[tuple[str, Optional[dict], Optional[dict]]]] = field(default_factory=dict)

    @property
    def full(self) -> str:
        return f"{self.schema}.{self.name}"

    def key_of(self, row: dict) -> tuple:
        return tuple(row[c] for c in self.key_cols)

    def literal(self, col: str, v: Any) -> str:
        if isinstance(v, int) or col in self.numeric_cols:
            return str(v)
        return "'" + str(v).replace("'", "''") + "'"

    def where(self, key: tuple) -> str:
        return " AND ".join(f"{c} = {self.literal(c, v)}" for c, v in zip(self.key_cols, key))

    def expected_counts(self) -> dict[str, int]:
        counts = {"r": 0, "c": 0, "u": 0, "d": 0, "tombstone": 0}
        for evs in self.events.values():
            for op, _, _ in evs:
                counts[op] += 1
        return counts


class Workload:
    """Generates SQL for changes and records the change events they must become."""

    def __init__(self, schema: str):
        self.schema = schema
        self.customers = Table(schema, "customers", ("id",), ("id", "name", "tier"))
        self.lines = Table(schema, "lines", ("order_id", "line"), ("order_id", "line", "sku", "qty", "price"), frozenset({"price"}))
        self.tables = [self.customers, self.lines]

    def ddl(self) -> str:
        s = self.schema
        return (f"CREATE SCHEMA {s};\n"
                f"CREATE TABLE {s}.customers (id int PRIMARY KEY, name text NOT NULL, tier text NOT NULL);\n"
                f"CREATE TABLE {s}.lines (order_id int, line int, sku text NOT NULL, qty int NOT NULL, price numeric(10,2) NOT NULL, PRIMARY KEY (order_id, line));\n"
                f"ALTER TABLE {s}.customers REPLICA IDENTITY FULL;\n"
                f"ALTER TABLE {s}.lines REPLICA IDENTITY FULL;\n")

    def insert(self, t: Table, row: dict, snapshot: bool = False) -> str:
        key = t.key_of(row)
        assert key not in t.rows, (t.name, key)
        t.rows[key] = dict(row)
        t.events.setdefault(key, []).append(("r" if snapshot else "c", None, dict(row)))
        cols = ", ".join(t.cols)
        vals = ", ".join(t.literal(c, row[c]) for c in t.cols)
        return f"INSERT INTO {t.full} ({cols}) VALUES ({vals});"

    def update(self, t: Table, key: tuple, **changes: Any) -> str:
        before = t.rows[key]
        after = {**before, **changes}
        t.rows[key] = after
        t.events[key].append(("u", dict(before), dict(after)))
        sets = ", ".join(f"{c} = {t.literal(c, v)}" for c, v in changes.items())
        return f"UPDATE {t.full} SET {sets} WHERE {t.where(key)};"

    def delete(self, t: Table, key: tuple) -> str:
        before = t.rows.pop(key)
        t.events[key].append(("d", dict(before), None))
        t.events[key].append(("tombstone", None, None))
        return f"DELETE FROM {t.full} WHERE {t.where(key)};"

    # -- the batches --------------------------------------------------------------------------

    def customer(self, i: int, tier: str = "basic") -> dict:
        return {"id": i, "name": f"customer {i}", "tier": tier}

    def line(self, order: int, line: int) -> dict:
        return {"order_id": order, "line": line, "sku": f"sku-{order}-{line}", "qty": 1 + (order + line) % 7,
                "price": f"{(order * 13 + line * 7) % 500 + 0.25 * line:.2f}"}

    def snapshot_rows(self) -> list[str]:
        sql = [self.insert(self.customers, self.customer(i, "gold" if i % 3 == 0 else "basic"), snapshot=True) for i in range(1, 21)]
        sql += [self.insert(self.lines, self.line(o, n), snapshot=True) for o in range(100, 108) for n in range(1, 4)]
        return sql

    def batch(self, label: str, new_customers: range, new_orders: range, updates: list[int], deletes: list[int],
              line_updates: list[tuple[int, int]], line_deletes: list[tuple[int, int]]) -> list[str]:
        """Inserts, updates and deletes on both tables; one multi-row transaction among them."""
        c, ln = self.customers, self.lines
        sql = [self.insert(c, self.customer(i)) for i in new_customers]
        sql += [self.insert(ln, self.line(o, n)) for o in new_orders for n in range(1, 3)]
        for i in updates:
            sql.append(self.update(c, (i,), tier=f"{label}-tier", name=f"customer {i} ({label})"))
        for k in line_updates:
            sql.append(self.update(ln, k, qty=ln.rows[k]["qty"] + 10, price=f"{float(ln.rows[k]['price']) + 1.5:.2f}"))
        tx = [self.update(c, (updates[0],), tier=f"{label}-tx")] if updates else []
        tx += [self.delete(ln, k) for k in line_deletes]
        sql.append("BEGIN;\n" + "\n".join(tx) + "\nCOMMIT;")
        sql += [self.delete(c, (i,)) for i in deletes]
        return sql

    def expected_total(self) -> int:
        return sum(len(evs) for t in self.tables for evs in t.events.values())


# ---- reading and checking the objects ---------------------------------------------------------

@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: Any
    object_key: str


class Bucket:
    """Objects under the run's prefix, downloaded once each (keys carry topic, partition and the
    start offset, so a key names one file; a rewritten key is downloaded again)."""

    KEY = re.compile(r"^(?P<topic>[^/]+)/year=(?P<y>\d{4})/month=(?P<m>\d{2})/day=(?P<d>\d{2})/(?P<topic2>[^/]+)-(?P<partition>\d{10})-(?P<start>\d{20})\.jsonl\.gz$")

    def __init__(self, s3: S3, prefix: str):
        self.s3, self.prefix = s3, prefix
        self.cache: dict[str, tuple[str, list[Record]]] = {}
        self.listing: list[dict[str, Any]] = []
        self.problems: list[str] = []

    def refresh(self) -> list[Record]:
        # connection-test probes (.cluecdc/...) are never delivery objects
        self.listing = [o for o in self.s3.list(self.prefix) if not o["key"].startswith(self.prefix + ".cluecdc/")]
        problems, records = [], []
        self.cache = {k: v for k, v in self.cache.items() if k in {o["key"] for o in self.listing}}
        for obj in self.listing:
            key = obj["key"]
            tag = f"{obj['size']}:{obj['etag']}"
            if key not in self.cache or self.cache[key][0] != tag:
                self.cache[key] = (tag, self.read(key))
            recs = self.cache[key][1]
            records.extend(recs)
        for key, (_, recs) in self.cache.items():
            problems.extend(self.check_object(key, key[len(self.prefix):], recs))
        self.problems = problems
        return records

    def read(self, key: str) -> list[Record]:
        rel = key[len(self.prefix):]
        m = self.KEY.match(rel)
        if not m or m["topic"] != m["topic2"]:
            raise DemoError(f"object key {key!r} does not follow <prefix><topic>/year=YYYY/month=MM/day=DD/<topic>-<partition:10>-<start offset:20>.jsonl.gz")
        try:
            text = gzip.decompress(self.s3.get(key)).decode("utf-8")
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise DemoError(f"object {key} is not gzip-compressed UTF-8 text: {e}") from None
        if text.endswith("\n"):
            text = text[:-1]  # tolerated; 3.4.2 writes none after the last line
        records = []
        for n, line in enumerate(text.split("\n"), 1):
            try:
                doc = json.loads(line)
            except ValueError as e:
                raise DemoError(f"{key} line {n} is not JSON: {e}: {line[:200]}") from None
            if not isinstance(doc, dict) or set(doc) != {"key", "value", "offset", "timestamp"}:
                raise DemoError(f"{key} line {n}: expected exactly key, value, offset, timestamp; got {sorted(doc) if isinstance(doc, dict) else type(doc).__name__}")
            records.append(Record(m["topic"], int(m["partition"]), int(doc["offset"]), unwrap(doc["key"]), doc["value"], doc["timestamp"], key))
        return records

    @classmethod
    def check_object(cls, key: str, rel: str, recs: list[Record]) -> list[str]:
        problems = []
        m = cls.KEY.match(rel)
        start = int(m["start"]) if m else -1
        offsets = [r.offset for r in recs]
        if not recs:
            problems.append(f"{key}: no records")
        elif offsets[0] != start:
            problems.append(f"{key}: first offset {offsets[0]} is not the start offset {start} in its name")
        if offsets != sorted(offsets) or len(set(offsets)) != len(offsets):
            problems.append(f"{key}: offsets not strictly increasing")
        if len(recs) > RECORDS_PER_FILE:
            problems.append(f"{key}: {len(recs)} records, more than records_per_file={RECORDS_PER_FILE}")
        return problems


def unwrap(v: Any) -> Any:
    """A JSON-converter schema wrapper {schema, payload} around a key, if any, is taken off."""
    if isinstance(v, dict) and set(v) == {"schema", "payload"}:
        return v["payload"]
    return v


def canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


@dataclass
class Verdict:
    ok: bool
    problems: list[str]
    summary: dict[str, Any]


def verify(records: list[Record], bucket: Bucket, w: Workload, topics: dict[str, Table],
           watermarks: dict[str, list[dict]], window: tuple[float, float], pg_db: str) -> Verdict:
    problems: list[str] = list(bucket.problems)
    distinct: dict[tuple[str, int, int], Record] = {}
    duplicates = 0
    for r in records:
        k = (r.topic, r.partition, r.offset)
        if k in distinct:
            duplicates += 1
            if canon(distinct[k].value) != canon(r.value) or canon(distinct[k].key) != canon(r.key):
                problems.append(f"{r.topic}[{r.partition}]@{r.offset} was written twice with different content")
        else:
            distinct[k] = r

    # every offset from low to high watermark, per topic partition
    missing_total, partitions = 0, []
    for topic, parts in watermarks.items():
        for p in parts:
            have = {o for (t, pp, o) in distinct if t == topic and pp == p["id"]}
            want = set(range(p["low_watermark"], p["high_watermark"]))
            missing = sorted(want - have)
            beyond = sorted(o for o in have if o >= p["high_watermark"])
            missing_total += len(missing)
            partitions.append({"topic": topic, "partition": p["id"], "low_watermark": p["low_watermark"],
                               "high_watermark": p["high_watermark"], "found": len(have & want), "missing": len(missing)})
            if missing:
                problems.append(f"{topic}[{p['id']}]: {len(missing)} offsets missing, e.g. {missing[:10]}")
            if beyond:
                problems.append(f"{topic}[{p['id']}]: offsets {beyond[:5]} beyond the high watermark read before")
    unknown = {r.topic for r in distinct.values()} - set(topics)
    if unknown:
        problems.append(f"objects of topics that are not the pipeline's: {sorted(unknown)}")

    lo, hi = window
    days = {dt.datetime.fromtimestamp(x, dt.timezone.utc).strftime("year=%Y/month=%m/day=%d") for x in (lo, hi)}
    for key in bucket.cache:
        if not any(f"/{day}/" in key for day in days):
            problems.append(f"{key}: its date folders are not the UTC date of the run ({sorted(days)})")
    seen_times: dict[str, list[float]] = {"record timestamp": [], "ts_ms": [], "source.ts_ms": []}
    per_table: dict[str, dict[str, Any]] = {}
    source_replays = 0
    for topic, t in topics.items():
        recs = sorted((r for r in distinct.values() if r.topic == topic), key=lambda r: (r.partition, r.offset))
        found = {"r": 0, "c": 0, "u": 0, "d": 0, "tombstone": 0}
        by_key: dict[str, list[Record]] = {}
        key_partition: dict[str, int] = {}
        for r in recs:
            ck = canon(r.key)
            by_key.setdefault(ck, []).append(r)
            if key_partition.setdefault(ck, r.partition) != r.partition:
                problems.append(f"{topic}: key {ck} in two partitions")
            ts = parse_time(r.timestamp)
            if ts is not None:
                seen_times["record timestamp"].append(ts)
            if ts is None or not lo <= ts <= hi:
                problems.append(f"{topic}@{r.offset}: record timestamp {r.timestamp!r} outside the run window")
            v = r.value
            if v is None:
                found["tombstone"] += 1
                continue
            if not isinstance(v, dict) or not {"op", "before", "after", "source", "ts_ms"} <= set(v):
                problems.append(f"{topic}@{r.offset}: value is not a Debezium envelope: {canon(v)[:200]}")
                continue
            found[v["op"]] = found.get(v["op"], 0) + 1
            if "transaction" not in v:
                problems.append(f"{topic}@{r.offset}: the envelope has no transaction field")
            src = v["source"] or {}
            if (src.get("db"), src.get("schema"), src.get("table")) != (pg_db, t.schema, t.name):
                problems.append(f"{topic}@{r.offset}: source says {src.get('db')}.{src.get('schema')}.{src.get('table')}, not {pg_db}.{t.full}")
            if src.get("connector") != "postgresql" or not isinstance(src.get("lsn"), int):
                problems.append(f"{topic}@{r.offset}: source.connector/lsn missing: {canon(src)[:200]}")
            for name, value in (("ts_ms", v.get("ts_ms")), ("source.ts_ms", src.get("ts_ms"))):
                ts = parse_time(value)
                if ts is not None:
                    seen_times[name].append(ts)
                if ts is None or not lo <= ts <= hi:
                    problems.append(f"{topic}@{r.offset}: {name} {value!r} outside the run window {iso(lo)} .. {iso(hi)}")

        # each key's events, the source's own replays (same change at a new offset) dropped
        expected = {canon(dict(zip(t.key_cols, k))): evs for k, evs in t.events.items()}
        for ck in sorted(set(by_key) - set(expected)):
            problems.append(f"{topic}: events for a key no change made: {ck}")
        changes = {"r": 0, "c": 0, "u": 0, "d": 0, "tombstone": 0}
        replays_before = source_replays
        for ck, want in expected.items():
            got, seen, last_change = [], set(), None
            for r in by_key.get(ck, []):
                if r.value is None:
                    ident = ("tombstone", last_change)
                else:
                    src = r.value.get("source") or {}
                    ident = (r.value.get("op"), src.get("lsn"), src.get("txId"))
                    last_change = ident
                if ident in seen:
                    source_replays += 1
                    continue
                seen.add(ident)
                got.append(("tombstone", None, None) if r.value is None else (r.value.get("op"), r.value.get("before"), r.value.get("after")))
            for op, _, _ in got:
                changes[op] = changes.get(op, 0) + 1
            if got != want:
                problems.append(f"{topic} key {ck}: events differ from the changes made:\n      want {describe(want)}\n      got  {describe(got)}")
        per_table[t.full] = {"topic": topic, "keys": len(expected), "expected": t.expected_counts(), "verified": changes,
                             "records_by_op": found, "source_replays": source_replays - replays_before}

    summary = {
        "objects": len(bucket.cache), "object_bytes": sum(o["size"] for o in bucket.listing),
        "lines_read": sum(len(recs) for _, recs in bucket.cache.values()),
        "distinct_records": len(distinct), "duplicates": duplicates, "source_replays": source_replays,
        "missing": missing_total, "expected_events": w.expected_total(),
        "largest_object_records": max((len(recs) for _, recs in bucket.cache.values()), default=0), "records_per_file": RECORDS_PER_FILE,
        "time_window": {"run": [iso(lo), iso(hi)], **{k: [iso(min(v)), iso(max(v))] for k, v in seen_times.items() if v}},
        "record_timestamp_example": next((r.timestamp for r in distinct.values()), None),
        "partitions": partitions, "tables": per_table,
    }
    return Verdict(not problems, problems, summary)


def describe(events: list) -> str:
    return " ".join(op if op in ("tombstone", "r", "c", "d") else f"u({canon(b)}->{canon(a)})" for op, b, a in events)[:600]


# ---- the run ----------------------------------------------------------------------------------

class Demo:
    def __init__(self, s: Settings):
        self.s = s
        # Names as a user would choose them: object keys of this run are about 200 bytes.
        self.run_id = base36(int(time.time() * 1000) * 100 + os.getpid() % 100)[-8:]
        self.schema = f"demo_{self.run_id}_sales"
        self.slot = f"demo_{self.run_id}"
        self.topic_prefix = f"cluecdc_demo_{self.run_id}"
        self.s3_prefix = f"demo-object-storage/{self.run_id}/"
        self.pg = Postgres(s)
        self.s3 = S3(s.s3_endpoint, s.s3_region, s.s3_bucket, s.s3_access_key, s.s3_secret_key)
        self.w = Workload(self.schema)
        keys = [f"{self.s3_prefix}{t}/year=2026/month=12/day=01/{t}-{0:010d}-{0:020d}.jsonl.gz"
                for t in (f"{self.topic_prefix}.{tb.full}" for tb in self.w.tables)]
        self.longest_key = max(len(k.encode()) for k in keys)
        segment = max(len(p.encode()) for k in keys for p in k.split("/"))
        if self.longest_key > MAX_KEY_BYTES or segment > MAX_KEY_SEGMENT_BYTES:
            raise DemoError(f"object keys of this run would be {self.longest_key} bytes with a {segment}-byte segment; "
                            f"S3 takes {MAX_KEY_BYTES} bytes, MinIO {MAX_KEY_SEGMENT_BYTES} per segment")
        self.app: Optional[App] = None
        self.api: Optional[Api] = None
        self.password = "demo-" + hashlib.sha256(os.urandom(16)).hexdigest()[:24]
        self.provider_token = ""
        self.ids: dict[str, str] = {}
        self.connectors: dict[str, str] = {}  # Connect connector names, for a last-resort cleanup
        self.topics: dict[str, Table] = {}
        self.schema_created = False
        self.worker_down = False
        self.started = time.time()
        self.timings: dict[str, float] = {}
        self.report: dict[str, Any] = {"demo": "object-storage delivery, end to end", "run_id": self.run_id,
                                       "started_at": iso(self.started), "mode": "compose" if s.compose else "native"}

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        log(f"--- {name}")
        t = time.monotonic()
        try:
            return fn()
        finally:
            self.timings[name] = round(time.monotonic() - t, 1)

    # -- steps --------------------------------------------------------------------------------

    def start_app(self) -> None:
        if self.s.url:
            self.api = Api(self.s.url, self.s.token or "")
            self.api.get("/api/v1/connections")
            log(f"using ClueCDC at {self.s.url}")
            return
        self.app = App(self.s.cluecdc_bin)
        url = self.app.start()
        self.api = Api(url, self.app.admin_token(self.password))
        log(f"ClueCDC {url} (data in {self.app.data}); admin {ADMIN!r} and an API token created")

    def register_clusters(self) -> None:
        assert self.api
        kafka = self.api.post("/api/v1/kafka-clusters", {"name": f"stack kafka {self.run_id}", "bootstrap_servers": self.s.kafka_for_cluecdc})
        connect = self.api.post("/api/v1/connect-clusters", {"name": f"stack connect {self.run_id}", "url": self.s.connect_for_cluecdc,
                                                            "kafka_cluster_id": kafka["id"]}, keep=False)
        self.ids["kafka"], self.ids["connect"] = kafka["id"], connect["id"]
        self.provider_token = connect.get("provider_token") or ""
        if not self.provider_token:
            raise DemoError(f"POST /api/v1/connect-clusters returned no provider_token: keys {sorted(connect)}")
        if self.s.compose:
            run_shell(f"{self.s.compose_cmd} up -d --wait connect", env={"CLUECDC_PROVIDER_TOKEN": self.provider_token})
        else:
            assert self.s.provider_file
            tmp = self.s.provider_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"url={self.api.url}\ntoken={self.provider_token}\n")
            os.replace(tmp, self.s.provider_file)
        log(f"Kafka cluster {kafka['id']}, Connect cluster {connect['id']}; Connect's config provider points at this ClueCDC")
        plugins = self.api.get(f"/api/v1/connect-clusters/{connect['id']}/plugins")
        items = plugins.get("items", plugins) if isinstance(plugins, dict) else plugins
        sink = [p for p in items if isinstance(p, dict) and p.get("class") == S3_SINK]
        if not sink:
            raise DemoError(f"the Connect cluster does not list the Aiven S3 sink ({S3_SINK}); plugins: {[p.get('class') for p in items if isinstance(p, dict)]}")
        self.report["plugin"] = {"class": S3_SINK, "version_on_cluster": sink[0].get("version")}

    def create_connections(self) -> None:
        assert self.api
        s = self.s
        src = self.api.post("/api/v1/connections", {
            "name": f"demo pg {self.run_id}", "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
            "settings": {"host": s.pg_host_for_cluecdc, "port": s.pg_port_for_cluecdc, "database": s.pg_db, "user": s.pg_user,
                         "tls_mode": "disable", "slot_name": self.slot, "publication_name": self.slot},
            "secrets": {"password": s.pg_password}})
        dest = self.api.post("/api/v1/connections", {
            "name": f"demo s3 {self.run_id}", "provider": "MINIO", "capabilities": ["DESTINATION"],
            "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "prefix": self.s3_prefix, "endpoint": s.s3_endpoint_for_cluecdc,
                         "path_style": True, "use_ssl": s.s3_endpoint_for_cluecdc.startswith("https:")},
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})
        self.ids["source"], self.ids["destination"] = src["id"], dest["id"]
        for what, conn in (("source", src), ("destination", dest)):
            result = self.api.post(f"/api/v1/connections/{conn['id']}/test", {})
            if not result.get("ok"):
                raise DemoError(f"the {what} connection test failed: {json.dumps(result.get('checks'))}")
            self.report.setdefault("connection_tests", {})[what] = [{"name": c.get("name"), "status": c.get("status")} for c in result.get("checks", [])]
        log(f"connections: source {src['id']}, destination {dest['id']} (prefix {self.s3_prefix}); both tests pass")

    def create_tables(self) -> None:
        self.schema_created = True
        self.pg.run(self.w.ddl() + "\n".join(self.w.snapshot_rows()))
        counts = {t.full: len(t.rows) for t in self.w.tables}
        log(f"schema {self.schema}: {counts} rows before capture starts")

    def create_pipeline(self) -> None:
        assert self.api
        body = {"name": f"demo capture {self.run_id}", "source_connection_id": self.ids["source"], "kafka_cluster_id": self.ids["kafka"],
                "connect_cluster_id": self.ids["connect"], "tables": [t.full for t in self.w.tables], "topic_prefix": self.topic_prefix,
                "partitions": 2, "replication_factor": 1, "options": {"decimal.handling.mode": "string"}}
        p = self.api.post("/api/v1/pipelines", body)
        pipeline = p.get("pipeline", p)
        self.ids["pipeline"] = pipeline["id"]
        self.topics = {f"{self.topic_prefix}.{t.full}": t for t in self.w.tables}
        snapshot = {f"{self.topic_prefix}.{t.full}": len(t.rows) for t in self.w.tables}

        def snapshotted() -> Any:
            d = self.api.get(f"/api/v1/pipelines/{self.ids['pipeline']}")
            c = d.get("connector") or {}
            if c.get("phase") == "FAILED":
                raise DemoError(f"the pipeline's connector FAILED: {c.get('message')} {str(c.get('trace'))[:500]}")
            if c.get("name"):
                self.connectors["pipeline"] = c["name"]
            sizes = {t["name"]: t.get("records", t.get("end_offset", 0)) for t in d.get("topics", [])}
            return c.get("phase") == "RUNNING" and all(sizes.get(k, 0) >= n for k, n in snapshot.items()) and d
        wait_for("the pipeline RUNNING with its snapshot in Kafka", 180, snapshotted)
        log(f"pipeline {pipeline['id']} RUNNING; snapshot in Kafka: {snapshot}")

    def create_delivery(self) -> None:
        assert self.api
        body = {"name": f"demo objects {self.run_id}", "pipeline_id": self.ids["pipeline"], "destination_connection_id": self.ids["destination"],
                "compression": "gzip", "records_per_file": RECORDS_PER_FILE}
        preview = self.api.post("/api/v1/deliveries/preview", body)
        text = json.dumps(preview)
        leaked = [n for n, v in self.named_secrets().items() if v in text]
        if leaked:
            raise DemoError(f"the delivery preview shows secret values: {leaked}")
        if preview.get("validation_errors"):
            raise DemoError(f"the sink plugin refused the previewed config: {json.dumps(preview['validation_errors'])}")
        cfg = preview.get("config", {})
        for k in ("aws.access.key.id", "aws.secret.access.key"):
            if k in cfg and not str(cfg[k]).startswith("${cluecdc:"):
                raise DemoError(f"the preview's {k} is not a ${{cluecdc:...}} reference")
        self.report["preview"] = preview
        self.connectors["delivery"] = preview.get("connector_name", "")
        self.report.setdefault("plugin", {})["version_from_preview"] = find_version(preview)
        d = self.api.post("/api/v1/deliveries", body)
        delivery = d.get("delivery", d)
        self.ids["delivery"] = delivery["id"]
        self.report["delivery"] = {k: delivery.get(k) for k in ("id", "name", "kind", "topics", "options", "consumer_group", "connect_cluster_id")}
        if delivery.get("kind") != "object_storage":
            raise DemoError(f"the delivery's kind is {delivery.get('kind')!r}, not object_storage")
        if sorted(delivery.get("topics") or []) != sorted(self.topics):
            log(f"note: the delivery reads {delivery.get('topics')}; the checks cover {sorted(self.topics)}")
        self.wait_delivery_running(since=None, what="the delivery's connector RUNNING")
        log(f"delivery {delivery['id']} RUNNING ({delivery.get('consumer_group')})")

    def delivery_state(self) -> str:
        """What ClueCDC says about the delivery, for a failure message."""
        try:
            assert self.api
            d = self.api.get(f"/api/v1/deliveries/{self.ids['delivery']}")
        except (DemoError, KeyError, AssertionError) as e:
            return f"(cannot read it: {e})"
        c = d.get("connector") or {}
        return json.dumps({"phase": c.get("phase"), "message": c.get("message"), "tasks": [t.get("state") for t in c.get("tasks") or []],
                           "trace": (c.get("trace") or "")[:300], "lag": d.get("lag"), "lag_secs": d.get("lag_secs"),
                           **{k: v for k, v in d.items() if k.startswith("stall")}})

    def delivery_connector(self) -> dict:
        assert self.api
        d = self.api.get(f"/api/v1/deliveries/{self.ids['delivery']}")
        return d.get("connector") or {}

    def wait_delivery_running(self, since: Optional[float], what: str, timeout: float = 180) -> dict:
        def running() -> Any:
            c = self.delivery_connector()
            if c.get("phase") == "FAILED":
                raise DemoError(f"the delivery's connector FAILED: {c.get('message')} {str(c.get('trace'))[:800]}")
            tasks = c.get("tasks") or []
            fresh = since is None or (parse_time(c.get("observed_at")) or 0) >= since
            return c.get("phase") == "RUNNING" and tasks and all(t.get("state") == "RUNNING" for t in tasks) and fresh and c
        return wait_for(what, timeout, running)

    def change(self, label: str, statements: list[str]) -> None:
        self.pg.run("\n".join(statements))
        log(f"changes '{label}': {len(statements)} statements; {self.w.expected_total()} change events expected in all")

    def watermarks(self) -> dict[str, list[dict]]:
        assert self.api
        out = {}
        for topic in self.topics:
            t = self.api.get(f"/api/v1/kafka-clusters/{self.ids['kafka']}/topics/{urllib.parse.quote(topic, safe='')}")
            out[topic] = [{"id": p["id"], "low_watermark": p["low_watermark"], "high_watermark": p["high_watermark"]} for p in t["partitions"]]
        return out

    def wait_in_bucket(self, bucket: Bucket, what: str, timeout: float, complete: bool) -> Verdict:
        """Polls the bucket until it holds every expected event (complete: and passes every
        check); returns the last verdict, or raises with its problems on timeout."""
        last: list[Optional[Verdict]] = [None]

        def probe() -> Any:
            records = bucket.refresh()
            window = (self.started - 5, time.time() + 5)
            v = verify(records, bucket, self.w, self.topics, self.watermarks(), window, self.s.pg_db)
            last[0] = v
            if complete:
                return v.ok and v
            return v.summary["distinct_records"] - v.summary["source_replays"] >= self.w.expected_total() and v
        try:
            return wait_for(what, timeout, probe, interval=3)
        except DemoError as e:
            v = last[0]
            detail = "\n    ".join(v.problems[:25]) if v else "nothing read"
            raise DemoError(f"{e}\n  the delivery meanwhile: {self.delivery_state()}\n  last check: {json.dumps({k: x for k, x in (v.summary if v else {}).items() if k not in ('partitions', 'tables')})}\n    {detail}") from None

    def kill_worker(self) -> None:
        if self.s.worker_kill_cmd:
            run_shell(self.s.worker_kill_cmd)
        else:
            assert self.s.connect_pid_file
            try:
                with open(self.s.connect_pid_file) as f:
                    pid = int(f.read().strip())
            except (OSError, ValueError) as e:
                raise DemoError(f"cannot read the Connect worker's pid from {self.s.connect_pid_file}: {e}") from None
            os.kill(pid, signal.SIGKILL)
            wait_for(f"the Connect worker (pid {pid}) to die", 30, lambda: not alive(pid), interval=0.2)
        self.worker_down = True

    def start_worker(self) -> None:
        # compose: without the token, `up` would recreate connect with the placeholder one
        run_shell(self.s.worker_start_cmd, env={"CLUECDC_PROVIDER_TOKEN": self.provider_token} if self.s.compose else None)
        self.worker_down = False

    def outage(self, bucket: Bucket) -> None:
        """Kill the worker in the middle of a burst of changes, change more while it is down,
        start it again, wait for RUNNING, change once more."""
        w = self.w
        burst_a = w.batch("burst-a", range(31, 36), range(120, 122), updates=[9, 10], deletes=[12],
                          line_updates=[(103, 1)], line_deletes=[(104, 1)])
        in_kafka_before_kill = w.expected_total()
        burst_b = w.batch("burst-b", range(36, 41), range(122, 124), updates=[11], deletes=[13],
                          line_updates=[(104, 2)], line_deletes=[(103, 2)])
        self.change("burst, first half", burst_a)
        # Kill once the first half is in Kafka: the sink has read it but not yet written it (it
        # writes at the worker's offset commits, every 5 s on the native stack).
        def in_kafka() -> bool:
            return sum(p["high_watermark"] for ps in self.watermarks().values() for p in ps) >= in_kafka_before_kill
        try:
            wait_for("the first half of the burst in Kafka", 30, in_kafka, interval=0.2)
        except DemoError as e:
            log(f"note: {e}; killing the worker anyway")
        kill = threading.Thread(target=self.kill_worker)
        t_kill = time.time()
        kill.start()
        self.change("burst, second half (while the worker dies)", burst_b)
        kill.join()
        killed_at = time.time()
        log(f"Connect worker killed with SIGKILL at {iso(t_kill)}")
        # With the worker dead nothing commits: the sink's lag now is what it had read or was
        # about to read and had not written when it died.
        assert self.api
        lag = self.api.get(f"/api/v1/deliveries/{self.ids['delivery']}").get("lag") or []
        unwritten = sum(p.get("lag", 0) for p in lag)
        log(f"records in Kafka the sink had not committed when it died: {unwritten}")
        down = w.batch("down", range(41, 51), range(124, 128), updates=[14, 15, 31], deletes=[16, 32],
                       line_updates=[(105, 1), (120, 1)], line_deletes=[(105, 2), (121, 2)])
        self.change("while the worker is down", down)
        # What ClueCDC shows while Connect is gone (the reconciler and monitor keep running).
        seen: dict[str, Any] = {}
        def noticed() -> Any:
            c = self.delivery_connector()
            seen.update({"phase": c.get("phase"), "stale": c.get("stale"), "message": c.get("message")})
            return c.get("phase") != "RUNNING" or c.get("stale")
        try:
            wait_for("ClueCDC to notice the outage", 30, noticed, interval=2)
        except DemoError:
            pass
        log(f"ClueCDC during the outage: {seen}")
        t_start = time.time()
        self.start_worker()
        back_up = time.time()
        log(f"Connect worker started again ({back_up - t_start:.1f} s for the start command)")
        self.wait_delivery_running(since=back_up, what="ClueCDC to report the delivery's connector RUNNING again after the restart")
        running_at = time.time()
        log(f"delivery connector RUNNING again, {running_at - t_kill:.1f} s after the kill")
        self.report["worker_kill"] = {
            "signal": "SIGKILL", "killed_at": iso(t_kill), "worker_answering_again_at": iso(back_up), "delivery_running_again_at": iso(running_at),
            "seconds_down": round(back_up - t_kill, 1), "seconds_until_delivery_running": round(running_at - t_kill, 1),
            "records_uncommitted_by_the_sink_at_kill": unwritten,
            "changes_just_before_kill": len(burst_a), "changes_during_kill": len(burst_b), "changes_while_down": len(down),
            "cluecdc_during_outage": seen, "kill_finished_seconds": round(killed_at - t_kill, 1),
        }
        last = w.batch("after", range(51, 61), range(128, 131), updates=[17, 41, 33], deletes=[18, 42],
                       line_updates=[(106, 1), (124, 1)], line_deletes=[(106, 2), (125, 1)])
        self.change("after the restart", last)

    def verify_api_listing(self, bucket: Bucket) -> None:
        assert self.api
        res = self.api.get(f"/api/v1/deliveries/{self.ids['delivery']}/objects?limit=1000")
        items = res.get("items") if isinstance(res, dict) else None
        if not isinstance(items, list) or not items:
            raise DemoError(f"GET /api/v1/deliveries/{{id}}/objects listed nothing: {json.dumps(res)[:500]}")
        in_bucket = {o["key"]: o for o in bucket.listing}
        bad = []
        for it in items:
            if set(it) < {"key", "size", "last_modified"}:
                bad.append(f"fields {sorted(it)}")
                continue
            k = it["key"] if it["key"] in in_bucket else self.s3_prefix + it["key"]
            if k not in in_bucket:
                bad.append(f"{it['key']} is not in the bucket")
            elif in_bucket[k]["size"] != it["size"]:
                bad.append(f"{it['key']}: size {it['size']}, the bucket says {in_bucket[k]['size']}")
        delivery_objects = [k for k in in_bucket if not k.startswith(self.s3_prefix + ".cluecdc/")]
        if len(items) < min(len(delivery_objects), 1000):
            bad.append(f"lists {len(items)} objects, the bucket holds {len(delivery_objects)}")
        if bad:
            raise DemoError("the delivery's object listing disagrees with the bucket: " + "; ".join(bad[:10]))
        self.report["api_object_listing"] = {"items": len(items), "in_bucket": len(delivery_objects), "agrees": True}
        log(f"GET /api/v1/deliveries/{{id}}/objects lists {len(items)} objects, as the bucket does")

    def delete_delivery_keeps_objects(self, bucket: Bucket) -> None:
        assert self.api
        before = {o["key"] for o in bucket.listing}
        self.api.delete(f"/api/v1/deliveries/{self.ids['delivery']}")
        del self.ids["delivery"]
        after = {o["key"] for o in self.s3.list(self.s3_prefix)}
        gone = before - after
        if gone:
            raise DemoError(f"deleting the delivery removed {len(gone)} objects, e.g. {sorted(gone)[:3]}")
        self.report["objects_after_delivery_deleted"] = len(after)
        log(f"delivery deleted; its {len(after)} objects are still in the bucket")

    # -- the whole run -------------------------------------------------------------------------

    def run(self) -> None:
        self.step("start ClueCDC", self.start_app)
        self.step("register clusters", self.register_clusters)
        self.step("connections", self.create_connections)
        self.step("source tables", self.create_tables)
        self.step("pipeline and snapshot", self.create_pipeline)
        self.step("delivery", self.create_delivery)
        bucket = Bucket(self.s3, self.s3_prefix)
        w = self.w
        first = w.batch("first", range(21, 31), range(108, 112), updates=[1, 2, 3, 21], deletes=[4, 5, 22],
                        line_updates=[(100, 1), (101, 2), (108, 1)], line_deletes=[(102, 3), (109, 2)])
        self.step("first changes", lambda: self.change("first", first))
        self.step("first changes in the bucket", lambda: self.wait_in_bucket(bucket, "the snapshot and first changes in the bucket", self.s.objects_timeout, complete=False))
        log(f"the sink wrote {len(bucket.cache)} objects so far")
        if self.s.kill_worker:
            self.step("worker killed mid-stream and restarted", lambda: self.outage(bucket))
        else:
            log("--- worker kill skipped (--no-worker-kill)")
            self.report["worker_kill"] = "skipped (--no-worker-kill)"
            rest = w.batch("more", range(41, 51), range(124, 128), updates=[14, 15], deletes=[16], line_updates=[(105, 1)], line_deletes=[(105, 2)])
            self.change("more", rest)
        verdict = self.step("every change in the bucket", lambda: self.wait_in_bucket(bucket, "every change in the bucket", self.s.objects_timeout, complete=True))
        self.report["verification"] = verdict.summary
        sm = verdict.summary
        log(f"verified: {sm['objects']} objects, {sm['lines_read']} lines, {sm['distinct_records']} distinct records, "
            f"{sm['duplicates']} duplicates, {sm['source_replays']} source replays, {sm['missing']} missing")
        for name, t in sm["tables"].items():
            log(f"  {name}: {t['verified']} (as expected; {t['source_replays']} source replays on top)")
        self.step("object listing through the API", lambda: self.verify_api_listing(bucket))
        self.step("delete the delivery, objects stay", lambda: self.delete_delivery_keeps_objects(bucket))

    def named_secrets(self) -> dict[str, str]:
        s = self.s
        named = {"PG_PASSWORD": s.pg_password, "PG_SUPERUSER_PASSWORD": s.pg_superuser_password, "S3_ACCESS_KEY": s.s3_access_key,
                 "S3_SECRET_KEY": s.s3_secret_key, "admin password": self.password, "provider token": self.provider_token,
                 "API token": self.api.token if self.api else ""}
        return {k: v for k, v in named.items() if v}

    def check_api_responses(self) -> None:
        """No API response (other than the one that shows the provider token once) carried a secret."""
        if not self.api:
            return
        named = {k: v for k, v in self.named_secrets().items() if k != "API token"}
        leaked = sorted({k for text in self.api.responses for k, v in named.items() if v in text})
        self.report["api_responses_checked_for_secrets"] = len(self.api.responses)
        if leaked:
            raise DemoError(f"ClueCDC API responses contained secret values: {leaked}")

    def cleanup(self) -> dict[str, Any]:
        done: dict[str, Any] = {}

        def attempt(what: str, fn: Callable[[], Any]) -> None:
            try:
                fn()
                done[what] = "ok"
            except Exception as e:  # cleanup goes on whatever one step says
                done[what] = f"failed: {e}"
                log(f"cleanup: {what} failed: {e}")
        if self.worker_down:
            attempt("start the Connect worker again", self.start_worker)
        if self.api and "delivery" in self.ids:
            attempt("delete the delivery", lambda: self.api.delete(f"/api/v1/deliveries/{self.ids['delivery']}"))
        if self.api and "pipeline" in self.ids:
            def delete_pipeline() -> None:
                res = self.api.delete(f"/api/v1/pipelines/{self.ids['pipeline']}?drop_slot=true")
                done["slot_dropped_by_cluecdc"] = (res or {}).get("slot_dropped")
            attempt("delete the pipeline", delete_pipeline)
        # Last resort, native stack only: ClueCDC could not remove a connector, and a spawned
        # ClueCDC is about to stop, so nothing else would; remove it from Connect directly.
        for kind, what in (("delivery", "delete the delivery"), ("pipeline", "delete the pipeline")):
            name = self.connectors.get(kind)
            if name and done.get(what, "ok") != "ok" and not self.s.compose:
                attempt(f"remove connector {name} from Connect", lambda name=name: urllib.request.urlopen(
                    urllib.request.Request(f"{self.s.connect_for_cluecdc}/connectors/{name}", method="DELETE"), timeout=30))
        if self.schema_created:
            attempt("drop the slot, publication and schema", self.drop_fixture)
        if not self.s.keep_objects:
            attempt("remove the run's objects", self.remove_objects)
        else:
            done["objects kept"] = self.s3_prefix
        return done

    def drop_fixture(self) -> None:
        q = self.slot.replace("'", "''")

        def slot_gone() -> bool:
            self.pg.run(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '{q}' AND NOT active;", superuser=True)
            return self.pg.run(f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{q}';", superuser=True) == "0"
        wait_for(f"the replication slot {self.slot} to be dropped", 30, slot_gone, interval=1)
        self.pg.run(f"DROP PUBLICATION IF EXISTS {self.slot}; DROP SCHEMA IF EXISTS {self.schema} CASCADE;", superuser=True)

    def remove_objects(self) -> None:
        keys = [o["key"] for o in self.s3.list(self.s3_prefix)]
        for k in keys:
            self.s3.delete(k)
        left = self.s3.list(self.s3_prefix)
        if left:
            raise DemoError(f"{len(left)} objects left under {self.s3_prefix}")
        log(f"removed {len(keys)} objects under {self.s3_bucket_prefix()}")

    def s3_bucket_prefix(self) -> str:
        return f"s3://{self.s.s3_bucket}/{self.s3_prefix}"

    def write_report(self, result: str, error: Optional[str]) -> str:
        r = self.report
        r.update({"result": result, "finished_at": utc_now(), "timings_seconds": {**self.timings, "total": round(time.monotonic() - T0, 1)},
                  "stack": {"kafka_bootstrap": self.s.kafka_for_cluecdc, "connect_url": self.s.connect_for_cluecdc,
                            "s3_endpoint": self.s.s3_endpoint_for_cluecdc, "bucket": self.s.s3_bucket, "prefix": self.s3_prefix,
                            "objects_removed_at_end": not self.s.keep_objects},
                  "source": {"database": self.s.pg_db, "schema": self.schema, "tables": [t.full for t in self.w.tables], "slot": self.slot},
                  "ids": dict(self.ids)})
        if error:
            r["error"] = error
        text = json.dumps(r, indent=2, sort_keys=False, default=str) + "\n"
        leaked = [name for name, v in self.named_secrets().items() if v in text]
        if leaked:
            raise DemoError(f"refusing to write the report: it contains {leaked}")
        os.makedirs(os.path.dirname(self.s.report), exist_ok=True)
        tmp = self.s.report + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.s.report)
        return self.s.report


def find_version(preview: Any) -> Optional[str]:
    """The plugin version the preview reports, wherever it puts it."""
    if isinstance(preview, dict):
        for k in ("plugin_version", "version"):
            if isinstance(preview.get(k), str):
                return preview[k]
        for k, v in preview.items():
            if "plugin" in k and isinstance(v, dict) and isinstance(v.get("version"), str):
                return v["version"]
    return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def run_shell(cmd: str, env: Optional[dict[str, str]] = None, timeout: float = 300) -> None:
    out = subprocess.run(cmd, shell=True, cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise DemoError(f"`{cmd}` failed ({out.returncode}): {(out.stdout + out.stderr).strip()[-1500:]}")


def main(argv: Optional[list[str]] = None) -> int:
    def on_term(signum: int, frame: Any) -> None:
        raise Interrupted(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    try:
        demo = Demo(parse_args(sys.argv[1:] if argv is None else argv))
    except DemoError as e:
        print(f"demo: {e}", file=sys.stderr)
        print("demo: 0 passed, 1 failed")
        return 2
    log(f"object-storage demo, run {demo.run_id}: schema {demo.schema}, topics {demo.topic_prefix}.*, objects under {demo.s3_bucket_prefix()} (keys up to {demo.longest_key} bytes)")
    error: Optional[str] = None
    try:
        demo.run()
        demo.check_api_responses()
    except (DemoError, Interrupted, KeyboardInterrupt) as e:
        error = str(e) or type(e).__name__
    except Exception:  # a bug in the demo itself: show where
        error = traceback.format_exc()
    finally:
        if error:
            log(f"FAILED: {error}")
            if demo.app:
                log("ClueCDC log, warnings and errors (last lines):\n" + demo.app.log_tail())
        log("--- cleanup")
        demo.report["cleanup"] = demo.cleanup()
        if demo.app:
            demo.app.stop()
    try:
        path = demo.write_report("failed" if error else "passed", error)
        log(f"report: {os.path.relpath(path, REPO) if path.startswith(REPO) else path}")
    except (DemoError, OSError) as e:
        log(f"FAILED: {e}")
        error = error or str(e)
    total = time.monotonic() - T0
    if error:
        print(f"demo: object-storage delivery FAILED after {total:.0f} s")
        print("demo: 0 passed, 1 failed")
        return 1
    v = demo.report.get("verification", {})
    kill = "worker killed and recovered" if demo.s.kill_worker else "no worker kill (--no-worker-kill)"
    print(f"demo: object-storage delivery verified in {total:.0f} s: {v.get('objects')} objects, {v.get('distinct_records')} records "
          f"({v.get('duplicates')} duplicates, {v.get('missing')} missing), {kill}")
    print("demo: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
