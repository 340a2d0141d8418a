//! ClueCDC: a control plane for change data capture on Kafka Connect.
//!
//! The binary in `main.rs` is a thin CLI over this library; `app` is the one composition root
//! that both the binary and the integration tests use.

// Tests may unwrap; the library may not (see [lints.clippy] in Cargo.toml).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod app;
pub mod assets;
pub mod audit;
pub mod auth;
pub mod backup;
pub mod bulk;
pub mod cli;
pub mod clusters;
pub mod config;
pub mod connect;
pub mod connections;
pub mod connectors;
pub mod ctx;
pub mod db;
pub mod deliveries;
pub mod error;
pub mod kafka;
pub mod listing;
pub mod manifest;
pub mod monitor;
pub mod operations;
pub mod pipelines;
pub mod reconcile;
pub mod replications;
pub mod secrets;
pub mod snapshots;
pub mod store_copy;
pub mod tables;
pub mod telemetry;
pub mod time;
pub mod web;
pub mod wire;
