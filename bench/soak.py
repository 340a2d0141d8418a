"""`scripts/bench --soak` (issue 34: "no figure grows with uptime"): one `cluecdc serve` (bench/
scale.py's Server, port 0, a temporary data directory removed after) with N connectors on C
Connect stand-ins (bench/connect_standin.py, in this process) at the DEFAULT intervals, and churn
the whole time, one round every TICK_S seconds:

- 2 connectors deleted and 2 new ones created through the connectors API (the count stays N);
- 1 stopped connector resumed and 1 running one stopped (desired-state changes through the API);
- 1 connector's config changed in Connect behind ClueCDC's back (a stand-in PUT); every other
  round that change is then adopted through the API (`POST …/adopt`: the desired config
  changes, generation + 1, an audit row and a drift event), the other rounds the reconciler
  repairs it (a drift event and a config PUT). The connectors API has no PATCH or PUT for a
  connector's config: adopting a live config is the one config change it offers;
- every third round a running connector's task reported FAILED by its stand-in, recovered
  FAIL_FOR_S later: longer than connector_failed's 60 s `for`, so the alert fires and resolves,
  and the reconciler's restarts (connector_restarts rows, audit rows) accumulate.

Every SAMPLE_S seconds: RSS, open files (/proc/PID/fd), the SQLite files (db + -wal + -shm),
process CPU (its CPU-time clock), the churn operations so far, and the reconciler's recorded
passes (also appended to artifacts/bench-soak-samples.jsonl as they are taken). The warm-up is the first retention window (see `warmup`); over the one-minute
blocks after it, least-squares slopes per hour. The process dying, the churn failing or a slope not flat fails
the run (exit non-zero through scripts/bench)."""
import datetime
import json
import os
import random
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import scale
from common import Broken, cpu_s, http, must, rss_kib, say, wait_for

SAMPLE_S = 10.0
TICK_S = 3.0
FAIL_EVERY = 3  # rounds between two failures
FAIL_FOR_S = 90.0  # connector_failed fires after 60 s (its default `for_secs`), checked every 15 s
# src/reconcile/mod.rs keeps the last 1000 reconcile_passes rows. The other tables that grow
# (read from src/ and migrations/) have retentions of days at the defaults: points and series
# (CLUECDC_SAMPLE_RETENTION, 7 d), resolved alerts, connector_restarts and drift_events
# (CLUECDC_HISTORY_RETENTION, 30 d), audit_log (CLUECDC_AUDIT_RETENTION, 365 d). The soak sets
# those three to RETENTION, so that every table reaches its steady state within the run and the
# SQLite file is judged flat like the other figures after the first retention window.
PASSES_KEPT = 1000
RETENTION = "10m"
RETENTION_S = 600
RETENTION_ENV = {k: RETENTION for k in ("CLUECDC_SAMPLE_RETENTION", "CLUECDC_HISTORY_RETENTION", "CLUECDC_AUDIT_RETENTION")}
# A row is dropped by the first monitor cycle (every 15 s) after it is RETENTION old; an audit
# row up to a 24th of the retention later (src/monitor/history.rs `audit_slack`: removals in
# batches).
RETENTION_WINDOW_S = RETENTION_S + RETENTION_S // 24 + 2 * 15
RETENTIONS = {
    "reconcile_passes": "last 1000 rows (src/reconcile/mod.rs)",
    "points, series": f"CLUECDC_SAMPLE_RETENTION, default 7 d, {RETENTION} in the soak (src/config.rs; trim_samples in src/monitor/signals.rs)",
    "resolved alerts, connector_restarts, drift_events": f"CLUECDC_HISTORY_RETENTION, default 30 d, {RETENTION} in the soak (src/monitor/history.rs)",
    "audit_log": f"CLUECDC_AUDIT_RETENTION, default 365 d, {RETENTION} in the soak (src/monitor/history.rs)",
}
# The fit is over one-minute blocks, not the 10-second samples: the server's work comes in
# cycles (a reconcile pass every 10 s, a monitor cycle every 15 s, the offsets round and the leak
# scan every 60 s), which a 10-second sample cuts at a different phase each time, so the samples'
# CPU swings and neighbouring samples are not independent; a minute holds each cycle whole. Each
# block's figure is its mean (CPU: the CPU time over the block), and the slope's standard error
# is widened by the residuals' lag-one autocorrelation (what a slow wander of the machine's other
# load leaves). Flat: the slope is below 2 % of the figure's mean per hour (at that rate the
# figure takes over two days to grow by its own size: the 2-hour soak cannot tell that from an
# allocator settling), or within three standard errors of zero (the blocks show no trend that
# stands out of their own noise). Three, not two: three figures are judged, and at two standard
# errors a run with no trend at all fails about one time in seven; at three, about one in 250.
# A falling figure is not growth. A run whose fit window does not start after the first
# retention window (the test command's 20 minutes: reconcile_passes fills in about 20 min at
# 500 connectors) judges only gross growth, 25 % of the mean per hour: in a 10-minute run on the
# debug build at 2,000 connectors the RSS still rose 15 MiB/h (14 %) over minutes 5-10 (84.7 MiB
# at the start, 107.6 at 5 min, 108.6 at 10), the allocator settling; a leak smaller than that
# needs the long run to be seen. (2026-12-06: a 10-minute run, fitted on its 10-second samples
# over minutes 5-10, failed with CPU +69.8 %/h of a core while its minute means over the whole
# run were flat, +4.4 %/h: 16.6-21.8 % of a core from minute to minute, no ramp.)
BLOCK_S = 60.0
# SHORT_CPU: a short run reports its CPU slope without a verdict. Its CPU moves from minute to
# minute with the machine's other load (the test command runs it beside the integration suite,
# on a debug build): a wander of about 2 points of a core from minute to minute, as in the failed
# run above, leaves a 10-minute window unable to tell 25 % of the mean per hour from noise, and
# on made-up series with that wander (tests/bench/test_soak_judge.py) a verdict at three
# standard errors still called 4-8 % of flat runs growing. The 2-hour soak judges CPU.
FLAT_PCT_PER_H = 2.0
SHORT_PCT_PER_H = 25.0
FLAT_SE = 3.0
MAX_ERROR_SHARE = 0.01  # churn calls answered otherwise than expected, of all churn calls


