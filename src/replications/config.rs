//! The three MirrorMaker 2 connectors of a replication, rendered from its settings. Pure: the
//! same settings always give the same configs (golden-tested). The three share one set of
//! cluster aliases, replication policy, separator and offset-syncs location, as MirrorMaker 2
//! requires of connectors that work together (seed 004).

use std::collections::BTreeMap;

use crate::clusters::kafka::KafkaCluster;

pub const SOURCE_CLASS: &str = "org.apache.kafka.connect.mirror.MirrorSourceConnector";
pub const CHECKPOINT_CLASS: &str = "org.apache.kafka.connect.mirror.MirrorCheckpointConnector";
pub const HEARTBEAT_CLASS: &str = "org.apache.kafka.connect.mirror.MirrorHeartbeatConnector";
const BYTES: &str = "org.apache.kafka.connect.converters.ByteArrayConverter";

/// What the connectors are rendered from.
#[derive(Debug, Clone)]
pub struct Spec<'a> {
    pub source: &'a KafkaCluster,
    pub target: &'a KafkaCluster,
    /// The Kafka cluster the Connect workers write to; when it is not the target, the
    /// connectors' producers are pointed at the target (`producer.override.*`).
    pub connect_kafka_cluster_id: Option<&'a str>,
    pub source_alias: &'a str,
    pub target_alias: &'a str,
    /// A comma-separated list of regular expressions (MirrorMaker's `topics`).
    pub topics: &'a str,
    pub groups: &'a str,
    pub identity: bool,
    pub separator: &'a str,
    /// `target` or `source`.
    pub offset_syncs_location: &'a str,
    pub sync_group_offsets: bool,
}

impl Spec<'_> {
    /// The name a source topic gets on the target.
    pub fn remote_topic(&self, topic: &str) -> String {
        if self.identity {
            topic.to_string()
        } else {
            format!("{}{}{topic}", self.source_alias, self.separator)
        }
    }

    /// MirrorMaker's internal topics: (name, on the target cluster, compacted).
    pub fn internal_topics(&self) -> Vec<(String, bool, bool)> {
        let on_target = self.offset_syncs_location == "target";
        vec![
            ("heartbeats".to_string(), true, true),
            (
                format!("{}.checkpoints.internal", self.source_alias),
                true,
                true,
            ),
            (
                offset_syncs_topic(
                    self.offset_syncs_location,
                    self.source_alias,
                    self.target_alias,
                ),
                on_target,
                true,
            ),
        ]
    }
}

/// MirrorMaker names the offset-syncs topic after the cluster it does not live on: on the
/// target, `mm2-offset-syncs.<source alias>.internal`; on the source, after the target's alias.
pub fn offset_syncs_topic(location: &str, source_alias: &str, target_alias: &str) -> String {
    let other = if location == "target" {
        source_alias
    } else {
        target_alias
    };
    format!("mm2-offset-syncs.{other}.internal")
}

/// A cluster's client settings under `prefix` (`source.cluster.`, `target.cluster.`,
/// `producer.override.`): bootstrap servers and security, the password and the CA only as
/// `${cluecdc:…}` references.
fn client(prefix: &str, k: &KafkaCluster) -> BTreeMap<String, String> {
    let mut c: BTreeMap<String, String> = k
        .java_client_settings()
        .into_iter()
        .map(|(key, v)| (format!("{prefix}{key}"), v))
        .collect();
    c.insert(
        format!("{prefix}bootstrap.servers"),
        k.bootstrap_servers.clone(),
    );
    c
}

/// The settings all three connectors share.
fn common(s: &Spec<'_>, class: &str) -> BTreeMap<String, String> {
    let mut c = BTreeMap::new();
    c.insert("connector.class".into(), class.into());
    c.insert("tasks.max".into(), "1".into());
    c.insert("source.cluster.alias".into(), s.source_alias.into());
    c.insert("target.cluster.alias".into(), s.target_alias.into());
    c.insert(
        "replication.policy.class".into(),
        if s.identity {
            "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
        } else {
            "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
        }
        .into(),
    );
    c.insert("replication.policy.separator".into(), s.separator.into());
    c.insert(
        "offset-syncs.topic.location".into(),
        s.offset_syncs_location.into(),
    );
    // Records are copied as they are: bytes in, bytes out.
    c.insert("key.converter".into(), BYTES.into());
    c.insert("value.converter".into(), BYTES.into());
    c.insert("header.converter".into(), BYTES.into());
    c.extend(client("source.cluster.", s.source));
    c.extend(client("target.cluster.", s.target));
    if s.connect_kafka_cluster_id != Some(s.target.id.as_str()) {
        c.extend(client("producer.override.", s.target));
    }
    c
}

