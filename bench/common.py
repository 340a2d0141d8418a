"""Helpers shared by scripts/bench and the scenario modules under bench/ (scale.py): HTTP with
JSON, process CPU and RSS readings, percentiles, waiting, wrk, and the direct REST script that
is every convergence baseline. Nothing here knows a scenario; scripts/bench imports this, never
the reverse."""
import concurrent.futures as cf
import ctypes
import ctypes.util
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
T0 = time.monotonic()


def say(msg):
    print(f"bench: [{time.monotonic() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


class Broken(Exception):
    """A scenario could not run: the benchmark fails (a missed goal never does)."""


def http(method, url, token=None, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text.strip().startswith(("{", "[")) else text)
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text


def must(expected, answer, what):
    status, body = answer
    if status != expected:
        raise Broken(f"{what}: HTTP {status} {str(body)[:500]}")
    return body


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_stat_s(pid):
    """utime + stime of the whole process (threads that exited included) from /proc/PID/stat,
    in seconds: counted in clock ticks (10 ms), too coarse for a 2 ms pass on its own."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


try:
    _LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
except OSError:
    _LIBC = None


def cpu_clock_s(pid):
    """The same total (all threads, exited ones included) from the process's CPU-time clock
    (clock_getcpuclockid + clock_gettime), in nanoseconds; None where it is not available."""
    if _LIBC is None:
        return None
    cid, ts = ctypes.c_int(), _Timespec()
    if _LIBC.clock_getcpuclockid(pid, ctypes.byref(cid)) != 0 or _LIBC.clock_gettime(cid.value, ctypes.byref(ts)) != 0:
        return None
    return ts.tv_sec + ts.tv_nsec / 1e9


def cpu_s(pid):
    """(precise CPU seconds or None, /proc/PID/stat CPU seconds)."""
    return cpu_clock_s(pid), cpu_stat_s(pid)


def cpu_delta(c0, c1):
    """CPU seconds between two cpu_s readings: the clock when it worked both times, else the
    ticks; and which one it was."""
    if c0[0] is not None and c1[0] is not None:
        return c1[0] - c0[0], "clock_getcpuclockid"
    return c1[1] - c0[1], "/proc/PID/stat"


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


def wait_for(what, cond, timeout, every=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Broken(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def wrk(url, token, seconds, connections=64):
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-H", f"Authorization: Bearer {token}", url],
        capture_output=True, text=True, check=True).stdout

    def ms(v):
        n, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", v).groups()
        return float(n) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    p50 = ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))
    p99 = ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        raise Broken(f"{url} answered {non2xx.group(1)} errors under load:\n{out}")
    return {"p50_ms": round(p50, 2), "p99_ms": round(p99, 2), "rps": round(rps)}


def load_pages(app, token, pages, seconds, label):
    """Each page at 64 clients, after one view alone whose time is kept beside (`first_ms`): a
    first view loads what later ones reuse (the topics page reads the broker), and under wrk
    (which corrects for coordinated omission) one such wait of every client would be most of
    the p99 of a steady load."""
    out = {}
    for p in pages:
        t0 = time.perf_counter()
        must(200, http("GET", app.url + p, token), f"GET {p}")
        first_ms = round((time.perf_counter() - t0) * 1000, 1)
        out[p] = {**wrk(app.url + p, token, seconds), "first_ms": first_ms}
        say(f"{label}: {p}: {out[p]}")
    return out


def replace_section(page_path, name, md):
    """Writes `md` between the `<!-- {name}:start -->` and `<!-- {name}:end -->` markers of a
    docs page, leaving the rest of the page as it is; exits when the markers are missing."""
    page = page_path.read_text()
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in page or end not in page:
        sys.exit(f"{page_path} has no {start} … {end} markers: the table was not written")
    before, rest = page.split(start, 1)
    page_path.write_text(before + start + "\n" + md + "\n" + end + rest.split(end, 1)[1])


def direct_script(connect_url, creates, validate=False, before=None, per_cluster=8):
    """The baseline: the same Connect calls straight against its REST API, 8 at a time, then
    polling the expanded list until every connector shows (RUNNING unless created STOPPED).
    `before`: per create, what to do first (in the same worker).
    Several clusters: `connect_url` a dict {url: creates} (`creates` then unused, `before` not
    supported); each cluster gets its own `per_cluster` workers, all clusters at once, as a
    script with one worker pool per cluster would."""
    t0 = time.perf_counter()
    if isinstance(connect_url, dict):
        groups = {url: list(cs) for url, cs in connect_url.items()}
        if before:
            raise ValueError("direct_script: `before` with several clusters")
    else:
        groups = {connect_url: list(creates)}

    def one(url, create, k=None):
        name, config, initial = create
        if before:
            before[k]()
        if validate:
            cls = config["connector.class"]
            must(200, http("PUT", f"{url}/connector-plugins/{urllib.parse.quote(cls, safe='')}/config/validate",
                           body=dict(config, name=name)), f"direct: validate {name}")
        body = {"name": name, "config": config}
        if initial:
            body["initial_state"] = initial
        must(201, http("POST", url + "/connectors", body=body), f"direct: create {name}")

    def cluster(url):
        with cf.ThreadPoolExecutor(per_cluster) as ex:
            list(ex.map(lambda k: one(url, groups[url][k], k), range(len(groups[url]))))
    with cf.ThreadPoolExecutor(len(groups)) as ex:
        list(ex.map(cluster, groups))

    def all_there():
        for url, cs in groups.items():
            listed = http("GET", url + "/connectors?expand=status")[1]
            if sum(1 for c in cs if c[0] in listed and listed[c[0]]["status"]["connector"]["state"] in ("RUNNING", "STOPPED")) != len(cs):
                return False
        return True
    wait_for("the direct script's connectors", all_there, 600)
    return time.perf_counter() - t0
