//! `ModelConfig` as JSON the way Triton emits it: `core::config::json`,
//! named here too because the frontends serve it.

pub use crate::core::config::json::{from_json, to_json};
