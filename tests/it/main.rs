//! ONE integration-test binary: helpers plus one file per domain. Every test here talks to the
//! real binary and, where it needs one, to the real native stack (`scripts/stack`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod helpers;

mod access;
mod app_smoke;
mod bulk;
mod channels;
mod connect_rebalance;
mod connections;
mod deliveries;
mod ha;
mod hostile;
mod isolation;
mod lists;
mod manifest;
mod monitoring;
mod mysql;
mod mysql_sink;
mod object_storage;
mod oidc;
mod pipelines;
mod provider_check;
mod provider_jar;
mod reconciler;
mod replications;
mod secrets;
mod stack_smoke;
mod store;
mod tables_freshness;
mod tables_progress;
mod tables_schema;
mod tls;
