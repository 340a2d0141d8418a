//! Clusters ClueCDC works with: Kafka clusters (topics, health through the admin API) and
//! Kafka Connect clusters (connectors, through the REST API).

pub mod connect;
pub mod kafka;
pub mod provider_check;
pub mod provider_jar;

pub use connect::*;
