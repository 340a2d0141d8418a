"""`scripts/bench --week` (issue 34): the SQLite file after a simulated week of monitoring
samples at N connectors, and whether keeping it (the first trim, WAL checkpoints) stalls a page.

1. A fresh data directory: `cluecdc serve` once (the migrations run), stopped; an admin token.
2. A week of points written straight into the SQLite file (python's sqlite3), in the shape and
   key order the monitor writes them (src/monitor/signals.rs `record_samples`): one row per series
   in `series` (kind, subject, latest, latest_at) and, cycle by cycle at the monitor's default
   interval (15 s) from now − 7 d to now, one `points` row (series_id, at, value) per series.
   The series of N connectors, half pipelines and half deliveries, named as the monitor names
   them (SERIES_PER_PIPELINE / SERIES_PER_DELIVERY below, T captured tables each).
3. File size (db + WAL), pages in use, bytes per point and per connector per day.
4. `serve` again on it with CLUECDC_SAMPLE_RETENTION=6d (its first monitor cycle must drop a
   day of points, and, where the binary downsamples, thin what is older than its raw window),
   while a thread requests `/`, `/pipelines` and `/api/v1/connectors` in turn, one at a time,
   about every 20 ms, from before the server listens until 60 s after the trim is seen done:
   p50, p99, max and the longest request while the trim ran; the WAL's largest size meanwhile.
5. The file again after the trim (size, pages in use, free pages), and after `serve` stops.

The values are made up but shaped like the monitor's (integers for counts, bytes and offsets;
seconds with millisecond fractions; stalls mostly 0), since SQLite stores an integral REAL in
fewer bytes. Not measured here: a week of real monitor cycles (the stall of each cycle's own
writes), PostgreSQL metadata, and VACUUM (nothing in ClueCDC runs one; freed pages are reused).
"""
import json
import random
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from common import Broken, http, must, pct, say, wait_for
from scale import Server

INTERVAL_MS = 15_000  # the monitor's default interval (src/config.rs)
DAY_MS = 86_400_000
WEEK_DAYS = 7
RETENTION = "6d"
RETENTION_MS = 6 * DAY_MS
PAGES = ["/", "/pipelines", "/api/v1/connectors"]
PAGE_EVERY_S = 0.020
# Paging on once the trim is done, with nothing of it left to do: the same pages' figures on
# the same machine at that moment, to hold the figures during the trim against.
AFTER_S = 60
GOAL_STALL_MS = 50.0


def series_of(n, tables):
    """(kind, subject) of every series N connectors have, as the monitor names them: a
    PostgreSQL pipeline with T tables and a snapshot run; a delivery of its T tables."""
    pipelines, deliveries = (n + 1) // 2, n // 2
    out = []
    for i in range(pipelines):
        p = f"week-p{i:05d}"
        out += [("pipeline_topic_end_offset", p), ("pipeline_no_new_data_seconds", p),
                ("slot_retained_wal_bytes", p), ("snapshot_tables_remaining", p)]
        for t in range(tables):
            s = f"{p}/public.t{t}"
            out += [("table_last_change_age_seconds", s), ("table_stalled_seconds", s),
                    ("snapshot_table_rows_scanned", s), ("snapshot_table_rows_expected", s)]
    for i in range(deliveries):
        d = f"week-d{i:05d}"
        out += [("delivery_lag_records", d), ("delivery_lag_seconds", d), ("delivery_freshness_seconds", d)]
        for t in range(tables):
            s = f"{d}/public.t{t}"
            out += [("delivery_table_lag_records", s), ("delivery_table_lag_seconds", s)]
    return out


def value_fn(kind, rng):
    """A plausible value of `kind` at cycle k."""
    if kind == "pipeline_topic_end_offset":
        base = rng.randrange(10**6)
        return lambda k: float(base + 7 * k)
    if kind in ("snapshot_table_rows_scanned", "snapshot_table_rows_expected"):
        rows = float(rng.randrange(10**6))
        return lambda k: rows
    if kind in ("snapshot_tables_remaining", "table_stalled_seconds"):
        return lambda k: 0.0
    if kind in ("slot_retained_wal_bytes",):
        return lambda k: float(rng.randrange(10**7))
    if kind in ("delivery_lag_records", "delivery_table_lag_records"):
        return lambda k: float(rng.randrange(50))
    return lambda k: round(rng.uniform(0, 30), 3)  # *_seconds: ages with ms fractions


