//! What the server counts and measures, kept by the engine and read by
//! `/metrics` and the statistics extension: the metrics flags
//! ([`settings`]), per-version statistics ([`stats`]), the optional
//! latency summaries and histogram ([`latency`]), the metrics a model
//! defines for itself ([`custom`]) and memory readings ([`memory`]).
//! Rendering them for Prometheus is the wire's job
//! (`server::prometheus`).

pub mod custom;
pub mod latency;
pub mod memory;
pub mod settings;
pub mod stats;
