//! What a replication has copied, measured on both clusters: MirrorMaker's offset syncs give
//! the newest (source offset, target offset) pair it recorded per partition; target offsets
//! after that pair follow source offsets one to one (MirrorMaker copies every record in order),
//! so `source offset copied up to = sync.upstream + (target end − sync.downstream)`. Checkpoints
//! give each consumer group's translated offsets; heartbeats only show the heartbeat connector
//! runs.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::Replication;
use crate::clusters::kafka::KafkaCluster;
use crate::kafka::{self, KafkaAccess};
use crate::secrets::store::SecretStore;

/// What a replication has copied, measured on both clusters just now.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ReplicationProgress")]
pub struct Progress {
    pub partitions: Vec<PartitionProgress>,
    /// Records on the source not on the target yet, over all partitions.
    pub lag_records: i64,
    /// Age of the oldest record not copied yet (0 when everything is copied).
    pub lag_secs: Option<f64>,
    pub checkpoints: Vec<GroupCheckpoints>,
    /// Age of the newest heartbeat on the target: the heartbeat connector runs. Not proof
    /// that topics are copied.
    pub heartbeat_age_secs: Option<f64>,
    /// Why something could not be measured.
    pub error: Option<String>,
    /// Why the checkpoints could not be read (the rest is measured without them).
    pub checkpoints_error: Option<String>,
}

/// How far one source partition is copied.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "ReplicationPartitionProgress")]
pub struct PartitionProgress {
    pub topic: String,
    pub partition: i32,
    pub source_end: i64,
    pub target_topic: String,
    /// None while the target topic does not exist yet.
    pub target_end: Option<i64>,
    /// Source offsets below this are on the target.
    pub copied_to: i64,
    pub lag_records: i64,
    /// Whether an offset sync anchored `copied_to` (otherwise it counts from the log start).
    pub synced: bool,
}

/// A consumer group's checkpoints: its translated offsets on the target.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct GroupCheckpoints {
    pub group: String,
    /// When its newest checkpoint was written.
    pub newest_at: Option<String>,
    /// Age of the group's newest checkpoint. MirrorMaker writes one only when the translated
    /// offset moves, so an old checkpoint can still be the best there is.
    pub age_secs: Option<f64>,
    /// Whether no partition is owed a newer checkpoint (see [`owed`]).
    pub current: bool,
    /// How long MirrorMaker has owed the group a newer checkpoint: since the later of the
    /// partition's newest checkpoint and the offset sync that makes a newer one possible, the
    /// most over partitions; 0 while current.
    pub stale_secs: f64,
    pub partitions: Vec<Checkpoint>,
}

/// One partition of a consumer group, translated to the target.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(rename = "GroupCheckpoint")]
pub struct Checkpoint {
    /// The topic on the target (MirrorMaker names checkpoints by it).
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset on the source, as of the checkpoint.
    pub upstream: i64,
    /// Where a consumer of the group resumes on the target: the translated offset.
    pub downstream: i64,
    /// Where the group's committed position is on the target (the copy of the source record
    /// at `upstream`), from the newest offset sync; None before a sync for the partition.
    pub position_on_target: Option<i64>,
    /// Records a consumer resuming at `downstream` reads again (already read on the source).
    pub replay: Option<i64>,
    /// Records it would never read (translated past its position; MirrorMaker avoids that).
    pub miss: Option<i64>,
    /// Whether MirrorMaker owes a newer checkpoint for this partition (see [`owed`]).
    pub owed: bool,
    /// When the checkpoint was written (ms since the epoch).
    #[serde(skip)]
    pub written_ms: Option<i64>,
}

/// Whether MirrorMaker owes a group a newer checkpoint for a partition. At or past the newest
/// offset sync (`upstream`, `downstream`) its translation of the group's commit is exact (the
/// sync's downstream offset, one past it for a commit past the sync), and it writes a
/// checkpoint as soon as that is ahead of the last one. A commit behind the newest sync is
/// translated from whichever older syncs MirrorMaker kept in memory (it keeps them ever
/// sparser further back), so no newer checkpoint can be expected of it.
pub fn owed(committed: i64, newest_sync: (i64, i64), checkpoint_downstream: i64) -> bool {
    let (upstream, downstream) = newest_sync;
    committed >= upstream && downstream + i64::from(committed > upstream) > checkpoint_downstream
}

