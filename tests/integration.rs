//! The one integration test binary (one link on a 2-core machine): each
//! module is a group of user-level tests.

mod util;

mod batching;
mod cli;
mod client;
mod config_cases;
mod config_support;
mod ensemble;
mod examples;
mod flags;
mod fuzz;
mod gpu;
mod grpc;
mod http;
mod image;
mod infer_image;
mod lifecycle;
mod parse;
mod perf;
mod schema;
mod sequence;
mod serve;
mod slowloris;
mod tidy;
