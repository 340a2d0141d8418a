#!/usr/bin/env python3
"""The integration suite once per metadata engine, both runs at once against the one stack.

    tests/it_engines.py IT_BINARY [FILTER...]    (FILTER: run only tests whose name contains it)

Runs every test of the `it` binary (built by `cargo test --test it --no-run`) twice: on the
embedded SQLite default, and with CLUECDC_TEST_STORE=postgres (each instance its own database
on the stack's PostgreSQL). Each test is its own process, `IT_SLOTS` (default 5) at a time in
all, from one pool: a free slot goes to the longest test either engine may start, so the engine
that finishes first lends its slots to the other.

The tests that have the stack's Connect resolve secrets (about 30 per engine, most of the
suite's time) used to take turns: its config provider reads one url= and token= from one file,
so each held a lock on that file for its whole run, and the suite's wall time was their sum
(2,328 s with five slots, 2,391 s with two per engine). This script now starts the router of
tests/provider_router.py and points the file at it; each test registers its own ClueCDC there
and those tests run side by side. Measured beside a 2,000-connector soak and a release build: those
60 tests in 567 s, all passing (1,174 + 1,350 s of test time against 8,329 s before).

Why a scheduler and not two `cargo test` runs side by side: some tests use fixed names in the
shared stack (a delivery named "lake" is the Connect connector `cluecdc-deliver-lake` and its
consumer group). So a test is only ever running in one engine at a time, and tests that create
the same fixed name (`SHARED_NAMES`) never run at the same moment. Tests that stop or restart a
shared component take the file gates of tests/it/helpers.rs, which both engines honour.
`isolation::` (it measures pass periods), the test that stops Connect and the PostgreSQL
snapshot-progress test (its slow snapshot holds back every replication slot) run first, with
nothing beside them. `ha::` fixes its own engine (three replicas on PostgreSQL) and runs once.

The other tests start longest first, from the durations the previous full run wrote beside the
binary (`it-durations.json`; without it, in name order, the second engine from the other end).
A test still running after 15 minutes is killed and counted as failed. A failed test is run
once more (its output printed either way): it counts as passed only if the second run passes, and
the summary names it as flaky, with the first failure above it. Exit status 0 only when every
test passed in both engines.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import provider_router  # tests/ is on sys.path: this script's own directory

ROOT = Path(__file__).resolve().parent.parent
ENGINES = {"sqlite": {}, "postgres": {"CLUECDC_TEST_STORE": "postgres"}}
# A test never runs in both engines at the same moment, and tests that create the same names in
# the shared stack never run at the same moment in either engine: a delivery called "lake" is
# the Connect connector `cluecdc-deliver-lake` and its consumer group, a pipeline called "shop"
# the connector `cluecdc-capture-shop`. Names made from a test's own tag are unique and not
# listed. By name, the tests (prefixes of their names) that create it.
SHARED_NAMES = {
    "lake": ("manifest::a_setup_applied", "object_storage::an_object_store_outage"),
    "bad": ("deliveries::mariadb_to_postgres", "tables_schema::schema_changes", "object_storage::object_storage_deliveries_write",
            "pipelines::a_config_the_plugin_refuses"),
    "shop": ("manifest::a_setup_applied", "tables_freshness::a_table_removed", "tables_schema::schema_changes"),
}
# Run with nothing beside them, first: isolation measures pass periods, and the test that stops
# Connect would otherwise hold every Connect test of both runs back while it waits for the gate.
# The PostgreSQL snapshot-progress test snapshots 200,000 rows slowly on purpose, and Debezium's
# snapshot transaction holds a transaction id (txid_current()) for its whole length: PostgreSQL
# creates no logical replication slot until it ends (CREATE_REPLICATION_SLOT waits on it, seen
# in pg_locks), so every pipeline other tests create meanwhile starts minutes late.
ALONE = ("isolation::", "reconciler::with_connect_stopped",
         "tables_progress::a_postgres_pipeline_shows_each_tables_snapshot_progress")
# Tests whose metadata engine is fixed by the test itself (three replicas on PostgreSQL) run once.
ONCE = {"ha::": "postgres"}
TIMEOUT_S = 15 * 60


def holds(test):
    """What a running test holds: its own name (for the other engine) and the shared names it creates."""
    return {test} | {name for name, users in SHARED_NAMES.items() if test.startswith(users)}


def main():
    binary = Path(sys.argv[1])
    slots = int(os.environ.get("IT_SLOTS", "5"))
    listed = subprocess.run([binary, "--list", "--format", "terse"], capture_output=True, text=True, check=True, cwd=ROOT)
    tests = [line[: -len(": test")] for line in listed.stdout.splitlines() if line.endswith(": test")]
    if sys.argv[2:]:
        tests = [t for t in tests if any(f in t for f in sys.argv[2:])]
    durations_file = binary.parent / "it-durations.json"
    try:
        before = json.loads(durations_file.read_text())
    except (OSError, ValueError):
        before = {}
    def runs_in(engine, test):
        return all(engine == only for prefix, only in ONCE.items() if test.startswith(prefix))

    queues = {}
    for i, engine in enumerate(ENGINES):
        known = before.get(engine, {})
        # Without durations the second engine starts at the other end of the list, so the two
        # rarely want the same module.
        order = tests if i == 0 or known else tests[::-1]
        # Tests that run alone go first, while nothing else wants the machine.
        queues[engine] = sorted(
            (t for t in order if runs_in(engine, t)), key=lambda t: (not t.startswith(ALONE), -known.get(t, 0.0))
        )
    running = {}  # (engine, test) -> (process, log file, started)
    results = {engine: {} for engine in ENGINES}
    failed = []
    retried = set()
    t0 = time.monotonic()
    print(f"{len(tests)} tests × {len(ENGINES)} engines, {slots} at a time in all", flush=True)


    # Tests that have Connect resolve secrets no longer wait for each other (tests/provider_router.py).
    routed = {}
    if os.environ.get("CLUECDC_PROVIDER_FILE"):
        router, routes = provider_router.start(os.environ["CLUECDC_PROVIDER_FILE"])
        routed = {"CLUECDC_PROVIDER_ROUTES": str(routes)}
        print(f"config provider router at {router.url}", flush=True)

    def start(engine, test):
        log = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen([binary, "--exact", test, "--test-threads=1"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **routed, **ENGINES[engine]})
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
            again = not ok and (engine, test) not in retried
            print(f"[{engine}] test {test} ... {'ok' if ok else 'FAILED'} ({took:.1f} s){' (running it again)' if again else ''}",
                  flush=True)
            if not ok:
                log.seek(0)
                print(f"---- [{engine}] {test} output ----\n{log.read()}", flush=True)
                if again:
                    retried.add((engine, test))
                    queues[engine].insert(0, test)
                else:
                    failed.append((engine, test))
            log.close()
        # A test that runs alone is started before anything else once it is next in a queue:
        # from then on nothing new starts until the machine is quiet and it has run.
        alone_running = any(t.startswith(ALONE) for (_, t) in running)
        alone_next = [(e, q[0]) for e, q in queues.items() if q and q[0].startswith(ALONE)]
        if alone_next and not alone_running:
            if not running:
                engine, test = alone_next[0]
                queues[engine].remove(test)
                start(engine, test)
        elif not alone_running:
            # One pool of slots for both engines: a free slot takes the longest test either engine
            # may start now (the engine with more known work left wins a tie), so that the engine
            # that finishes first lends its slots to the other instead of leaving them idle.
            while len(running) < slots:
                picks = []
                for engine, queue in queues.items():
                    held = set().union(*(holds(t) for (_, t) in running))
                    pick = next((t for t in queue if not holds(t) & held and not t.startswith(ALONE)), None)
                    if pick is not None:
                        known = before.get(engine, {})
                        left = sum(known.get(t, 0.0) for t in queue)
                        picks.append((known.get(pick, 0.0), left, engine, pick))
                if not picks:
                    break
                _, _, engine, pick = max(picks)
                queues[engine].remove(pick)
                start(engine, pick)
        time.sleep(0.2)

    wall = time.monotonic() - t0
    if routed:
        router.provider_lock.release()
    if not sys.argv[2:]:
        durations_file.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    for engine in ENGINES:
        n = len(results[engine])
        bad = sum(1 for e, _ in failed if e == engine)
        print(f"{engine}: {n - bad} passed, {bad} failed; {sum(results[engine].values()):.0f} s of test time", flush=True)
    print(f"both engines in {wall:.0f} s", flush=True)
    flaky = sorted(retried - set(failed))
    if flaky:
        print("flaky (failed once, passed when run again; the first failure is printed above):\n"
              + "\n".join(f"  [{e}] {t}" for e, t in flaky), flush=True)
    if failed:
        print("failed:\n" + "\n".join(f"  [{e}] {t}" for e, t in failed), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