/// (connector name, config) for the source, checkpoint and heartbeat connectors, in that order.
pub fn connectors(s: &Spec<'_>, names: [&str; 3]) -> [(String, BTreeMap<String, String>); 3] {
    let mut source = common(s, SOURCE_CLASS);
    source.insert("topics".into(), s.topics.into());
    // ClueCDC creates the internal topics itself; the replicated topics MirrorMaker creates
    // on the target with the source's partition count.
    source.insert("replication.factor".into(), "1".into());
    source.insert("offset-syncs.topic.replication.factor".into(), "1".into());
    source.insert("refresh.topics.interval.seconds".into(), "10".into());
    source.insert("sync.topic.configs.enabled".into(), "true".into());
    source.insert("sync.topic.acls.enabled".into(), "false".into());
    let mut checkpoint = common(s, CHECKPOINT_CLASS);
    checkpoint.insert("groups".into(), s.groups.into());
    checkpoint.insert("checkpoints.topic.replication.factor".into(), "1".into());
    checkpoint.insert("emit.checkpoints.interval.seconds".into(), "5".into());
    checkpoint.insert("refresh.groups.interval.seconds".into(), "10".into());
    checkpoint.insert(
        "sync.group.offsets.enabled".into(),
        s.sync_group_offsets.to_string(),
    );
    if s.sync_group_offsets {
        checkpoint.insert("sync.group.offsets.interval.seconds".into(), "5".into());
    }
    let mut heartbeat = common(s, HEARTBEAT_CLASS);
    // The heartbeat connector reads no offset syncs.
    heartbeat.remove("offset-syncs.topic.location");
    heartbeat.insert("heartbeats.topic.replication.factor".into(), "1".into());
    heartbeat.insert("emit.heartbeats.interval.seconds".into(), "5".into());
    [
        (names[0].to_string(), source),
        (names[1].to_string(), checkpoint),
        (names[2].to_string(), heartbeat),
    ]
}

/// `cluecdc-mirror-<slug>-source|checkpoint|heartbeat`.
pub fn connector_names(name: &str) -> [String; 3] {
    let slug = crate::connections::settings::slug(name).replace('_', "-");
    ["source", "checkpoint", "heartbeat"].map(|k| format!("cluecdc-mirror-{slug}-{k}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(id: &str, bootstrap: &str, scram: bool) -> KafkaCluster {
        KafkaCluster {
            id: id.into(),
            name: id.into(),
            bootstrap_servers: bootstrap.into(),
            security_protocol: if scram { "SASL_SSL" } else { "PLAINTEXT" }.into(),
            sasl_mechanism: scram.then(|| "SCRAM-SHA-512".into()),
            sasl_username: scram.then(|| "mirror".into()),
            tls_ca_certificate: scram.then(|| "-----BEGIN CERTIFICATE-----".into()),
            secret_ref: format!("ref_{id}"),
            health: None,
            health_at: None,
            created_at: String::new(),
            updated_at: String::new(),
        }
    }

    #[test]
    fn the_three_connectors_agree_and_keep_credentials_as_references() {
        let (src, dst) = (
            cluster("kc_a", "a:9092", false),
            cluster("kc_b", "b:9093", true),
        );
        let spec = Spec {
            source: &src,
            target: &dst,
            connect_kafka_cluster_id: Some("kc_a"),
            source_alias: "primary",
            target_alias: "dr",
            topics: "shop\\..*",
            groups: ".*",
            identity: false,
            separator: ".",
            offset_syncs_location: "target",
            sync_group_offsets: true,
        };
        let names = connector_names("DR copy");
        assert_eq!(names[0], "cluecdc-mirror-dr-copy-source");
        let all = connectors(&spec, [&names[0], &names[1], &names[2]]);
        let got: BTreeMap<&str, &BTreeMap<String, String>> =
            all.iter().map(|(n, c)| (n.as_str(), c)).collect();
        let golden = include_str!("../../tests/golden/replication_connectors.json");
        assert_eq!(
            serde_json::to_value(&got).unwrap(),
            serde_json::from_str::<serde_json::Value>(golden).unwrap(),
            "{}",
            serde_json::to_string_pretty(&got).unwrap()
        );
        for key in [
            "source.cluster.alias",
            "target.cluster.alias",
            "replication.policy.class",
            "replication.policy.separator",
            "offset-syncs.topic.location",
        ] {
            let values: Vec<&String> = all.iter().filter_map(|(_, c)| c.get(key)).collect();
            assert!(values.len() >= 2, "{key} in the connectors that read it");
            assert!(values.windows(2).all(|w| w[0] == w[1]), "{key}: {values:?}");
        }
        let text = serde_json::to_string(&got).unwrap();
        assert!(text.contains("${cluecdc:ref_kc_b:sasl_password}"));
        assert_eq!(spec.remote_topic("shop.orders"), "primary.shop.orders");
        let identity = Spec {
            identity: true,
            ..spec.clone()
        };
        assert_eq!(identity.remote_topic("shop.orders"), "shop.orders");
        // Connect attached to the target: no producer override.
        let attached = Spec {
            connect_kafka_cluster_id: Some("kc_b"),
            ..spec
        };
        let c = &connectors(&attached, [&names[0], &names[1], &names[2]])[0].1;
        assert!(!c.keys().any(|k| k.starts_with("producer.override.")));
    }
}