/// Kafka's protocol types, as MirrorMaker serializes its internal records.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

/// An offset sync: key (topic, partition), value (upstream, downstream).
pub fn parse_offset_sync(key: &[u8], value: &[u8]) -> Option<((String, i32), (i64, i64))> {
    let mut k = Reader(key);
    let mut v = Reader(value);
    Some(((k.string()?, k.i32()?), (v.i64()?, v.i64()?)))
}

/// A checkpoint: key (group, topic, partition), value (version header, upstream, downstream,
/// metadata).
pub fn parse_checkpoint(key: &[u8], value: &[u8]) -> Option<(String, Checkpoint)> {
    let mut k = Reader(key);
    let group = k.string()?;
    let (topic, partition) = (k.string()?, k.i32()?);
    let mut v = Reader(value);
    let _version = v.i16()?;
    Some((
        group,
        Checkpoint {
            topic,
            partition,
            upstream: v.i64()?,
            downstream: v.i64()?,
            position_on_target: None,
            replay: None,
            miss: None,
            owed: false,
            written_ms: None,
        },
    ))
}

/// The source topic a target topic copies (None for a topic this replication did not name).
fn upstream_topic(r: &Replication, remote_topic: &str) -> Option<String> {
    if r.replication_policy == "identity" {
        return Some(remote_topic.to_string());
    }
    remote_topic
        .strip_prefix(&format!("{}{}", r.source_alias, r.separator))
        .map(String::from)
}

fn remote(r: &Replication, topic: &str) -> String {
    if r.replication_policy == "identity" {
        topic.to_string()
    } else {
        format!("{}{}{topic}", r.source_alias, r.separator)
    }
}

fn age(now: i64, ms: i64) -> f64 {
    ((now - ms).max(0) as f64) / 1000.0
}

pub async fn progress(
    store: &SecretStore,
    r: &Replication,
    source: &KafkaCluster,
    target: &KafkaCluster,
) -> Progress {
    match measure(store, r, source, target).await {
        Ok(p) => p,
        Err(e) => Progress {
            error: Some(e),
            ..Default::default()
        },
    }
}