class Churn(threading.Thread):
    """The churn above, in one thread, until `stop` is set."""

    def __init__(self, app, token, standins, ids, names, running):
        super().__init__(daemon=True)
        self.app, self.token, self.standins, self.ids = app, token, standins, ids
        self.cluster = dict(names)  # name -> stand-in index
        self.running = set(running)
        self.stopped = set(self.cluster) - self.running
        self.failing = {}  # name -> monotonic time it was made to fail
        self.ops = {}
        self.errors = []
        self.calls = 0
        self.next = 0
        self.round = 0
        self.stop = threading.Event()
        self.rng = random.Random(34)
        self.lock = threading.Lock()

    def total(self):
        with self.lock:
            return sum(self.ops.values())

    def _count(self, kind):
        with self.lock:
            self.ops[kind] = self.ops.get(kind, 0) + 1

    def _call(self, kind, method, url, expected, body=None, token=True):
        self.calls += 1
        try:
            status, answer = http(method, url, self.token if token else None, body)
        except OSError as e:
            status, answer = None, str(e)
        if status not in expected:
            self.errors.append(f"{kind}: {method} {url.split('//', 1)[-1]}: HTTP {status} {str(answer)[:200]}")
            return False
        self._count(kind)
        return True

    def _api(self, path):
        return f"{self.app.url}/api/v1/connectors/{path}"

    def _in_connect(self, name, state=None):
        c = self.standins.states[self.cluster[name]].connectors.get(name)
        return c is not None and (state is None or c["state"] == state)

    def _pick(self, pool, cond=lambda n: True):
        choices = sorted(n for n in pool if cond(n))
        return self.rng.choice(choices) if choices else None

    def one_round(self):
        self.round += 1
        # Delete two, create two: the count stays N.
        for _ in range(2):
            victim = self._pick(self.stopped)
            if victim and self._call("delete", "DELETE", self._api(victim), (200,)):
                self.stopped.discard(victim)
                self.cluster.pop(victim)
            name, k = f"churn-{self.next:06d}", self.next % len(self.ids)
            self.next += 1
            if self._call("create", "POST", f"{self.app.url}/api/v1/connectors", (201,), {
                    "name": name, "connect_cluster_id": self.ids[k], "desired_state": "stopped", "config": scale.FILE_SOURCE}):
                self.cluster[name] = k
                self.stopped.add(name)
        # Desired-state changes: one resumed, one stopped (the running pool keeps its size).
        up = self._pick(self.stopped, lambda n: self._in_connect(n, "STOPPED"))
        down = self._pick(self.running, lambda n: n not in self.failing and self._in_connect(n, "RUNNING"))
        if up and down:
            if self._call("resume", "POST", self._api(f"{up}/resume"), (200,)):
                self.stopped.discard(up)
                self.running.add(up)
            if self._call("stop", "POST", self._api(f"{down}/stop"), (200,)):
                self.running.discard(down)
                self.stopped.add(down)
        # A config changed in Connect; adopted through the API every other round.
        d = self._pick(self.stopped, lambda n: self._in_connect(n, "STOPPED"))
        if d:
            url = f"{self.standins.urls[self.cluster[d]]}/connectors/{d}/config"
            if self._call("drift", "PUT", url, (200,), dict(scale.FILE_SOURCE, topic=f"drift-{self.round}"), token=False) \
                    and self.round % 2 == 0:
                self._call("adopt", "POST", self._api(f"{d}/adopt"), (200,))
        # A task FAILED every third round; recovered after FAIL_FOR_S.
        now = time.monotonic()
        for name, since in list(self.failing.items()):
            if now - since >= FAIL_FOR_S:
                if self._call("recover", "DELETE", f"{self.standins.urls[self.cluster[name]]}/standin/connectors/{name}/fail",
                              (204,), token=False):
                    del self.failing[name]
        if self.round % FAIL_EVERY == 0:
            f = self._pick(self.running, lambda n: n not in self.failing and self._in_connect(n, "RUNNING"))
            if f and self._call("fail", "PUT", f"{self.standins.urls[self.cluster[f]]}/standin/connectors/{f}/fail",
                                (204,), {"trace": "org.apache.kafka.connect.errors.ConnectException: soak"}, token=False):
                self.failing[f] = now

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                self.one_round()
            except Exception as e:  # noqa: BLE001 — reported by the run, which fails
                self.errors.append(f"round {self.round}: {e!r}")
            self.stop.wait(max(0.0, TICK_S - (time.monotonic() - t0)))

    def recover_all(self):
        for name in list(self.failing):
            self._call("recover", "DELETE", f"{self.standins.urls[self.cluster[name]]}/standin/connectors/{name}/fail",
                       (204, 404), token=False)
        self.failing.clear()


