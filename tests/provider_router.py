"""The stack's one Connect worker shared by many ClueCDC test instances at once.

The worker's `cluecdc` config provider reads one url= and token= from one file, so before this
router every test that had Connect resolve a secret held a lock for its whole run: about 60
tests in a row, which was most of the integration suite's wall time whatever the number of
slots. `tests/it_engines.py` starts this router and points the provider file at it; each test
process registers its own ClueCDC (url and provider token) in the routes directory instead of
writing the provider file (`write_provider_file` in tests/it/helpers.rs), one registration per
process, replaced when the test points the provider elsewhere, as the file was.

A resolve request goes, with each instance's own token, to the instance that answered the same
reference before, else to every registered instance of a live process at once; the first 200
is the answer (secret references are random, so only their owner has them). Without a 200, the
first answer other than 404 (a refused token, say) is passed on, else a 404. A provider probe
(`cluecdc-probe-` references, which every instance answers 200) goes to every instance and is
answered once all have been asked, so that its owner always records it. The price: an instance
sees, and audits as refused, the first lookup of other tests' references.

The provider itself is unchanged and still talks HTTP with a token; only the hop is added.
"""
import concurrent.futures as cf
import importlib.util
import json
import os
import sys
import threading
import traceback
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PROBE_PREFIX = "cluecdc-probe-"  # src/clusters/provider_check.rs
TIMEOUT_S = 4.0


def _targets(routes):
    """(pid, url, token) of each registration whose process is alive."""
    out = []
    for f in sorted(routes.iterdir()):
        if not f.name.isdigit() or not Path(f"/proc/{f.name}").exists():
            continue
        try:
            kv = dict(line.split("=", 1) for line in f.read_text().splitlines() if "=" in line)
        except OSError:
            continue
        if kv.get("url") and kv.get("token"):
            out.append((f.name, kv["url"], kv["token"]))
    return out


def _ask(target, path, body):
    _, url, token = target
    req = urllib.request.Request(url + path, data=body, method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (OSError, ValueError):
        return None, b""


class Router:
    def __init__(self, routes):
        self.routes = Path(routes)
        self.owners = {}  # secret_ref -> (pid, url) that answered 200
        self.lock = threading.Lock()
        self.pool = cf.ThreadPoolExecutor(16)
        router = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # the provider's client keeps connections open

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    status, data = router.resolve(self.path, body)
                except Exception as e:  # noqa: BLE001 — answered, and said, rather than a dropped connection
                    traceback.print_exc()
                    status, data = 502, json.dumps({"error": f"provider router: {e}"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def resolve(self, path, body):
        try:
            ref = json.loads(body).get("secret_ref") or ""
        except ValueError:
            ref = ""
        targets = _targets(self.routes)
        if not targets:
            return 503, json.dumps({"error": "no ClueCDC test instance is registered with the provider router"}).encode()
        if ref.startswith(PROBE_PREFIX):
            answers = list(self.pool.map(lambda t: _ask(t, path, body), targets))
            return next(((s, d) for s, d in answers if s == 200), answers[0] if answers[0][0] else (502, b"{}"))
        with self.lock:
            owner = self.owners.get(ref)
        known = [t for t in targets if owner and (t[0], t[1]) == owner]
        answers = []
        if known:
            status, data = _ask(known[0], path, body)
            if status == 200:
                return status, data
            answers.append((status, data))  # asked once: not asked again below
        futures = {self.pool.submit(_ask, t, path, body): t for t in targets if t not in known}
        for f in cf.as_completed(futures):
            status, data = f.result()
            if status == 200:
                t = futures[f]
                with self.lock:
                    self.owners[ref] = (t[0], t[1])
                return status, data
            answers.append((status, data))
        refused = next(((s, d) for s, d in answers if s not in (None, 404)), None)
        if refused:
            return refused
        if any(s == 404 for s, _ in answers):
            return next((s, d) for s, d in answers if s == 404)
        return 502, json.dumps({"error": "no registered ClueCDC answered"}).encode()


def _demo():
    """scripts/demo-object-storage.py, whose ProviderLock every user of the provider file shares."""
    spec = importlib.util.spec_from_file_location(
        "demo_object_storage", Path(__file__).resolve().parent.parent / "scripts/demo-object-storage.py")
    mod = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    if not hasattr(mod, "ProviderLock"):
        spec.loader.exec_module(mod)
    return mod


def start(provider_file):
    """Starts the router, points `provider_file` at it and returns the routes directory (for
    CLUECDC_PROVIDER_ROUTES). The provider needs a token of the right form in the file; the
    router sends each instance's own."""
    # The file is this router's until the process ends: the lock the browser tests, the API
    # contract and the benchmarks take is held (a dead holder's is taken over).
    lock = _demo().ProviderLock(provider_file)
    lock.take()
    routes = Path(provider_file).parent / "provider-routes"
    routes.mkdir(exist_ok=True)
    for f in routes.iterdir():
        f.unlink()
    router = Router(routes)
    router.provider_lock = lock  # released by the caller when its tests are done
    tmp = f"{provider_file}.tmp"
    Path(tmp).write_text(f"url={router.url}\ntoken=cdcp_router{'0' * 32}\n")
    os.replace(tmp, provider_file)
    return router, routes
