//! The engine and everything under it. `config` and `repository` are the
//! foundation: the Triton model configuration and the model repository.

pub mod config;
pub mod device;
pub mod repository;
