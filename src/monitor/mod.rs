//! Background checks that turn observations into alerts. (Lag, slots, freshness and alert
//! rules join this module with the monitoring work.)

pub mod alerts;
pub mod channels;
pub mod history;
pub mod leaks;
pub mod metrics;
pub mod provider_checks;
pub mod signals;
pub mod webhooks;
