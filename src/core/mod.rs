//! The engine and everything under it: the model configuration and
//! repository (the foundation), backends, instances, schedulers and the
//! engine API. The wire (frontends, protocols, `/metrics`) is
//! [`crate::server`], which `core` never names.

pub mod backend;
pub mod batch_io;
pub mod cache;
pub mod classify;
pub mod config;
pub mod device;
pub mod engine;
pub mod error;
pub mod fsutil;
pub mod instance;
pub mod logging;
pub mod metrics;
pub mod openai;
pub mod rate_limit;
pub mod remote;
pub mod repository;
pub mod request;
pub mod responder;
pub mod scheduler;
pub mod shm;
pub mod trace;
pub mod types;
pub mod warmup;

pub use engine::{Engine, ServerConfig};
pub use error::{Error, ErrorKind};