def db_figures(db):
    wal = Path(str(db) + "-wal")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        pages = con.execute("PRAGMA page_count").fetchone()[0]
        free = con.execute("PRAGMA freelist_count").fetchone()[0]
        points = con.execute("SELECT COUNT(*) FROM points").fetchone()[0]
        series = con.execute("SELECT COUNT(*) FROM series").fetchone()[0]
        oldest = con.execute("SELECT MIN(at) FROM points").fetchone()[0]
    finally:
        con.close()
    db_bytes = db.stat().st_size
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    return {"db_bytes": db_bytes, "wal_bytes": wal_bytes, "file_bytes": db_bytes + wal_bytes,
            "used_bytes": (pages - free) * page_size, "free_pages": free, "page_size": page_size,
            "points": points, "series": series, "oldest_at": oldest}


def write_week(db, n, tables, now_ms, seed=34):
    rng = random.Random(seed)
    names = series_of(n, tables)
    cycles = WEEK_DAYS * DAY_MS // INTERVAL_MS
    first = now_ms - (cycles - 1) * INTERVAL_MS
    con = sqlite3.connect(db, timeout=30)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("PRAGMA cache_size=-1000000")
    fns = [value_fn(k, rng) for k, _ in names]
    with con:
        con.executemany("INSERT INTO series (kind, subject, latest, latest_at) VALUES (?, ?, ?, ?)",
                        [(k, s, fns[i](cycles - 1), now_ms) for i, (k, s) in enumerate(names)])
    ids = [r[0] for r in con.execute("SELECT id FROM series ORDER BY id")]
    # Cycle by cycle, as the monitor writes: every series' point of a cycle, then the next cycle.
    t0 = time.perf_counter()
    for k in range(cycles):
        at = first + k * INTERVAL_MS
        con.executemany("INSERT INTO points (series_id, at, value) VALUES (?, ?, ?)",
                        [(sid, at, fns[i](k)) for i, sid in enumerate(ids)])
        if k % 2000 == 1999:
            con.commit()
            say(f"week: {k + 1}/{cycles} cycles written ({time.perf_counter() - t0:.0f} s)")
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return {"series": len(ids), "cycles": cycles, "points": len(ids) * cycles,
            "write_s": round(time.perf_counter() - t0, 1)}


class Pager:
    """One request at a time, the pages in turn, about every 20 ms; (start, ms, page, status)."""

    def __init__(self, token):
        self.token, self.url, self.rows, self.stop = token, None, [], threading.Event()
        self.wal_max = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        k = 0
        while not self.stop.is_set():
            if self.url is None:
                time.sleep(0.005)
                continue
            page = PAGES[k % len(PAGES)]
            t0 = time.perf_counter()
            try:
                status = http("GET", self.url + page, self.token, timeout=60)[0]
            except OSError:
                status = None  # not listening yet
            ms = (time.perf_counter() - t0) * 1000
            if status is not None:
                self.rows.append((t0, ms, page, status))
                k += 1
            time.sleep(max(0.0, PAGE_EVERY_S - ms / 1000))


def server_side(s, token):
    """The server's own timing of its GET 200 answers (from its request histogram: the handler's
    time, from the request read to the response written, without the wait to be accepted and
    read, nor the client's), as counts over 25, 50, 100 and 250 ms: a page this client saw over
    50 ms that the server did not spend 50 ms on was held outside the handler (the machine, the
    accept queue, this client)."""
    text = must(200, http("GET", s.url + "/metrics", token), "GET /metrics")
    name = "cluecdc_http_request_duration_seconds_bucket"
    le = {m.group(1): float(m.group(2)) for m in re.finditer(
        rf'^{name}{{method="GET",status="200",le="([^"]+)"}} ([0-9.e+]+)$', text, re.M)}
    total = le.get("+Inf", 0)
    return {"requests": int(total), **{f"over_{int(float(b) * 1000)}_ms": int(total - le[b]) for b in ("0.025", "0.05", "0.1", "0.25") if b in le}}


def stats(ms):
    if not ms:
        return None
    return {"n": len(ms), "p50_ms": round(pct(ms, 50), 2), "p99_ms": round(pct(ms, 99), 2), "max_ms": round(max(ms), 1),
            "over_goal": sum(1 for x in ms if x > GOAL_STALL_MS)}


