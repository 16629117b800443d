//! The engine and everything under it: the model configuration and
//! repository (the foundation), backends, instances, the engine API, the
//! wire protocols and the frontends.

pub mod backend;
pub mod batch_io;
pub mod cache;
pub mod classify;
pub mod config;
pub mod custom_metrics;
pub mod device;
pub mod engine;
pub mod error;
pub mod frontend;
pub mod fsutil;
pub mod instance;
pub mod latency_metrics;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod metrics_settings;
pub mod openai;
pub mod protocol;
pub mod rate_limit;
pub mod remote;
pub mod repository;
pub mod request;
pub mod responder;
pub mod scheduler;
pub mod shm;
pub mod stats;
pub mod trace;
pub mod types;
pub mod warmup;

pub use engine::{Engine, ServerConfig};
pub use error::{Error, ErrorKind};
