#!/usr/bin/env python3
"""The API contract layer (issue 31), run by tests/contract/run.sh with the layer's venv.

Checks, in order, each timed and summarised at the end (exit 1 if any failed):
  drift       `$CLUECDC_BIN openapi` is byte for byte the committed docs/openapi.json;
  valid       that document, and the one a live instance serves at /api/v1/openapi.json, validate
              as OpenAPI 3.1 (openapi-spec-validator);
  instance    a fresh ClueCDC (own temporary data directory, free port, an admin and two API
              tokens) on the native stack, populated: the stack's Kafka and Connect registered,
              a PostgreSQL source and a MinIO destination connection, one pipeline, one delivery;
  client      a Python client generated from the served document by openapi-generator-cli
              (`python`), installed into the venv, drives tests/contract/client_demo.py;
  fuzz        schemathesis runs every operation of the served document with the admin token;
  cleanup     always: every pipeline, delivery, replication and hand-made connector the
              instance holds is deleted through its API and waited for until Connect no longer
              lists it; topics it created, its slot, publication, schema and objects go too.

The instance and the stack are reached with the object-storage demo's own classes
(scripts/demo-object-storage.py: App, Api, Postgres, S3, settings from `scripts/stack env`).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import html
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(REPO, "docs", "openapi.json")
ARTIFACTS = os.path.join(REPO, "artifacts", "contract")
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,negative_data_rejection"

# Operations not fuzzed, each because it acts by name on shared state outside the throwaway
# instance, and schemathesis learns names from the instance's own responses (it does: the first
# runs sent the real Connect cluster's id back in DELETE /api/v1/connect-clusters/{id}), where
# they belong to the shared servers and to other test layers:
EXCLUDED = [
    # drops a topic of the shared Kafka (any topic the broker has, by name + ?confirm=<name>);
    # `connect-configs`/`connect-offsets` gone would break the shared Connect worker
    ("DELETE", "/api/v1/kafka-clusters/{id}/topics/{name}"),
    # drops a replication slot of the shared PostgreSQL that no pipeline of *this* instance owns,
    # which is every other test layer's slot
    ("DELETE", "/api/v1/connections/{id}/slots/{name}"),
    # issues a new provider token for the Connect cluster record, which the shared Connect
    # worker's config provider file still holds the old one of: from then on the worker cannot
    # resolve this instance's secrets and every later validate answers 502 (rightly: a provider
    # failure), which the fuzz would then report against unrelated operations
    ("POST", "/api/v1/connect-clusters/{id}/provider-token"),
]


def load_demo() -> Any:
    spec = importlib.util.spec_from_file_location("demo_object_storage", os.path.join(REPO, "scripts", "demo-object-storage.py"))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["demo_object_storage"] = mod
    spec.loader.exec_module(mod)
    return mod


demo = load_demo()
log = demo.log
Failure = demo.DemoError


def validate_31(doc: Any, where: str) -> str:
    """openapi-spec-validator, OpenAPI 3.1 explicitly (not whatever the document claims)."""
    from openapi_spec_validator import OpenAPIV31SpecValidator
    if not isinstance(doc, dict) or not str(doc.get("openapi", "")).startswith("3.1"):
        raise Failure(f"{where}: `openapi` is {doc.get('openapi') if isinstance(doc, dict) else type(doc).__name__!r}, not 3.1.x")
    errors = list(OpenAPIV31SpecValidator(doc).iter_errors())
    if errors:
        shown = "\n".join(f"  - {'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message[:300]}" for e in errors[:20])
        raise Failure(f"{where} is not a valid OpenAPI 3.1 document ({len(errors)} errors):\n{shown}")
    ops = sum(1 for item in doc.get("paths", {}).values() for m in item if m in ("get", "put", "post", "patch", "delete"))
    return f"{ops} operations, valid OpenAPI {doc['openapi']}"


class Contract:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.s = demo.parse_args(["--no-worker-kill"])
        self.run_id = demo.base36(int(time.time() * 1000) * 100 + os.getpid() % 100)[-8:]
        self.slot = f"contract_{self.run_id}"
        self.schema = f"contract_{self.run_id}"
        self.s3_prefix = f"contract/{self.run_id}/"
        self.results: list[tuple[str, bool, float, str]] = []
        self.app: Optional[Any] = None
        self.api: Optional[Any] = None  # the fuzzer's token
        self.admin: Optional[Any] = None  # cleanup's own token, never given to the fuzzer
        self.ids: dict[str, str] = {}
        self.lock = demo.ProviderLock(self.s.provider_file)
        self.pg = demo.Postgres(self.s)
        self.s3 = demo.S3(self.s.s3_endpoint, self.s.s3_region, self.s.s3_bucket, self.s.s3_access_key, self.s.s3_secret_key)
        self.schema_created = False
        self.served: Optional[dict] = None
        self.work = tempfile.mkdtemp(prefix="cluecdc-contract-")
        self.fuzz_summary = ""
        self.protected: list[str] = []

    def step(self, name: str, fn: Callable[[], str]) -> bool:
        log(f"--- {name}")
        t = time.monotonic()
        try:
            note = fn() or ""
            ok = True
        except Failure as e:
            note, ok = str(e), False
        except Exception as e:  # a bug here is a failed step with its trace, never a pass
            note, ok = f"{type(e).__name__}: {e}\n{traceback.format_exc()}", False
        took = time.monotonic() - t
        self.results.append((name, ok, took, note))
        log(f"{'ok' if ok else 'FAILED'} {name} ({took:.1f} s){': ' + note if note else ''}")
        return ok

    # -- b, c: the committed document ------------------------------------------------------------

    def drift(self) -> str:
        out = subprocess.run([self.s.cluecdc_bin, "openapi"], capture_output=True, check=False)
        if out.returncode != 0:
            raise Failure(f"`{self.s.cluecdc_bin} openapi` exited {out.returncode}: {out.stderr.decode(errors='replace').strip()[-500:]}")
        try:
            committed = open(DOC, "rb").read()
        except OSError as e:
            raise Failure(f"{os.path.relpath(DOC, REPO)} is missing ({e.strerror}): create it with `cargo run -- openapi > docs/openapi.json` and commit it") from None
        if committed != out.stdout:
            diff = difflib.unified_diff(committed.decode(errors="replace").splitlines(), out.stdout.decode(errors="replace").splitlines(),
                                        "docs/openapi.json (committed)", "cluecdc openapi (this build)", lineterm="", n=1)
            shown = "\n".join(list(diff)[:60])
            raise Failure("docs/openapi.json differs from what this build generates; the API changed without its document. "
                          f"Regenerate it with `cargo run -- openapi > docs/openapi.json`, review and commit the change.\n{shown}")
        return f"docs/openapi.json is what `cluecdc openapi` prints ({len(committed)} bytes)"

    def valid_committed(self) -> str:
        return validate_31(json.load(open(DOC)), "docs/openapi.json")

    # -- d: the populated instance ---------------------------------------------------------------

    def instance(self) -> str:
        waited = self.lock.take()
        self.app = demo.App(self.s.cluecdc_bin)
        url = self.app.start()
        password = "contract-" + hashlib.sha256(os.urandom(16)).hexdigest()[:24]
        self.admin = demo.Api(url, self.app.admin_token(password))
        # The fuzzer has its own admin, whose user and token it is never let to disable or revoke
        # (contract_hooks.py); cleanup gets a third one, made after the fuzzer stopped.
        self.api = demo.Api(url, cli_admin(self.app, "fuzzer"))
        self.protected = [u["id"] for u in self.admin.get("/api/v1/users")["items"] if u["name"] == "fuzzer"]
        self.protected += [t["id"] for t in self.admin.get("/api/v1/tokens")["items"] if t["user_name"] == "fuzzer"]
        if len(self.protected) != 2:
            raise Failure(f"expected the fuzzer's user and token in GET /api/v1/users and /api/v1/tokens, found ids {self.protected}")
        s = self.s
        kafka = self.admin.post("/api/v1/kafka-clusters", {"name": f"contract kafka {self.run_id}", "bootstrap_servers": s.kafka_for_cluecdc})
        connect = self.admin.post("/api/v1/connect-clusters", {"name": f"contract connect {self.run_id}", "url": s.connect_for_cluecdc,
                                                               "kafka_cluster_id": kafka["id"]}, keep=False)
        self.ids.update(kafka=kafka["id"], connect=connect["id"])
        tmp = s.provider_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"url={url}\ntoken={connect['provider_token']}\n")
        os.replace(tmp, s.provider_file)
        self.schema_created = True
        self.pg.run(f"CREATE SCHEMA {self.schema}; CREATE TABLE {self.schema}.items (id int PRIMARY KEY, name text NOT NULL);"
                    f"CREATE TABLE {self.schema}.notes (id int PRIMARY KEY, body text);"
                    f"INSERT INTO {self.schema}.items VALUES (1, 'apple'), (2, 'pear');")
        src = self.admin.post("/api/v1/connections", {
            "name": f"contract pg {self.run_id}", "provider": "POSTGRESQL", "capabilities": ["SOURCE"],
            "settings": {"host": s.pg_host_for_cluecdc, "port": s.pg_port_for_cluecdc, "database": s.pg_db, "user": s.pg_user,
                         "tls_mode": "disable", "slot_name": self.slot, "publication_name": self.slot},
            "secrets": {"password": s.pg_password}})
        dest = self.admin.post("/api/v1/connections", {
            "name": f"contract s3 {self.run_id}", "provider": "MINIO", "capabilities": ["DESTINATION"],
            "settings": {"bucket": s.s3_bucket, "region": s.s3_region, "prefix": self.s3_prefix, "endpoint": s.s3_endpoint_for_cluecdc,
                         "path_style": True, "use_ssl": s.s3_endpoint_for_cluecdc.startswith("https:")},
            "secrets": {"access_key_id": s.s3_access_key, "secret_access_key": s.s3_secret_key}})
        self.ids.update(source=src["id"], destination=dest["id"])
        p = self.admin.post("/api/v1/pipelines", {
            "name": f"contract capture {self.run_id}", "source_connection_id": src["id"], "kafka_cluster_id": kafka["id"],
            "connect_cluster_id": connect["id"], "tables": [f"{self.schema}.items"], "topic_prefix": f"contract_{self.run_id}",
            "partitions": 1, "replication_factor": 1})
        self.ids["pipeline"] = p.get("pipeline", p)["id"]
        d = self.admin.post("/api/v1/deliveries", {
            "name": f"contract objects {self.run_id}", "pipeline_id": self.ids["pipeline"], "destination_connection_id": dest["id"],
            "compression": "gzip", "records_per_file": 10})
        self.ids["delivery"] = d.get("delivery", d)["id"]

        def running() -> Any:
            states = []
            for kind, id_ in (("pipelines", self.ids["pipeline"]), ("deliveries", self.ids["delivery"])):
                one = self.admin.get(f"/api/v1/{kind}/{id_}")
                states.append((one.get("connector") or {}).get("phase"))
            return all(x == "RUNNING" for x in states) and states
        try:
            demo.wait_for("the pipeline's and the delivery's connectors RUNNING", 120, running)
            phase = "both connectors RUNNING"
        except Failure as e:
            raise Failure(f"populated, but {e}") from None
        return (f"{url}, provider lock after {waited:.1f} s; kafka {kafka['id']}, connect {connect['id']}, "
                f"connections {src['id']} {dest['id']}, pipeline {self.ids['pipeline']}, delivery {self.ids['delivery']}; {phase}")

    def valid_served(self) -> str:
        assert self.admin
        doc = self.admin.get("/api/v1/openapi.json")
        self.served = doc
        note = validate_31(doc, "GET /api/v1/openapi.json")
        same = json.dumps(doc, sort_keys=True) == json.dumps(json.load(open(DOC)), sort_keys=True)
        if not same:
            raise Failure("the served document is valid but is not docs/openapi.json (the server and `cluecdc openapi` disagree)")
        return note + ", the same as docs/openapi.json"

    # -- f: a generated client -------------------------------------------------------------------

    def client(self) -> str:
        assert self.admin and self.served is not None
        text = json.dumps(self.served, sort_keys=True).encode()
        spec_file = os.path.join(self.work, "openapi.json")
        open(spec_file, "wb").write(text)
        # Generated once per document and generator version, in the tools cache.
        key = hashlib.sha256(text + os.path.basename(self.a.generator_jar).encode()).hexdigest()[:16]
        cache = os.path.join(os.path.dirname(self.a.generator_jar), "contract-client")
        out_dir = os.path.join(cache, key)
        t = time.monotonic()
        if not os.path.isfile(os.path.join(out_dir, ".complete")):
            shutil.rmtree(cache, ignore_errors=True)  # older documents' clients
            os.makedirs(cache)
            gen = subprocess.run(["java", "-jar", self.a.generator_jar, "generate", "-g", "python", "-i", spec_file, "-o", out_dir,
                                  "--package-name", "cluecdc_client", "--additional-properties=projectName=cluecdc-client,packageVersion=0.0.0"],
                                 capture_output=True, text=True, check=False)
            if gen.returncode != 0:
                raise Failure(f"openapi-generator-cli generate -g python failed ({gen.returncode}):\n{(gen.stdout + gen.stderr)[-3000:]}")
            open(os.path.join(out_dir, ".complete"), "w").close()
            how = "generated"
        else:
            how = "cached"
        t_gen = time.monotonic() - t
        t = time.monotonic()
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-build-isolation",
                              "--no-index", "--force-reinstall", out_dir], capture_output=True, text=True, check=False)
        if pip.returncode != 0:
            raise Failure(f"installing the generated client failed:\n{(pip.stdout + pip.stderr)[-3000:]}")
        t_pip = time.monotonic() - t
        env = {**os.environ, "CLUECDC_URL": self.admin.url, "CLUECDC_TOKEN": self.admin.token, "CLIENT_DIR": out_dir,
               "CONTRACT_KAFKA_ID": self.ids["kafka"], "CONTRACT_CONNECT_ID": self.ids["connect"],
               "CONTRACT_DESTINATION_ID": self.ids["destination"], "CONTRACT_SCHEMA": self.schema, "CONTRACT_RUN": self.run_id,
               "PG_HOST_FOR_CLUECDC": self.s.pg_host_for_cluecdc, "PG_PORT_FOR_CLUECDC": str(self.s.pg_port_for_cluecdc)}
        t = time.monotonic()
        run = subprocess.run([sys.executable, os.path.join(HERE, "client_demo.py")], env=env, capture_output=True, text=True, check=False, timeout=600)
        sys.stdout.write(run.stdout)
        sys.stdout.write(run.stderr)
        if run.returncode != 0:
            lines = [ln for ln in (run.stdout + run.stderr).strip().splitlines() if "FAILED" in ln] or (run.stdout + run.stderr).strip().splitlines()[-1:]
            raise Failure(f"client_demo.py failed ({run.returncode}; client {how} in {t_gen:.1f} s, installed in {t_pip:.1f} s): {lines[0][:400] if lines else ''}")
        return f"client {how} in {t_gen:.1f} s, installed in {t_pip:.1f} s, client_demo.py passed in {time.monotonic() - t:.1f} s"

    # -- e: schemathesis -------------------------------------------------------------------------

    def fuzz(self) -> str:
        assert self.api
        ops = [(m.upper(), p) for p, item in (self.served or {}).get("paths", {}).items() for m in item
               if m in ("get", "put", "post", "patch", "delete")]
        excluded = [op for op in EXCLUDED if op in ops]
        # Enough examples that each operation gets its share of the time budget, and a cap that
        # keeps the whole run within it: the coverage phase runs first for every operation.
        os.makedirs(ARTIFACTS, exist_ok=True)
        full_log = os.path.join(ARTIFACTS, "schemathesis.txt")
        junit = os.path.join(ARTIFACTS, "schemathesis-junit.xml")
        # The document as the instance served it (valid_served fetched it), from a file: loaded from
        # its URL, schemathesis leaves out the operation serving it, GET /api/v1/openapi.json.
        served = os.path.join(self.work, "served-openapi.json")
        with open(served, "w") as f:
            json.dump(self.served, f)
        config = os.path.join(self.work, "schemathesis.toml")
        # The token reaches schemathesis through its config's environment substitution, not argv.
        open(config, "w").write('[headers]\nAuthorization = "Bearer ${CLUECDC_FUZZ_TOKEN}"\n')
        # One worker: with two, schemathesis' threads once hit "SystemError: AST constructor
        # recursion depth mismatch" in its coverage phase (the ast module's recursion counter in
        # this machine's CPython 3.11.7 is not safe across threads), a Runtime Error that failed the
        # run with every check passing.
        cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", config, "--no-color", "run", served, "--url", self.api.url,
               "--checks", CHECKS, "--phases", "examples,coverage,fuzzing", "--max-examples", str(self.a.max_examples),
               "--max-time", str(self.a.max_time), "--workers", "1", "--request-timeout", "30", "--output-truncate", "true",
               "--report", "junit", "--report-junit-path", junit]
        if self.a.seed:
            cmd += ["--seed", str(self.a.seed)]
        for method, path in excluded:
            cmd += ["--exclude-name", f"{method} {path}"]  # the operation's label, exactly
        env = {**os.environ, "CLUECDC_FUZZ_TOKEN": self.api.token, "SCHEMATHESIS_HOOKS": "contract_hooks", "PYTHONPATH": HERE,
               "CONTRACT_PROTECTED_IDS": " ".join(self.protected),
               "CONTRACT_FIXTURE_IDS": " ".join(self.ids.values())}
        t = time.monotonic()
        # In the temporary directory: schemathesis keeps a cache (.schemathesis/) in its cwd.
        proc = subprocess.run(cmd, env=env, cwd=self.work, capture_output=True, text=True, check=False, timeout=self.a.max_time + 300)
        took = time.monotonic() - t
        output = proc.stdout + proc.stderr
        with open(full_log, "w") as f:
            f.write(output)
        # Which operations ran: the JUnit report has one test case per operation, named by label.
        try:
            ran = set(re.findall(r'<testcase[^>]* name="([A-Z]+ /[^"]*)"', open(junit, encoding="utf-8").read()))
        except OSError:
            ran = set()
        ran = {html.unescape(r) for r in ran}
        want = {f"{m} {p}" for m, p in ops} - {f"{m} {p}" for m, p in excluded}
        missing = sorted(want - ran)
        cases = re.search(r"(\d+) generated", output)
        self.fuzz_summary = (f"schemathesis: {len(want & ran)} operations tested of {len(ops)} in the document ({len(excluded)} excluded), "
                             f"{cases[1] if cases else '?'} test cases, {took:.0f} s")
        print(self.fuzz_summary, flush=True)
        failures = group_failures(output)
        if failures:
            print(f"failures by operation ({len(failures)}; the full output is {os.path.relpath(full_log, REPO)}):")
            for line in failures:
                print("  " + line)
        for line in output.splitlines():
            if line.startswith("Seed:") or "Authentication failed" in line or "mostly rejected" in line:
                print(line.strip())
        if ran & {f"{m} {p}" for m, p in excluded}:
            raise Failure(f"{self.fuzz_summary}: an excluded operation ran ({sorted(ran & {f'{m} {p}' for m, p in excluded})})")
        if proc.returncode != 0:
            raise Failure(f"{self.fuzz_summary}; schemathesis exited {proc.returncode}: {len(failures)} failing operation/check pairs above"
                          + (f"; not run: {missing}" if missing else ""))
        if missing:
            raise Failure(f"{self.fuzz_summary}: not run: {missing}")
        return self.fuzz_summary

    # -- cleanup ---------------------------------------------------------------------------------

    def cleanup(self) -> str:
        notes: list[str] = []
        problems: list[str] = []
        api = self.admin
        if self.app and self.app.proc and self.app.proc.poll() is None:
            try:
                api = demo.Api(self.app.url, cli_admin(self.app, f"cleanup-{self.run_id}"))
            except Failure as e:
                problems.append(f"no cleanup admin ({e}); using the setup's")
        if api:
            names = self.cleanup_api(api, notes, problems)
            self.wait_connectors_gone(api, names, problems)
            self.sweep_connect(api, notes, problems)
            self.cleanup_topics(api, notes, problems)
        if self.schema_created:
            try:
                self.drop_fixture()
                notes.append(f"slot, publication and schema {self.schema} dropped")
            except Failure as e:
                problems.append(str(e))
        try:
            keys = [o["key"] for o in self.s3.list(self.s3_prefix)]
            for k in keys:
                self.s3.delete(k)
            notes.append(f"{len(keys)} objects removed under {self.s3_prefix}")
        except Failure as e:
            problems.append(str(e))
        if problems:
            raise Failure("; ".join(problems) + " (done: " + "; ".join(notes) + ")")
        return "; ".join(notes)

    def cleanup_api(self, api: Any, notes: list[str], problems: list[str]) -> set[str]:
        """Deletes through the API everything that puts connectors into the shared Connect; the
        names of the connectors the instance manages on it, to wait for.

        The fuzzer may have changed or deleted the instance's Connect cluster record (deleting it
        is refused while any connector of the instance uses it) and registered the same URL
        again under another id: every record with the shared URL counts, and the original one
        is pointed back at it, so that the reconciler can remove what it created there."""
        shared: set[str] = set()
        cid = self.ids.get("connect")
        try:
            for c in api.get("/api/v1/connect-clusters?limit=500").get("items", []):
                if c.get("id") == cid and c.get("url") != self.s.connect_for_cluecdc:
                    api.call("PATCH", f"/api/v1/connect-clusters/{cid}", {"url": self.s.connect_for_cluecdc})
                    notes.append("the Connect cluster's url was set back")
                    shared.add(cid)
                elif c.get("url") == self.s.connect_for_cluecdc:
                    shared.add(c["id"])
        except Failure as e:
            problems.append(f"the Connect cluster records: {e}")
        if cid not in shared:
            notes.append("the fuzzer deleted the Connect cluster record (so no connector of the instance was left on it)")
        names: set[str] = set()
        try:
            for c in api.get("/api/v1/connectors?limit=500").get("items", []):
                if c.get("connect_cluster_id") in shared:
                    names.add(c["name"])
        except Failure as e:
            problems.append(f"GET /api/v1/connectors: {e}")
        counts: dict[str, int] = {}
        for kind, query in (("deliveries", ""), ("replications", ""), ("pipelines", "?drop_slot=true")):
            try:
                items = api.get(f"/api/v1/{kind}?limit=500").get("items", [])
            except Failure as e:
                problems.append(f"GET /api/v1/{kind}: {e}")
                continue
            for it in items:
                try:
                    api.delete(f"/api/v1/{kind}/{it['id']}{query}", ok=(200, 202, 204, 404))
                    counts[kind] = counts.get(kind, 0) + 1
                except Failure as e:
                    problems.append(str(e))
        try:
            for c in api.get("/api/v1/connectors?limit=500").get("items", []):
                if c.get("owner_kind") == "manual" and c.get("desired_state") != "deleted":
                    api.delete(f"/api/v1/connectors/{c['id']}", ok=(200, 202, 204, 404))
                    counts["connectors"] = counts.get("connectors", 0) + 1
        except Failure as e:
            problems.append(f"deleting hand-made connectors: {e}")
        api.post("/api/v1/reconciler/pass", {}, ok=(200, 202, 204, 409))
        notes.append("deleted " + (", ".join(f"{n} {k}" for k, n in counts.items()) or "nothing"))
        return names

    def wait_connectors_gone(self, api: Any, names: set[str], problems: list[str]) -> None:
        def live() -> set[str]:
            with urllib.request.urlopen(f"{self.s.connect_for_cluecdc}/connectors", timeout=30) as r:
                return set(json.load(r)) & names

        def gone() -> bool:
            left = live()
            if left:
                api.post("/api/v1/reconciler/pass", {}, ok=(200, 202, 204, 409))
            return not left
        try:
            demo.wait_for(f"Connect to no longer list {sorted(names)}", 120, gone, interval=2)
        except Failure as e:
            left = live()
            # Last resort: the instance is about to stop and nothing else would remove them.
            for n in left:
                urllib.request.urlopen(urllib.request.Request(f"{self.s.connect_for_cluecdc}/connectors/{n}", method="DELETE"), timeout=30)
            problems.append(f"{e}; removed {sorted(left)} from Connect directly")

    def sweep_connect(self, api: Any, notes: list[str], problems: list[str]) -> None:
        """Belt and braces: no connector in the shared Connect refers to a secret of this
        instance (a connector of a pipeline or delivery refers to its connections' secret_ref,
        and a connection in use cannot be deleted, so every such ref is still listed)."""
        try:
            refs = {c["secret_ref"] for c in api.get("/api/v1/connections?limit=500").get("items", []) if c.get("secret_ref")}
            with urllib.request.urlopen(f"{self.s.connect_for_cluecdc}/connectors?expand=info", timeout=30) as r:
                live = json.load(r)
        except (Failure, OSError, ValueError) as e:
            problems.append(f"sweeping Connect for this instance's connectors: {e}")
            return
        left = sorted(name for name, v in live.items()
                      if any(f"${{cluecdc:{ref}:" in str(val) for ref in refs for val in ((v.get("info") or {}).get("config") or {}).values()))
        for n in left:
            urllib.request.urlopen(urllib.request.Request(f"{self.s.connect_for_cluecdc}/connectors/{n}", method="DELETE"), timeout=30)
        if left:
            problems.append(f"connectors of this instance were still in Connect after its deletions: {left} (removed from Connect directly)")
        else:
            notes.append(f"no connector in Connect refers to this instance's {len(refs)} secret refs")

    def cleanup_topics(self, api: Any, notes: list[str], problems: list[str]) -> None:
        """Topics the instance created by hand (the fuzzer's POST .../topics): the audit names
        them; they are deleted through the API, named."""
        kid = self.ids.get("kafka")
        if not kid:
            return
        try:
            rows = api.get("/api/v1/audit?action=topic.create&limit=500").get("items", [])
        except Failure as e:
            problems.append(f"GET /api/v1/audit: {e}")
            return
        created = sorted({r.get("target_id") for r in rows if r.get("action") == "topic.create" and r.get("outcome") == "success" and r.get("target_id")})
        for name in created:
            q = urllib.parse.quote(name, safe="")
            try:
                api.delete(f"/api/v1/kafka-clusters/{kid}/topics/{q}?confirm={q}", ok=(200, 202, 204, 404))
            except Failure as e:
                problems.append(f"topic {name}: {e}")
        notes.append(f"{len(created)} hand-made topics deleted")

    def drop_fixture(self) -> None:
        """The populated pipeline's slot and the client demo's (`<slot>_c`), their publications,
        and the schema."""
        slots = f"'{self.slot}', '{self.slot}_c'"

        def slots_gone() -> bool:
            self.pg.run(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name IN ({slots}) AND NOT active;", superuser=True)
            return self.pg.run(f"SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ({slots});", superuser=True) == "0"
        demo.wait_for(f"the replication slots {slots} to be dropped", 60, slots_gone, interval=1)
        self.pg.run(f"DROP PUBLICATION IF EXISTS {self.slot}, {self.slot}_c; DROP SCHEMA IF EXISTS {self.schema} CASCADE;", superuser=True)

    def close(self) -> None:
        if self.app:
            failed = any(not ok for _, ok, _, _ in self.results)
            if failed:
                log("ClueCDC log, warnings and errors (last lines):\n" + self.app.log_tail(40))
            self.app.stop()
        self.lock.release()
        shutil.rmtree(self.work, ignore_errors=True)


def cli_admin(app: Any, name: str) -> str:
    """`cluecdc user create` (an admin) and `cluecdc token create` on the instance's data
    directory, as the demo does for its own admin; the token."""
    password = hashlib.sha256(os.urandom(16)).hexdigest()[:24]
    out = subprocess.run([app.binary, "user", "create", "--name", name, "--role", "admin", "--data-dir", app.data],
                         input=password + "\n", capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise Failure(f"cluecdc user create --name {name} failed: {out.stderr.strip()}")
    out = subprocess.run([app.binary, "token", "create", "--user", name, "--label", f"contract {name}", "--data-dir", app.data],
                         capture_output=True, text=True, check=False)
    token = out.stdout.strip()
    if out.returncode != 0 or not token or "\n" in token:
        raise Failure(f"cluecdc token create --user {name} failed: {out.stderr.strip()}")
    return token


def group_failures(output: str) -> list[str]:
    """One line per (operation, check, status) from schemathesis's FAILURES section, with the
    first response body seen and a curl line that reproduces it (token filtered)."""
    section = output.split("= FAILURES =", 1)[-1].split("= WARNINGS =", 1)[0].split("= SUMMARY =", 1)[0] if "= FAILURES =" in output else ""
    seen: dict[tuple[str, str, str], str] = {}
    op = ""
    checks: list[str] = []
    status = ""
    body = ""
    for raw in section.splitlines():
        line = raw.strip()
        m = re.match(r"^_+ (\S+ \S+) _+$", line)
        if m:
            op = m[1]
            continue
        if re.match(r"^\d+\. Test Case ID", line):
            checks, status, body = [], "", ""
            continue
        m = re.match(r"^- (ST\d+ .+)$", line)
        if m:
            checks.append(m[1])
            continue
        m = re.match(r"^\[(\d+)\]", line)
        if m:
            status = m[1]
            continue
        if line.startswith("`{") and not body:
            body = line.strip("`")[:160]
            continue
        if line.startswith("curl "):
            for c in checks:
                seen.setdefault((op, c, status), f"{body} | {line[:220]}")
    return [f"{op}: {c} -> {st}: {info}" for (op, c, st), info in sorted(seen.items())]


def main() -> int:
    p = argparse.ArgumentParser(description="ClueCDC API contract checks against a live instance on the native stack")
    p.add_argument("--generator-jar", required=True)
    p.add_argument("--max-examples", type=int, default=int(os.environ.get("CONTRACT_MAX_EXAMPLES", "20")))
    p.add_argument("--max-time", type=int, default=int(os.environ.get("CONTRACT_MAX_TIME", "120")))
    p.add_argument("--seed", type=int, default=int(os.environ["CONTRACT_SEED"]) if os.environ.get("CONTRACT_SEED") else None)
    a = p.parse_args()
    c = Contract(a)
    t0 = time.monotonic()
    try:
        c.step("drift: docs/openapi.json is what `cluecdc openapi` prints", c.drift)
        c.step("valid: docs/openapi.json is OpenAPI 3.1", c.valid_committed)
        if c.step("instance: a populated ClueCDC on the stack", c.instance):
            c.step("valid: the served /api/v1/openapi.json is OpenAPI 3.1", c.valid_served)
            if c.served is not None:
                c.step("client: a generated Python client creates and reads back", c.client)
                c.step("fuzz: schemathesis, every operation", c.fuzz)
    finally:
        c.step("cleanup: the shared Connect, Kafka, PostgreSQL and bucket", c.cleanup)
        c.close()
    print("\n== API contract summary")
    for name, ok, took, note in c.results:
        print(f"{'PASS' if ok else 'FAIL'} {took:6.1f} s  {name}" + (f"\n        {note.splitlines()[0][:300]}" if note and not ok else ""))
    if c.fuzz_summary:
        print(c.fuzz_summary)
    failed = [n for n, ok, _, _ in c.results if not ok]
    print(f"API contract: {len(c.results) - len(failed)} passed, {len(failed)} failed in {time.monotonic() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