def run(binary, a, root):
    n, tables = a.week_connectors, a.week_tables
    out = {"n": n, "tables_per_connector": tables, "binary": str(binary), "interval_s": INTERVAL_MS // 1000,
           "retention_written_days": WEEK_DAYS, "retention_serve": RETENTION, "after_s": AFTER_S}
    names = series_of(n, tables)
    per_series_week = WEEK_DAYS * DAY_MS // INTERVAL_MS
    out["series_per_pipeline"] = 4 + 4 * tables
    out["series_per_delivery"] = 3 + 2 * tables
    est_points = len(names) * per_series_week
    free = shutil.disk_usage(tempfile.gettempdir()).free
    say(f"week: N = {n} ({len(names)} series, {est_points:,} points to write); {free / 1e9:.0f} GB free")
    if est_points * 40 > free:
        raise Broken(f"a week at N = {n} is about {est_points * 30 / 1e9:.0f} GB (at ~30 B a point) and "
                     f"{free / 1e9:.0f} GB are free: use --week-connectors with a smaller N")
    with tempfile.TemporaryDirectory(prefix="cluecdc-week-") as tmp:
        data = Path(tmp)
        db = data / "cluecdc.db"
        s = Server(binary, data, {})
        s.stop()
        token = s.admin_token()
        now_ms = int(time.time() * 1000)
        out["written"] = write_week(db, n, tables, now_ms)
        before = db_figures(db)
        out["before"] = before
        out["before"]["bytes_per_point"] = round(before["used_bytes"] / max(1, before["points"]), 1)
        out["before"]["bytes_per_connector_per_day"] = round(before["used_bytes"] / n / WEEK_DAYS)
        out["before"]["projected_10000_week_bytes"] = round(before["used_bytes"] / n * 10_000)
        say(f"week: written: {json.dumps(out['before'])}")
        # The first trim: points before now − 6 d go. Done when the first and last series start
        # after the cutoff (an old binary trims in one transaction; a batched one goes by id).
        last_id, first_id = len(names), 1
        ro = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)

        # A binary that thins old points (migration 0032's `compacted_before`) marks each series
        # it has brought up to date: done is then the last series marked too.
        thins = any(r[1] == "compacted_before" for r in ro.execute("PRAGMA table_info(series)"))
        out["binary_thins"] = thins

        def trimmed():
            q = "SELECT MIN(at) FROM points WHERE series_id = ?"
            a1, a2 = ro.execute(q, (first_id,)).fetchone()[0], ro.execute(q, (last_id,)).fetchone()[0]
            if a1 is None or a2 is None or a1 < cutoff or a2 < cutoff:
                return False
            return not thins or ro.execute("SELECT compacted_before FROM series WHERE id = ?", (last_id,)).fetchone()[0] > 0
        pager = Pager(token)
        pager.thread.start()
        wal = Path(str(db) + "-wal")

        class Week(Server):
            def _ready(self):
                pager.url = self.url  # paging from the first moment the server listens
                return super()._ready()
        t_start = time.perf_counter()
        cutoff = int(time.time() * 1000) - RETENTION_MS  # the server's own cut is later still
        s = Week(binary, data, {"CLUECDC_SAMPLE_RETENTION": RETENTION})
        try:
            def done():
                pager.wal_max = max(pager.wal_max, wal.stat().st_size if wal.exists() else 0)
                return trimmed()
            wait_for("the first trim", done, 1800, 0.2)
            t_done = time.perf_counter()
            out["trim_seen_done_s"] = round(t_done - t_start, 2)
            say(f"week: trim seen done {out['trim_seen_done_s']} s after serve started; paging {AFTER_S} s more")
            end = time.monotonic() + AFTER_S
            while time.monotonic() < end:
                pager.wal_max = max(pager.wal_max, wal.stat().st_size if wal.exists() else 0)
                time.sleep(0.2)
            pager.stop.set()
            pager.thread.join()
            out["server_side"] = server_side(s, token)
            out["after_trim"] = db_figures(db)
        finally:
            ro.close()
            s.stop()
        rows = pager.rows
        bad = [r for r in rows if r[3] != 200]
        if bad:
            raise Broken(f"{len(bad)} page requests failed, first: {bad[0][2]} HTTP {bad[0][3]}")
        during = [r[1] for r in rows if r[0] <= t_done]
        out["pages"] = {"all": stats([r[1] for r in rows]), "until_trim_done": stats(during),
                        "after_trim_done": stats([r[1] for r in rows if r[0] > t_done])}
        out["pages"]["per_page"] = {p: stats([r[1] for r in rows if r[2] == p]) for p in PAGES}
        longest = max(rows, key=lambda r: r[1])
        out["longest_stall"] = {"ms": round(longest[1], 1), "page": longest[2], "at_s": round(longest[0] - t_start, 2)}
        out["wal_max_bytes"] = pager.wal_max
        after = db_figures(db)
        out["after_stop"] = after
        days = RETENTION_MS / DAY_MS
        out["after_stop"]["bytes_per_point"] = round(after["used_bytes"] / max(1, after["points"]), 1)
        out["after_stop"]["used_bytes_per_connector_per_day"] = round(after["used_bytes"] / n / days)
        out["after_stop"]["points_per_series"] = round(after["points"] / max(1, after["series"]))
        # Linear in connectors (each has its own series): the figure at 10,000, not measured.
        out["projected_10000_week_bytes"] = round(after["used_bytes"] / n * 10_000 * WEEK_DAYS / days)
        out["stall_goal_ms"] = GOAL_STALL_MS
        out["stall_goal_met"] = longest[1] <= GOAL_STALL_MS
    say(f"week: {json.dumps({k: out[k] for k in ('pages', 'longest_stall', 'wal_max_bytes', 'after_stop')})}")
    (root / "artifacts").mkdir(exist_ok=True)
    (root / "artifacts/bench-week.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def page_row(label, st, goal):
    if not st:
        return f"| {label} | none answered |"
    return (f"| {label}: p50 / p99 / max, over {goal:.0f} ms | {st['p50_ms']} / {st['p99_ms']} / {st['max_ms']} ms, "
            f"{st.get('over_goal', '—')} of {st['n']} |")


def table(r):
    b, f = r["before"], r["after_stop"]

    def mib(x):
        return f"{x / 2**20:,.1f} MiB"
    p = r["pages"]
    lines = [
        f"Generated by `scripts/bench --week --week-connectors {r['n']}` ({Path(r['binary']).parent.name} build): "
        f"{r['n']} connectors ({r['series_per_pipeline']} series a pipeline, {r['series_per_delivery']} a delivery, "
        f"{r['tables_per_connector']} table each), a week of points at {r['interval_s']} s written into the file, then "
        f"`serve` with CLUECDC_SAMPLE_RETENTION={r['retention_serve']} while one client reads "
        f"{', '.join(f'`{x}`' for x in PAGES)} in turn every ~20 ms.",
        "",
        "| figure | measured |",
        "|---|---|",
        f"| series, points written (a week) | {b['series']:,}, {b['points']:,} |",
        f"| file after the week (db + WAL) | {mib(b['file_bytes'])} |",
        f"| bytes a point (pages in use / points) | {b['bytes_per_point']} |",
        f"| bytes a connector a day, raw | {b['bytes_per_connector_per_day']:,} |",
        f"| 10,000 connectors × 7 d raw (linear projection, not measured) | {b['projected_10000_week_bytes'] / 1e9:,.2f} GB |",
        f"| first trim seen done after serve started | {r['trim_seen_done_s']} s |",
        page_row("pages until the trim was done", p["until_trim_done"], r["stall_goal_ms"]),
        page_row(f"pages in the {r.get('after_s', 20)} s after it (nothing left to trim)", p["after_trim_done"], r["stall_goal_ms"]),
        f"| longest page (goal ≤ {r['stall_goal_ms']:.0f} ms) | {r['longest_stall']['ms']} ms ({r['longest_stall']['page']}, "
        f"{r['longest_stall']['at_s']} s after start): {'met' if r['stall_goal_met'] else 'MISSED'} |",
        f"| WAL's largest size meanwhile | {mib(r['wal_max_bytes'])} |",
        *([f"| the server's own time (its request histogram), GET 200 over 25 / 50 / 100 / 250 ms | "
           f"{ss.get('over_25_ms')} / {ss.get('over_50_ms')} / {ss.get('over_100_ms')} / {ss.get('over_250_ms')} of {ss['requests']:,} |"]
          if (ss := r.get("server_side")) else []),
        f"| after the trim and stop: points, file, in use, free pages | {f['points']:,}, {mib(f['file_bytes'])}, {mib(f['used_bytes'])}, {f['free_pages']:,} |",
        f"| bytes a connector a day kept (in use / N / {RETENTION_MS // DAY_MS} d) | {f['used_bytes_per_connector_per_day']:,} |",
        f"| points a series kept ({RETENTION_MS // DAY_MS} d) | {f['points_per_series']:,} |",
        f"| 10,000 connectors × 7 d at that rate (linear projection, not measured) | {r['projected_10000_week_bytes'] / 1e9:,.2f} GB |",
    ]
    return "\n".join(lines)