async fn measure(
    store: &SecretStore,
    r: &Replication,
    source: &KafkaCluster,
    target: &KafkaCluster,
) -> Result<Progress, String> {
    let (src, dst): (KafkaAccess, KafkaAccess) = (
        crate::clusters::kafka::access(store, source)
            .await
            .map_err(|e| e.to_string())?,
        crate::clusters::kafka::access(store, target)
            .await
            .map_err(|e| e.to_string())?,
    );
    let m = super::matcher(&r.topics)?;
    let topics = kafka::topics(&src, None).await?;
    let wanted: Vec<(String, i32)> = topics
        .iter()
        .filter(|t| !super::internal(&t.name) && m.is_match(&t.name))
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.clone(), p.id)))
        .collect();
    let remote_wanted: Vec<(String, i32)> =
        wanted.iter().map(|(t, p)| (remote(r, t), *p)).collect();
    let syncs_topic = super::config::offset_syncs_topic(
        &r.offset_syncs_location,
        &r.source_alias,
        &r.target_alias,
    );
    let syncs_on = if r.offset_syncs_location == "source" {
        &src
    } else {
        &dst
    };
    let checkpoints_topic = format!("{}.checkpoints.internal", r.source_alias);
    let (src_marks, dst_marks, syncs, checkpoints) = tokio::join!(
        kafka::partition_marks(&src, &wanted),
        kafka::partition_marks(&dst, &remote_wanted),
        kafka::read_topic(syncs_on, &syncs_topic, 200_000),
        kafka::read_topic(&dst, &checkpoints_topic, 200_000),
    );
    let (src_marks, dst_marks) = (src_marks?, dst_marks?);
    // The newest offset sync per source partition, and when it was written.
    let mut latest: HashMap<(String, i32), (i64, i64)> = HashMap::new();
    let mut synced_at: HashMap<(String, i32), i64> = HashMap::new();
    for rec in syncs? {
        if let (Some(k), Some(v)) = (&rec.key, &rec.value) {
            if let Some((tp, pair)) = parse_offset_sync(k, v) {
                match rec.timestamp {
                    Some(ms) => synced_at.insert(tp.clone(), ms),
                    None => synced_at.remove(&tp),
                };
                latest.insert(tp, pair);
            }
        }
    }
    let mut partitions = Vec::new();
    for (topic, partition) in &wanted {
        let Some(&(low, high)) = src_marks.get(&(topic.clone(), *partition)) else {
            continue;
        };
        let target_topic = remote(r, topic);
        let target_end = dst_marks
            .get(&(target_topic.clone(), *partition))
            .map(|&(_, h)| h);
        let sync = latest.get(&(topic.clone(), *partition));
        let copied_to = match (sync, target_end) {
            (Some(&(up, down)), Some(end)) => up + (end - down),
            (None, Some(end)) => low + end,
            (_, None) => low,
        }
        .clamp(low, high);
        partitions.push(PartitionProgress {
            topic: topic.clone(),
            partition: *partition,
            source_end: high,
            target_topic,
            target_end,
            copied_to,
            lag_records: high - copied_to,
            synced: sync.is_some(),
        });
    }
    partitions
        .sort_by(|a, b| (a.topic.as_str(), a.partition).cmp(&(b.topic.as_str(), b.partition)));
    let now = crate::reconcile::lease::now_ms();
    let behind: Vec<kafka::RecordAt> = partitions
        .iter()
        .filter(|p| p.lag_records > 0)
        .map(|p| kafka::RecordAt {
            topic: p.topic.clone(),
            partition: p.partition,
            offset: p.copied_to,
        })
        .collect();
    let lag_secs = match behind.is_empty() {
        true => Some(0.0),
        false => kafka::record_times(&src, &behind).await.ok().map(|t| {
            t.into_iter()
                .flatten()
                .map(|ms| age(now, ms))
                .fold(0.0, f64::max)
        }),
    };
    // Checkpoints per group: when its newest came, and the newest per (target topic, partition).
    type Newest = (Option<i64>, BTreeMap<(String, i32), Checkpoint>);
    let mut groups: BTreeMap<String, Newest> = BTreeMap::new();
    let (checkpoints, checkpoints_error) = match checkpoints {
        Ok(c) => (c, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    for rec in checkpoints {
        if let (Some(k), Some(v)) = (&rec.key, &rec.value) {
            if let Some((group, mut c)) = parse_checkpoint(k, v) {
                // The checkpoints topic is per source alias: other replications' topics (or
                // topics this one no longer copies) are not this one's to show.
                if !remote_wanted
                    .iter()
                    .any(|(t, p)| *t == c.topic && *p == c.partition)
                {
                    continue;
                }
                // Offsets after a sync follow one to one, so the copy of source offset C is
                // at sync.downstream + (C − sync.upstream).
                let sync = upstream_topic(r, &c.topic).and_then(|t| latest.get(&(t, c.partition)));
                if let Some(&(up, down)) = sync {
                    let at = down + (c.upstream - up);
                    c.position_on_target = Some(at);
                    c.replay = Some((at - c.downstream).max(0));
                    c.miss = Some((c.downstream - at).max(0));
                }
                c.written_ms = rec.timestamp;
                let e = groups.entry(group).or_default();
                e.0 = e.0.max(rec.timestamp);
                e.1.insert((c.topic.clone(), c.partition), c);
            }
        }
    }
    let source_topics: Vec<String> = wanted.iter().map(|(t, _)| t.clone()).collect();
    let mut checkpoints = Vec::new();
    for (group, (newest, parts)) in groups {
        let mut partitions: Vec<Checkpoint> = parts.into_values().collect();
        // The group's commits on the source now, against the newest offset syncs.
        let committed: HashMap<(String, i32), i64> = kafka::group_lag(&src, &group, &source_topics)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter_map(|l| l.committed.map(|c| ((l.topic, l.partition), c)))
            .collect();
        let mut stale_secs: f64 = 0.0;
        for c in &mut partitions {
            let Some(tp) = upstream_topic(r, &c.topic).map(|t| (t, c.partition)) else {
                continue;
            };
            let (Some(&commit), Some(&sync)) = (committed.get(&tp), latest.get(&tp)) else {
                continue;
            };
            c.owed = owed(commit, sync, c.downstream);
            if c.owed {
                let since = c.written_ms.max(synced_at.get(&tp).copied()).unwrap_or(now);
                stale_secs = stale_secs.max(age(now, since));
            }
        }
        let age_secs = newest.map(|ms| age(now, ms));
        checkpoints.push(GroupCheckpoints {
            group,
            newest_at: newest
                .and_then(chrono::DateTime::from_timestamp_millis)
                .map(crate::time::format),
            current: !partitions.iter().any(|c| c.owed),
            stale_secs,
            age_secs,
            partitions,
        });
    }
    let heartbeat_age_secs = newest_record(&dst, "heartbeats")
        .await
        .map(|ms| age(now, ms));
    Ok(Progress {
        lag_records: partitions.iter().map(|p| p.lag_records).sum(),
        partitions,
        lag_secs,
        checkpoints,
        heartbeat_age_secs,
        error: None,
        checkpoints_error,
    })
}

/// The timestamp of the newest record of a one-partition topic.
async fn newest_record(access: &KafkaAccess, topic: &str) -> Option<i64> {
    let marks = kafka::partition_marks(access, &[(topic.to_string(), 0)])
        .await
        .ok()?;
    let &(low, high) = marks.get(&(topic.to_string(), 0))?;
    if high <= low {
        return None;
    }
    kafka::record_times(
        access,
        &[kafka::RecordAt {
            topic: topic.into(),
            partition: 0,
            offset: high - 1,
        }],
    )
    .await
    .ok()?
    .into_iter()
    .next()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> Vec<u8> {
        let mut v = (s.len() as i16).to_be_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }

    #[test]
    fn mirror_makers_internal_records_are_read_as_kafka_writes_them() {
        let mut key = string("shop.orders");
        key.extend_from_slice(&3i32.to_be_bytes());
        let mut value = 120i64.to_be_bytes().to_vec();
        value.extend_from_slice(&100i64.to_be_bytes());
        assert_eq!(
            parse_offset_sync(&key, &value),
            Some((("shop.orders".to_string(), 3), (120, 100)))
        );
        assert_eq!(
            parse_offset_sync(&key[..5], &value),
            None,
            "a short key is no sync"
        );

        let mut key = string("billing");
        key.extend(string("shop.orders"));
        key.extend_from_slice(&0i32.to_be_bytes());
        let mut value = 0i16.to_be_bytes().to_vec();
        value.extend_from_slice(&42i64.to_be_bytes());
        value.extend_from_slice(&40i64.to_be_bytes());
        value.extend(string(""));
        let (group, c) = parse_checkpoint(&key, &value).unwrap();
        assert_eq!(group, "billing");
        assert_eq!(
            (c.topic.as_str(), c.partition, c.upstream, c.downstream),
            ("shop.orders", 0, 42, 40)
        );
    }

    #[test]
    fn a_newer_checkpoint_is_owed_only_where_mirror_makers_translation_is_exact_and_ahead() {
        // Newest sync: source offset 1000 copied to target offset 900.
        let sync = (1000, 900);
        // The group committed past the sync: MirrorMaker translates it to 901.
        assert!(owed(1500, sync, 500), "a checkpoint from before the sync");
        assert!(
            !owed(1500, sync, 901),
            "the checkpoint carries that translation"
        );
        // At the sync exactly: 900.
        assert!(owed(1000, sync, 899));
        assert!(!owed(1000, sync, 900));
        // Behind the newest sync MirrorMaker translates from the sparse older syncs it kept:
        // whatever checkpoint it wrote is as good as it gets.
        assert!(!owed(999, sync, 0));
        // Never a downstream rewind.
        assert!(!owed(1500, sync, 950));
    }
}
