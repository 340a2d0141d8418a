#!/usr/bin/env python3
"""The integration suite once per metadata engine, both runs at once against the one stack.

    tests/it_engines.py IT_BINARY

Runs every test of the `it` binary (built by `cargo test --test it --no-run`) twice: on the
embedded SQLite default, and with CLUECDC_TEST_STORE=postgres (each instance its own database
on the stack's PostgreSQL). Each test is its own process, `IT_SLOTS` (default 2) at a time per
engine, so the two runs share the machine the way one run of `cargo test` with twice the
threads would.

Why a scheduler and not two `cargo test` runs side by side: some tests use fixed names in the
shared stack (a delivery named "watched" is the Connect connector `cluecdc-deliver-watched` and
its consumer group), which is safe within one run and not between two runs at the same moment.
So a test module is only ever running in one engine at a time (modules that share a name are one
group); tests that stop or restart a shared component take the file gates of
tests/it/helpers.rs, which both engines honour; `isolation::` measures pass periods and runs
with nothing beside it.

Tests are started longest first, from the durations the previous run wrote beside the binary
(`it-durations.json`; alphabetical without it). A test still running after 15 minutes is killed
and counted as failed. Exit status 0 only when every test passed in both engines.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINES = {"sqlite": {}, "postgres": {"CLUECDC_TEST_STORE": "postgres"}}
# Modules whose tests create the same names in the stack (a delivery called "lake", one called
# "bad") run under one group.
SHARED_NAMES = {"object_storage": "manifest", "tables_schema": "deliveries"}
ALONE = ("isolation::",)
TIMEOUT_S = 15 * 60


def group(test):
    module = test.split("::", 1)[0]
    return SHARED_NAMES.get(module, module)


def main():
    binary = Path(sys.argv[1])
    slots = int(os.environ.get("IT_SLOTS", "2"))
    listed = subprocess.run([binary, "--list", "--format", "terse"], capture_output=True, text=True, check=True, cwd=ROOT)
    tests = [line[: -len(": test")] for line in listed.stdout.splitlines() if line.endswith(": test")]
    durations_file = binary.parent / "it-durations.json"
    try:
        before = json.loads(durations_file.read_text())
    except (OSError, ValueError):
        before = {}
    queues = {}
    for engine in ENGINES:
        known = before.get(engine, {})
        queues[engine] = sorted(tests, key=lambda t: -known.get(t, 0.0))
    running = {}  # (engine, test) -> (process, log file, started)
    results = {engine: {} for engine in ENGINES}
    failed = []
    t0 = time.monotonic()
    print(f"{len(tests)} tests × {len(ENGINES)} engines, {slots} at a time per engine", flush=True)

    def busy_groups(engine):
        return {group(t) for (e, t) in running if e == engine}

    def start(engine, test):
        log = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen([binary, "--exact", test, "--test-threads=1"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **ENGINES[engine]})
        running[(engine, test)] = (proc, log, time.monotonic())

    while any(queues.values()) or running:
        for (engine, test), (proc, log, started) in list(running.items()):
            took = time.monotonic() - started
            if proc.poll() is None and took > TIMEOUT_S:
                proc.kill()
                proc.wait()
            if proc.poll() is None:
                continue
            del running[(engine, test)]
            results[engine][test] = round(took, 1)
            ok = proc.returncode == 0
            print(f"[{engine}] test {test} ... {'ok' if ok else 'FAILED'} ({took:.1f} s)", flush=True)
            if not ok:
                failed.append((engine, test))
                log.seek(0)
                print(f"---- [{engine}] {test} output ----\n{log.read()}", flush=True)
            log.close()
        alone_running = any(t.startswith(ALONE) for (_, t) in running)
        for engine, queue in queues.items():
            others = set().union(*(busy_groups(e) for e in ENGINES if e != engine))
            while queue and sum(1 for (e, _) in running if e == engine) < slots and not alone_running:
                pick = next((t for t in queue if group(t) not in others), None)
                if pick is None:
                    break
                if pick.startswith(ALONE):
                    if running:
                        break  # wait for the machine to be quiet
                    alone_running = True
                queue.remove(pick)
                start(engine, pick)
                if alone_running:
                    break
        time.sleep(0.2)

    wall = time.monotonic() - t0
    durations_file.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    for engine in ENGINES:
        n = len(results[engine])
        bad = sum(1 for e, _ in failed if e == engine)
        print(f"{engine}: {n - bad} passed, {bad} failed; {sum(results[engine].values()):.0f} s of test time", flush=True)
    print(f"both engines in {wall:.0f} s", flush=True)
    if failed:
        print("failed:\n" + "\n".join(f"  [{e}] {t}" for e, t in failed), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
