//! Which connectors' committed offsets a reconcile pass reads: one `GET .../offsets` each.
//!
//! Invariants:
//! - A round of reads takes one offsets interval and is spread over that interval's passes in
//!   slices ([`Clock`]); each connector belongs to one slice (by a hash of its name), so it is
//!   read at most once a round, about one interval after its last read, and no pass reads much
//!   more than its share. Read all in one pass a minute, 10,000 connectors' offsets (5,500
//!   calls) were several seconds of work at once, in whichever minute a page view landed in.
//! - Within its slice, a moving source connector (running, or just stopped: [`moving_sources`])
//!   is read every round: its positions are what pipelines' freshness and binlog positions come
//!   from. Any other connector is read in its first round, then one round in
//!   [`OFFSETS_ROTATION`] (by the same hash): a sink's committed offsets are shown on its page
//!   only (delivery lag and stalls come from its consumer group in Kafka), and a stopped or
//!   paused connector's do not move unless someone changes them.
//! - A pass late by more than a round reads one round's slices, not every round it missed.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How many offsets rounds it takes to read every connector whose offsets do not move.
const OFFSETS_ROTATION: u64 = 10;

/// At most this many slices to a round (six at the default intervals: a pass every 10 s,
/// offsets every 60 s).
const MAX_SLICES: u64 = 6;

/// How many offsets rounds a source connector still counts as moving after it was last seen
/// RUNNING: its tasks commit their last offsets when they stop (a pause, a stop), which can be
/// after Connect reports the new state. Read only in turn, a paused MySQL pipeline showed its
/// binlog position from before the pause, up to [`OFFSETS_ROTATION`] rounds long.
const SETTLE_ROUNDS: u64 = 2;

/// The slices one pass reads: slice numbers `first..end`, counted from this process's first
/// pass, `per_round` of them to a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slices {
    first: u64,
    end: u64,
    per_round: u64,
}

impl Slices {
    /// The round of the pass's last slice, from 1: the one [`moving_sources`] records.
    pub fn round(&self) -> u64 {
        (self.end - 1) / self.per_round + 1
    }
}

/// When each slice is due: slice `s` at `s` slice periods after the first pass, less half a
/// period, so that passes that come a little early or late still read one slice each.
#[derive(Debug, Default)]
pub struct Clock {
    start: Option<Instant>,
    next: u64,
}

impl Clock {
    /// The slices due at `now` and not read yet (now marked read), or None. `interval` is how
    /// often each connector is read; `pass_interval` how often passes run when nothing wakes
    /// them (a round has one slice per pass, up to [`MAX_SLICES`]).
    pub fn take(
        &mut self,
        now: Instant,
        interval: Duration,
        pass_interval: Duration,
    ) -> Option<Slices> {
        let per_round = (interval.as_millis() / pass_interval.as_millis().max(1))
            .clamp(1, u128::from(MAX_SLICES)) as u64;
        let period = (interval.as_nanos() / u128::from(per_round)).max(1);
        let start = *self.start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start).as_nanos() + period / 2;
        let end = (elapsed / period) as u64 + 1;
        if end <= self.next {
            return None;
        }
        let first = self.next.max(end.saturating_sub(per_round));
        self.next = end;
        Some(Slices {
            first,
            end,
            per_round,
        })
    }
}

/// Whether a pass reading `slices` reads this connector's offsets (see the module's
/// invariants).
pub fn due(name: &str, moving: bool, read_before: bool, slices: &Slices) -> bool {
    // FNV-1a: stable across processes and releases, unlike std's hasher.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let slice = (hash / OFFSETS_ROTATION) % slices.per_round;
    (slices.first..slices.end).any(|s| {
        let round = s / slices.per_round + 1;
        s % slices.per_round == slice
            && (moving || !read_before || hash % OFFSETS_ROTATION == round % OFFSETS_ROTATION)
    })
}