def fit(points):
    """Least squares y = a + b·x over (x, y): (b, its standard error, widened by the residuals'
    lag-one autocorrelation r when r > 0: by sqrt((1 + r) / (1 - r)))."""
    n = len(points)
    if n < 3:
        return None, None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None, None
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    e = [y - a - b * x for x, y in points]
    resid = sum(v * v for v in e)
    se = (resid / (n - 2) / sxx) ** 0.5
    r = sum(u * v for u, v in zip(e, e[1:])) / resid if resid else 0.0
    if r > 0:
        se *= ((1 + r) / (1 - r)) ** 0.5 if r < 1 else float("inf")
    return b, se


def blocks(samples, block_s=BLOCK_S):
    """The samples in consecutive blocks of `block_s` from the first: per block (its middle in
    hours, mean RSS MiB, mean open files, CPU % of a core over the block, mean SQLite MiB). A
    block's CPU runs from its first sample to the next block's first (the last block: to its own
    last sample)."""
    groups = []
    for s in samples:
        k = int((s["t_s"] - samples[0]["t_s"]) // block_s)
        if not groups or groups[-1][0] != k:
            groups.append((k, []))
        groups[-1][1].append(s)
    out = []
    for i, (_, g) in enumerate(groups):
        end = groups[i + 1][1][0] if i + 1 < len(groups) else g[-1]
        span = end["t_s"] - g[0]["t_s"]
        if span < block_s / 2:  # a stub at the end: too short to hold the cycles
            continue
        mean = lambda key: sum(s[key] for s in g) / len(g)  # noqa: E731
        out.append(((g[0]["t_s"] + end["t_s"]) / 2 / 3600, mean("rss_kib") / 1024, mean("open_files"),
                    (end["cpu_s"] - g[0]["cpu_s"]) / span * 100, mean("db_bytes") / 1048576))
    return out


def sample(app, token, t0, churn):
    status = must(200, http("GET", app.url + "/api/v1/reconciler", token), "GET /api/v1/reconciler")
    pid = app.pid
    files = len(os.listdir(f"/proc/{pid}/fd"))
    cpu = cpu_s(pid)
    _, db_bytes = scale.db_size(app.data_dir)
    return {
        "t_s": round(time.monotonic() - t0, 2),
        "rss_kib": rss_kib(pid),
        "open_files": files,
        "db_bytes": db_bytes,
        "cpu_s": round(cpu[0] if cpu[0] is not None else cpu[1], 4),
        "churn_ops": churn.total(),
        "passes_recorded": status.get("passes_recorded"),
        "bench_cpu_s": round(sum(os.times()[:2]), 2),  # this process: the stand-ins and the churn
    }


def warmup(samples, minutes):
    """The first retention window: until reconcile_passes holds its 1000 rows (the first time a
    pass's record deletes one) and the first rows of the RETENTION tables have been dropped
    (RETENTION_WINDOW_S), at most half the run so that a shorter run keeps a window to fit."""
    half = minutes * 60 / 2
    full = next((s["t_s"] for s in samples if (s["passes_recorded"] or 0) >= PASSES_KEPT), None)
    gross = f"so only gross growth (over {SHORT_PCT_PER_H:g} % of the mean per hour) fails it"
    if full is not None and max(full, RETENTION_WINDOW_S) <= half:
        start = max(full, RETENTION_WINDOW_S)
        return start, (f"reconcile_passes full ({PASSES_KEPT} rows) after {full / 60:.1f} min, the {RETENTION} retentions' "
                       f"first rows dropped by {RETENTION_WINDOW_S / 60:.1f} min: {start / 60:.1f} min"), True
    if full is not None:
        return half, (f"half the run ({half / 60:.1f} min): reconcile_passes full after {full / 60:.1f} min and the {RETENTION} "
                      f"retentions' first rows dropped by {RETENTION_WINDOW_S / 60:.1f} min, not both within it, {gross}"), False
    rows = max(s["passes_recorded"] or 0 for s in samples)
    return half, f"half the run ({half / 60:.1f} min): reconcile_passes not full in the run ({rows} rows), {gross}", False


def slopes(samples, start_s, judged=True):
    """Per figure: slope per hour over the one-minute blocks from `start_s`, first/last block,
    verdict (`judged`: the fit window starts after the first retention window)."""
    w = [s for s in samples if s["t_s"] >= start_s]
    b = blocks(w)
    series = {
        "rss_mib": ("RSS", "MiB", [(h, v) for h, v, _, _, _ in b]),
        "open_files": ("open files", "files", [(h, v) for h, _, v, _, _ in b]),
        "cpu_pct": ("process CPU per minute", "% of a core", [(h, v) for h, _, _, v, _ in b]),
        "sqlite_mib": ("SQLite db + -wal + -shm", "MiB", [(h, v) for h, _, _, _, v in b]),
    }
    out = {}
    for key, (label, unit, pts) in series.items():
        slope, se = fit(pts)
        if slope is None:
            raise Broken(f"too few samples after the warm-up to fit {label} ({len(pts)})")
        mean = sum(y for _, y in pts) / len(pts)
        tol_pct = FLAT_PCT_PER_H if judged else SHORT_PCT_PER_H
        tol = tol_pct / 100 * abs(mean)
        flat = abs(slope) <= tol or abs(slope) <= FLAT_SE * se
        if key == "cpu_pct" and not judged:
            flat = None  # see SHORT_CPU
        out[key] = {"label": label, "unit": unit, "slope_per_h": round(slope, 4), "stderr_per_h": round(se, 4),
                    "mean": round(mean, 3), "first": round(pts[0][1], 3), "last": round(pts[-1][1], 3),
                    "tolerance_pct_per_h": tol_pct, "tolerance_per_h": round(tol, 4), "blocks": len(pts),
                    "flat": flat, "verdict": "not judged" if flat is None else "flat" if flat else ("falls" if slope < 0 else "grows")}
    # With every retention at RETENTION, the file is judged like the rest; its change per churn
    # operation is said beside it (what a table without retention would show).
    ops = w[-1]["churn_ops"] - w[0]["churn_ops"]
    grew = w[-1]["db_bytes"] - w[0]["db_bytes"]
    out["sqlite_mib"].update({"churn_ops": ops, "bytes": grew, "bytes_per_churn_op": round(grew / ops) if ops else None})
    return out


def history_kept(rows, stopped_at):
    """The age in seconds of the oldest restart, drift event, resolved alert and audit row left
    at the stop; raises Broken when one is older than the retention and two monitor cycles (each
    cycle drops up to 2,000 rows a table, far more than the churn makes)."""
    ages = {}
    for key in ("oldest_restart", "oldest_drift_event", "oldest_resolved_alert", "oldest_audit_row"):
        if rows.get(key):
            at = datetime.datetime.fromisoformat(rows[key].replace("Z", "+00:00")).timestamp()
            ages[key] = round(stopped_at - at, 1)
    limit = RETENTION_WINDOW_S + 5
    old = {k: v for k, v in ages.items() if v > limit}
    if old:
        raise Broken(f"rows older than the retention ({RETENTION}) left: {old} s (limit {limit} s)")
    return ages


def table_rows(db_path):
    """Row counts in the stopped server's database (read after it stopped)."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        q = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "connectors": q("SELECT COUNT(*) FROM connectors"),
            "audit_log": q("SELECT COUNT(*) FROM audit_log"),
            "alerts_connector_failed_fired": q("SELECT COUNT(*) FROM alerts WHERE kind = 'connector_failed'"),
            "alerts_connector_failed_resolved": q("SELECT COUNT(*) FROM alerts WHERE kind = 'connector_failed' AND state = 'resolved'"),
            "alerts": q("SELECT COUNT(*) FROM alerts"),
            "connector_restarts": q("SELECT COUNT(*) FROM connector_restarts"),
            "drift_events": q("SELECT COUNT(*) FROM drift_events"),
            # The oldest events left (RFC 3339): none older than the history retention.
            "oldest_restart": q("SELECT MIN(at) FROM connector_restarts"),
            "oldest_drift_event": q("SELECT MIN(detected_at) FROM drift_events"),
            "oldest_resolved_alert": q("SELECT MIN(resolved_at) FROM alerts WHERE state = 'resolved'"),
            "oldest_audit_row": q("SELECT MIN(at) FROM audit_log"),
            "audit_trims": q("SELECT COUNT(*) FROM audit_log WHERE action = 'audit.trim'"),
            "reconcile_passes": q("SELECT COUNT(*) FROM reconcile_passes"),
            "series": q("SELECT COUNT(*) FROM series"),
            "points": q("SELECT COUNT(*) FROM points"),
        }
    finally:
        con.close()


def run(binary, minutes, n, clusters, latency_ms, root, build):
    """The soak; returns the result (its `failures` empty when it passed)."""
    r = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "minutes": minutes, "n": n, "clusters": clusters,
         "latency_ms": latency_ms, "binary": str(binary), "build": build, "machine": {"cores": os.cpu_count()},
         "tick_s": TICK_S, "sample_s": SAMPLE_S, "fail_for_s": FAIL_FOR_S, "retentions": RETENTIONS, "failures": []}
    running_n = max(10, n // 40)
    standins = scale.Standins(clusters, latency_ms)
    app = churn = None
    try:
        with tempfile.TemporaryDirectory(prefix="cluecdc-soak-") as d:
            data = Path(d) / "data"
            # Every interval at its default; samples, events and audit rows kept RETENTION.
            app = scale.Server(binary, data, RETENTION_ENV)
            app.lists_at_start = 0
            token = app.admin_token()
            ids = scale.register(app, token, standins)
            say(f"soak: {n} connectors on {clusters} stand-ins (pid {app.pid}, {build} build)")
            r["setup_converge_s"], _ = scale.create_and_converge(app, token, ids, n, "soak")
            names = {f"soak-{i:05d}": i % len(ids) for i in range(n)}
            running = sorted(names)[:running_n]
            for name in running:
                must(200, http("POST", f"{app.url}/api/v1/connectors/{name}/resume", token), f"resume {name}")
            wait_for(f"{running_n} connectors running", lambda: sum(
                1 for nm in running if (standins.states[names[nm]].connectors.get(nm) or {}).get("state") == "RUNNING") == running_n,
                600, 0.5)
            say(f"soak: {n} observed in {r['setup_converge_s']} s, {running_n} of them running; churn for {minutes} min")
            churn = Churn(app, token, standins, ids, names, running)
            samples = []
            (root / "artifacts").mkdir(exist_ok=True)
            (root / "artifacts/bench-soak-samples.jsonl").write_text("")
            t0 = time.monotonic()
            churn.start()
            end = t0 + minutes * 60
            next_at = t0
            while True:
                if app.proc.poll() is not None:
                    raise Broken(f"cluecdc serve died (exit {app.proc.returncode}) after {(time.monotonic() - t0) / 60:.1f} min")
                s = sample(app, token, t0, churn)
                samples.append(s)
                with open(root / "artifacts/bench-soak-samples.jsonl", "a") as f:  # a long run's progress, readable while it runs
                    f.write(json.dumps(s) + "\n")
                if len(samples) % 30 == 1:
                    say(f"soak: {s['t_s'] / 60:5.1f} min: RSS {s['rss_kib'] / 1024:.1f} MiB, {s['open_files']} files, "
                        f"SQLite {s['db_bytes'] / 1048576:.1f} MiB, CPU {s['cpu_s']:.1f} s, {s['churn_ops']} churn ops, "
                        f"{s['passes_recorded']} passes recorded, {len(churn.errors)} churn errors")
                next_at += SAMPLE_S
                if next_at > end + 0.001:
                    break
                time.sleep(max(0.0, next_at - time.monotonic()))
            churn.stop.set()
            churn.join(60)
            churn.recover_all()
            r["ops"] = dict(sorted(churn.ops.items()))
            r["churn_ops"] = churn.total()
            r["churn_calls"] = churn.calls
            r["churn_errors"] = len(churn.errors)
            r["churn_error_examples"] = churn.errors[:20]
            r["connectors_at_end"] = standins.connectors()
            r["samples"] = samples
            start_s, why, judged = warmup(samples, minutes)
            r["warmup_s"], r["warmup"], r["judged"] = round(start_s, 1), why, judged
            r["slopes"] = slopes(samples, start_s, judged)
            w = [s for s in samples if s["t_s"] >= start_s]
            span = w[-1]["t_s"] - w[0]["t_s"]
            r["fit_window_s"] = round(span, 1)
            r["churn_ops_per_h"] = round((w[-1]["churn_ops"] - w[0]["churn_ops"]) / span * 3600) if span else None
            r["bench_cpu_pct"] = round((w[-1]["bench_cpu_s"] - w[0]["bench_cpu_s"]) / span * 100, 1) if span else None
            r["server_cpu_pct"] = round((w[-1]["cpu_s"] - w[0]["cpu_s"]) / span * 100, 1) if span else None
            stopped_at = time.time()
            app.stop()
            r["rows_at_end"] = table_rows(data / "cluecdc.db")
            r["history_kept_s"] = history_kept(r["rows_at_end"], stopped_at)
            r["db_at_end"] = scale.db_size(data)[0]
    except Exception as e:  # noqa: BLE001 — the run fails with the reason, its JSON still written
        died = app is not None and app.proc.poll() is not None
        r["failures"].append(str(e) if isinstance(e, Broken) else
                             f"{type(e).__name__}: {e}" + (f" (cluecdc serve exited {app.proc.returncode})" if died else ""))
    finally:
        if churn is not None:
            churn.stop.set()
        if app is not None:
            app.stop()
        standins.stop()
    if r.get("churn_calls") and r["churn_errors"] > MAX_ERROR_SHARE * r["churn_calls"]:
        r["failures"].append(f"{r['churn_errors']} of {r['churn_calls']} churn calls failed: {r['churn_error_examples'][:3]}")
    for key, s in (r.get("slopes") or {}).items():
        if s["verdict"] == "grows":
            r["failures"].append(f"{s['label']} grows: {s['slope_per_h']:+g} {s['unit']}/h "
                                 f"(tolerance {s['tolerance_per_h']:g}, {FLAT_SE:g} standard errors {FLAT_SE * s['stderr_per_h']:g})")
    rows = r.get("rows_at_end") or {}
    if rows and r["minutes"] * 60 > FAIL_FOR_S + 60 and not rows.get("alerts_connector_failed_resolved"):
        r["failures"].append("no connector_failed alert fired and resolved: the churn did not reach the monitor")
    (root / "artifacts").mkdir(exist_ok=True)
    (root / "artifacts/bench-soak.json").write_text(json.dumps(r, indent=2, ensure_ascii=False) + "\n")
    return r


def table(r, command):
    """The docs section: how it ran, then figure, slope, first → last, tolerance, verdict."""
    if not r.get("slopes"):
        return f"`{command}` did not complete: {'; '.join(r['failures'])}"
    s, rows = r["slopes"], r.get("rows_at_end") or {}
    lines = [
        f"Generated by `{command}` ({r['build']} build, SQLite) on {r['machine']['cores']} cores, {r['date']}: one `cluecdc serve` "
        f"at the default intervals with {r['n']} connectors on {r['clusters']} Connect stand-ins at {r['latency_ms']:g} ms a call "
        f"(plain FileStream connectors through the connectors API, {max(10, r['n'] // 40)} of them running), {r['minutes']:g} min "
        f"of churn: {r['churn_ops']} operations ({r['churn_ops_per_h']}/h after the warm-up: "
        + ", ".join(f"{k} {v}" for k, v in r["ops"].items())
        + f"), {r['churn_errors']} of {r['churn_calls']} churn calls answered otherwise than expected. "
        f"Warm-up (the first retention window): {r['warmup']}; slopes fitted over the {r['fit_window_s'] / 60:.1f} min after it, "
        f"one sample every {r['sample_s']:g} s, fitted as one-minute blocks.",
        "",
        "| figure | slope per hour | first → last (fit window) | tolerance per hour | verdict |",
        "|---|---|---|---|---|",
    ]
    for key in ("rss_mib", "open_files", "cpu_pct", "sqlite_mib"):
        x = s[key]
        verdict = {"flat": "flat", "falls": "falls (not growth)", "grows": "✗ grows", "not judged": "not judged in a short run"}[x["verdict"]]
        lines.append(f"| {x['label']} | {x['slope_per_h']:+.3g} {x['unit']} (± {x['stderr_per_h']:.2g}) | {x['first']:g} → {x['last']:g} "
                     f"{x['unit']} (mean {x['mean']:.4g}) | {x['tolerance_per_h']:.3g} ({x['tolerance_pct_per_h']:g} % of the mean) "
                     f"or {FLAT_SE:g} standard errors ({FLAT_SE * x['stderr_per_h']:.2g}) | {verdict} |")
    q = s["sqlite_mib"]
    if q.get("bytes_per_churn_op") is not None:
        lines.append(f"\nThe SQLite file changed {q['bytes']:+,} B over the fit window's {q['churn_ops']:,} churn operations "
                     f"({q['bytes_per_churn_op']:+} B each), with samples, events and audit rows kept {RETENTION}.")
    if rows:
        lines += ["", f"At the end: {rows['connectors']} connectors, {rows['audit_log']} audit rows, "
                      f"{rows['alerts_connector_failed_fired']} connector_failed alerts fired ({rows['alerts_connector_failed_resolved']} resolved), "
                      f"{rows['connector_restarts']} restarts, {rows['drift_events']} drift events (the oldest of each, of the resolved alerts and of the audit rows, "
                      f"{r.get('history_kept_s')} s old), {rows['reconcile_passes']} reconcile_passes rows, "
                      f"{rows['series']} series and {rows['points']} points. Process CPU after the warm-up {r['server_cpu_pct']} % of a core; "
                      f"the stand-ins and the churn driver (this benchmark's process) {r['bench_cpu_pct']} % beside it."]
    for f in r["failures"]:
        lines.append(f"\nFailed: {f}")
    return "\n".join(lines)
