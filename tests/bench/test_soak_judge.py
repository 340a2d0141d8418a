"""The soak's judge (bench/soak.py) on made-up series: what it calls flat and what it calls growth.
Run: python3 -m unittest discover -s tests/bench (the test command does)."""
import math
import random
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import soak  # noqa: E402


def series(minutes, cpu_share, rss_mib, rss_per_h=0.0, cpu_per_h=0.0, seed=1, passes_per_sample=8, wander_sd=0.015,
           db_mib_per_h=0.0):
    """10-second samples of a server whose work comes in 10, 15 and 60 s cycles (a pass, a monitor
    cycle, the offsets round and leak scan), with noise on top, and a slow wander of its CPU from
    minute to minute (what the machine's other load does: the failed run of 2026-12-06 moved
    between 16.6 and 21.8 % of a core from minute to minute)."""
    rng, cpu, out, wander = random.Random(seed), 0.0, [], 0.0
    for i in range(int(minutes * 6) + 1):
        t = i * 10.0
        if i % 6 == 0:
            wander = 0.6 * wander + rng.gauss(0, wander_sd)
        if i:
            # CPU over the last 10 s: the base share, a trend, the 15 s and 60 s bursts, noise.
            share = cpu_share + cpu_per_h / 100 * t / 3600
            burst = 0.04 * (1 + math.sin(2 * math.pi * t / 15)) + (0.3 if i % 6 == 0 else 0.0)
            cpu += 10 * max(0.0, share + wander + burst + rng.gauss(0, 0.02))
        out.append({"t_s": t, "rss_kib": (rss_mib + rss_per_h * t / 3600 + rng.gauss(0, 1)) * 1024,
                    "open_files": 60 + rng.randint(-4, 4), "cpu_s": cpu, "db_bytes": 5e6 + db_mib_per_h * 1048576 * t / 3600 + rng.gauss(0, 2e4),
                    "churn_ops": 5 * i, "passes_recorded": min(soak.PASSES_KEPT, passes_per_sample * i)})
    return out


def judge(samples, minutes):
    start, _, judged = soak.warmup(samples, minutes)
    return soak.slopes(samples, start, judged), judged


class Judge(unittest.TestCase):
    def test_flat_series_with_the_servers_cycles_are_flat_in_short_and_long_runs(self):
        grew = []
        for minutes, seed in [(20, s) for s in range(1, 101)] + [(120, s) for s in range(1, 21)]:
            s, judged = judge(series(minutes, 0.18, 100, seed=seed), minutes)
            grew += [(minutes, seed, key) for key in ("rss_mib", "open_files", "cpu_pct", "sqlite_mib") if s[key]["verdict"] == "grows"]
            if not judged:
                self.assertEqual(s["cpu_pct"]["verdict"], "not judged")
        self.assertEqual(grew, [], "flat series called growing")

    def test_a_leak_is_growth(self):
        s, judged = judge(series(20, 0.18, 100, rss_per_h=60), 20)
        self.assertFalse(judged, "a 20-minute run at 500 connectors ends before reconcile_passes is full")
        self.assertEqual(s["rss_mib"]["verdict"], "grows")
        s, judged = judge(series(120, 0.18, 100, rss_per_h=5, cpu_per_h=2), 120)
        self.assertTrue(judged)
        self.assertEqual(s["rss_mib"]["verdict"], "grows")
        self.assertEqual(s["cpu_pct"]["verdict"], "grows")

    def test_a_growing_sqlite_file_is_growth(self):
        # 0.5 MiB/h on a 5 MB file: a tenth of what the audit trail added without a retention
        # (471 B per churn operation, about 9,800 operations an hour: 4.4 MiB/h).
        s, judged = judge(series(120, 0.18, 100, db_mib_per_h=0.5), 120)
        self.assertTrue(judged)
        self.assertEqual(s["sqlite_mib"]["verdict"], "grows")
        s, _ = judge(series(120, 0.18, 100), 120)
        self.assertEqual(s["sqlite_mib"]["verdict"], "flat")

    def test_the_warm_up_waits_for_the_first_retention_window(self):
        samples = series(120, 0.18, 100, passes_per_sample=30)  # full at 5.6 min: before the 10-min retentions act
        start, why, judged = soak.warmup(samples, 120)
        self.assertTrue(judged)
        self.assertEqual(start, soak.RETENTION_WINDOW_S, why)

    def test_a_falling_figure_is_not_growth(self):
        s, _ = judge(series(120, 0.18, 100, rss_per_h=-20), 120)
        self.assertEqual(s["rss_mib"]["verdict"], "falls")

    def test_blocks_take_cpu_over_whole_minutes(self):
        b = soak.blocks(series(10, 0.18, 100, wander_sd=0))
        self.assertEqual(len(b), 10)
        # Each minute holds one 60 s burst (0.3 over 10 s: 5 points of a minute) and whole 15 s cycles.
        for _, _, _, cpu, _ in b:
            self.assertAlmostEqual(cpu, 18 + 4 + 5, delta=2.5)

    def test_the_warm_up_judges_only_gross_growth_when_the_table_fills_late(self):
        samples = series(20, 0.18, 100, passes_per_sample=7)  # full after about 24 min: never
        self.assertFalse(soak.warmup(samples, 20)[2])
        samples = series(20, 0.18, 100, passes_per_sample=12)  # full at 14 min: after half the run
        start, why, judged = soak.warmup(samples, 20)
        self.assertEqual((start, judged), (600, False), why)
        samples = series(120, 0.18, 100)  # full at 21 min: the fit starts there
        start, _, judged = soak.warmup(samples, 120)
        self.assertTrue(judged)
        self.assertAlmostEqual(start, 1250, delta=10)


if __name__ == "__main__":
    unittest.main()