/// The source connectors whose offsets round `round` reads every time: those RUNNING now and
/// those seen RUNNING within [`SETTLE_ROUNDS`] rounds. `seen` (name → last round seen RUNNING,
/// one cluster's) is updated; names no longer listed, or settled, leave it. Called by every
/// pass that reads a slice, so several times a round with the same `round`.
pub fn moving_sources<'a>(
    seen: &mut HashMap<String, u64>,
    sources: impl Iterator<Item = (&'a str, bool)>,
    round: u64,
) -> HashSet<String> {
    let mut moving = HashSet::new();
    let mut listed = HashSet::new();
    for (name, running) in sources {
        listed.insert(name);
        if running {
            seen.insert(name.to_string(), round);
        }
        if seen
            .get(name)
            .is_some_and(|r| round.saturating_sub(*r) <= SETTLE_ROUNDS)
        {
            moving.insert(name.to_string());
        }
    }
    seen.retain(|name, r| {
        listed.contains(name.as_str()) && round.saturating_sub(*r) <= SETTLE_ROUNDS
    });
    moving
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_that_stops_running_is_read_for_two_more_rounds_then_in_turn() {
        let mut seen = HashMap::new();
        let round = |seen: &mut HashMap<String, u64>, r, a_running| {
            let mut m: Vec<String> =
                moving_sources(seen, [("a", a_running), ("b", false)].into_iter(), r)
                    .into_iter()
                    .collect();
            m.sort();
            m
        };
        assert_eq!(round(&mut seen, 1, true), ["a"], "running: every round");
        assert_eq!(round(&mut seen, 1, true), ["a"], "a round's next slice");
        // Paused in round 2: its last commit may land after Connect says PAUSED.
        assert_eq!(round(&mut seen, 2, false), ["a"]);
        assert_eq!(round(&mut seen, 3, false), ["a"]);
        assert!(round(&mut seen, 4, false).is_empty(), "settled: in turn");
        assert!(seen.is_empty(), "settled entries leave: {seen:?}");
        assert_eq!(round(&mut seen, 5, true), ["a"], "resumed");
        moving_sources(&mut seen, std::iter::empty(), 6);
        assert!(seen.is_empty(), "a deleted connector's entry leaves");
    }

    const SEC: Duration = Duration::from_secs(1);

    /// Passes at `at` (seconds after the first); what each reads of `names`, given the
    /// connector's (moving, read before).
    fn reads(
        at: &[f64],
        names: &[String],
        kind: (bool, bool),
        interval: Duration,
    ) -> Vec<(f64, Vec<usize>)> {
        let t0 = Instant::now();
        let mut clock = Clock::default();
        at.iter()
            .filter_map(|&t| {
                let slices = clock.take(t0 + SEC.mul_f64(t), interval, 10 * SEC)?;
                let read = (0..names.len())
                    .filter(|&i| due(&names[i], kind.0, kind.1, &slices))
                    .collect();
                Some((t, read))
            })
            .collect()
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("scale-{i:05}")).collect()
    }

    /// Passes every 10 s, some a few seconds early or late, some woken in between: each
    /// moving source is read once in each minute's round, 40 to 80 s after its last read, and
    /// no pass reads over a fifth more than its sixth.
    #[test]
    fn a_round_is_spread_over_the_minute_s_passes_and_reads_each_moving_source_once() {
        let names = names(10_000);
        let mut at = Vec::new();
        for p in 0..60_u32 {
            let jitter = [0.0, 3.0, -2.5, 1.0, -4.0, 0.5][p as usize % 6];
            at.push(f64::from(p) * 10.0 + jitter);
            if p % 7 == 3 {
                at.push(f64::from(p) * 10.0 + 4.0);
            }
        }
        at.sort_by(f64::total_cmp);
        let passes = reads(&at, &names, (true, true), 60 * SEC);
        let mut last: Vec<Option<f64>> = vec![None; names.len()];
        for (t, read) in &passes {
            assert!(read.len() <= 2_000, "a pass at {t} s read {}", read.len());
            for &i in read {
                if let Some(before) = last[i] {
                    let gap = t - before;
                    assert!(
                        (40.0..=80.0).contains(&gap),
                        "{} read {gap} s apart",
                        names[i]
                    );
                }
                last[i] = Some(*t);
            }
        }
        // 60 regular passes: ten rounds of six slices, each reading every moving source.
        let total: usize = passes.iter().map(|(_, r)| r.len()).sum();
        assert_eq!(total, 10 * names.len());
    }

    /// A connector never read is read in its slice of the first round; one read before and not
    /// moving, once in OFFSETS_ROTATION rounds, and the rounds share those reads evenly.
    #[test]
    fn connectors_that_do_not_move_are_read_once_in_ten_rounds() {
        let names = names(10_000);
        let at: Vec<f64> = (0..60 * 10).map(|p| f64::from(p) * 10.0).collect();
        let first = reads(&at[..6], &names, (false, false), 60 * SEC);
        assert_eq!(
            first.iter().map(|(_, r)| r.len()).sum::<usize>(),
            names.len()
        );
        let passes = reads(&at, &names, (false, true), 60 * SEC);
        let mut count = vec![0; names.len()];
        for (_, read) in &passes {
            for &i in read {
                count[i] += 1;
            }
        }
        assert!(count.iter().all(|&c| c == 10), "100 rounds: ten reads each");
        for round in passes.chunks(6) {
            let n: usize = round.iter().map(|(_, r)| r.len()).sum();
            assert!((800..=1_200).contains(&n), "a round read {n} of 10,000");
        }
    }

    /// After a five-minute stall the next pass reads one round (every moving source once), not
    /// five; a pass interval as long as the offsets interval makes one slice a round.
    #[test]
    fn a_late_pass_reads_one_round_and_one_slice_rounds_read_everything() {
        let names = names(3_000);
        let passes = reads(&[0.0, 10.0, 310.0, 320.0], &names, (true, true), 60 * SEC);
        let counts: Vec<usize> = passes.iter().map(|(_, r)| r.len()).collect();
        assert_eq!(counts[2], names.len(), "the late pass: {counts:?}");
        let passes = reads(&[0.0, 4.0, 10.0, 20.0], &names, (true, true), 10 * SEC);
        let counts: Vec<(f64, usize)> = passes.iter().map(|(t, r)| (*t, r.len())).collect();
        assert_eq!(
            counts,
            [(0.0, 3_000), (10.0, 3_000), (20.0, 3_000)],
            "one slice a round"
        );
    }
}
