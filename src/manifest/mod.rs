//! Configuration as code: one declarative document (`apiVersion: cluecdc/v1`) describing a whole
//! setup by name (connections, Kafka and Connect clusters, pipelines, deliveries, alert rules
//! and webhooks) that `export` writes, `plan` compares with what is stored, and `apply` carries
//! out through the same service functions as the API; and the Strimzi hand-over both ways.
//! Secrets never appear as values: a secret field names where apply reads it.

pub mod apply;
pub mod doc;
pub mod export;
pub mod plan;
pub mod strimzi;
