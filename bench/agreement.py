#!/usr/bin/env python3
"""The Connect stand-in agrees with the real worker: the same calls, made to both, give the same
status codes and the same JSON shapes (keys and value types; not values such as worker ids).

    CONNECT_URL=http://127.0.0.1:18083 bench/agreement.py     (scripts/test runs it)

Exits 1 naming each call where they differ.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import connect_standin  # noqa: E402


def call(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, json.loads(text) if text.startswith("{") else text


def shape(v):
    """Keys and types, recursively; a list by its first element."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in sorted(v.items())}
    if isinstance(v, list):
        return [shape(v[0])] if v else []
    return type(v).__name__


def wait_state(base, name, state):
    for _ in range(300):
        s, st = call(base, "GET", f"/connectors/{name}/status")
        tasks_up = state == "STOPPED" or st.get("tasks") if s == 200 else False
        if s == 200 and st["connector"]["state"] == state and tasks_up and all(t["state"] == state for t in st["tasks"]):
            return
        time.sleep(0.1)
    raise SystemExit(f"{base}: {name} never reached {state}")


def script(base, name):
    """The calls ClueCDC makes (src/connect/mod.rs), in a life cycle; (label, status, body)."""
    cfg = {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "file": "/dev/null", "topic": name, "tasks.max": "1"}
    out = []

    def rec(label, method, path, body=None, keep=True):
        s, b = call(base, method, path, body)
        out.append((label, s, b if keep else None))
        return s, b
    s, root = call(base, "GET", "/")
    out.append(("GET /", s, {k: root[k] for k in ("version", "commit", "kafka_cluster_id")}))
    s, plugins = call(base, "GET", "/connector-plugins?connectorsOnly=true")
    out.append(("GET /connector-plugins", s, [p for p in plugins if p["class"].endswith("FileStreamSourceConnector")]))
    s, v = call(base, "PUT", "/connector-plugins/FileStreamSourceConnector/config/validate", dict(cfg, name=name))
    entry = next(c for c in v["configs"] if c["definition"]["name"] == "topic")
    out.append(("PUT validate", s, {"name": v["name"], "error_count": v["error_count"], "configs": [entry]}))
    rec("POST /connectors STOPPED", "POST", "/connectors", {"name": name, "config": cfg, "initial_state": "STOPPED"})
    wait_state(base, name, "STOPPED")
    rec("POST /connectors again", "POST", "/connectors", {"name": name, "config": cfg}, keep=False)
    s, lst = call(base, "GET", "/connectors?expand=status&expand=info")
    out.append(("GET /connectors?expand (stopped)", s, lst.get(name)))
    rec("PUT resume", "PUT", f"/connectors/{name}/resume", keep=False)
    wait_state(base, name, "RUNNING")
    s, lst = call(base, "GET", "/connectors?expand=status&expand=info")
    out.append(("GET /connectors?expand (running)", s, lst.get(name)))
    rec("GET config", "GET", f"/connectors/{name}/config")
    rec("GET status", "GET", f"/connectors/{name}/status")
    rec("PUT config", "PUT", f"/connectors/{name}/config", cfg)
    rec("POST restart", "POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed=false", keep=False)
    wait_state(base, name, "RUNNING")
    rec("POST restart (connector only)", "POST", f"/connectors/{name}/restart", keep=False)
    wait_state(base, name, "RUNNING")
    rec("PUT pause", "PUT", f"/connectors/{name}/pause", keep=False)
    wait_state(base, name, "PAUSED")
    rec("PUT stop", "PUT", f"/connectors/{name}/stop", keep=False)
    wait_state(base, name, "STOPPED")
    s, offsets = call(base, "GET", f"/connectors/{name}/offsets")
    out.append(("GET offsets", s, {"offsets": []} if s == 200 else offsets))
    rec("DELETE", "DELETE", f"/connectors/{name}", keep=False)
    for _ in range(100):
        if call(base, "GET", f"/connectors/{name}/status")[0] == 404:
            break
        time.sleep(0.1)
    rec("GET status after delete", "GET", f"/connectors/{name}/status", keep=False)
    return out


def main():
    real = os.environ.get("CONNECT_URL") or sys.exit("CONNECT_URL: the real worker (scripts/stack env)")
    # A free port: a fixed one may be taken by whatever else runs on the machine.
    server = connect_standin.serve(0)
    name = f"agree-{os.getpid()}"
    try:
        a = script(real, name)
        b = script(f"http://127.0.0.1:{server.server_address[1]}", name)
    finally:
        call(real, "DELETE", f"/connectors/{name}")
        connect_standin.stop(server)
    bad = []
    for (label, s1, b1), (_, s2, b2) in zip(a, b):
        if s1 != s2:
            bad.append(f"{label}: worker {s1}, stand-in {s2}")
        elif shape(b1) != shape(b2):
            bad.append(f"{label}: worker {json.dumps(shape(b1))}\n    stand-in {json.dumps(shape(b2))}")
    for line in bad:
        print(f"agreement: {line}", file=sys.stderr, flush=True)
    print(f"agreement: {len(a) - len(bad)} of {len(a)} calls agree with the real worker")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
