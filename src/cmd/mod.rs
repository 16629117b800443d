//! The `trtis` command line: one file per subcommand, each with its clap
//! `Args` and a `run` that returns the process exit code. Only this module
//! knows about flags, stdout formatting and exit codes.

mod client_args;
mod gen_config;
mod infer;
mod infer_image;
mod npy;
mod perf;
mod remote_repo;
mod serve;
mod status;
mod validate_config;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// trtis: a Triton-compatible inference server toolkit.
#[derive(Debug, Parser)]
#[command(name = "trtis", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve a Triton model repository over KServe v2 HTTP/REST and gRPC (and
    /// Prometheus metrics). Takes every `tritonserver` flag (Triton's
    /// spellings, unambiguous prefixes included).
    #[command(infer_long_args = true, args_override_self = true)]
    Serve(Box<serve::Args>),
    /// Run one inference against a Triton-protocol server (HTTP or gRPC).
    Infer(infer::Args),
    /// Show a server's health, models and statistics (exit 0 only when ready).
    Status(status::Args),
    /// Measure a model's throughput and latency under load (Triton's
    /// perf_client / perf_analyzer, with their flags and CSV).
    Perf(perf::Args),
    /// Print the config.pbtxt that auto-complete makes for an ONNX model, or
    /// what a TorchScript module's forward() allows (placeholders to edit).
    GenConfig(gen_config::Args),
    /// Check Triton model configurations (config.pbtxt) without loading any
    /// model: every finding with file, line and field.
    ValidateConfig(validate_config::Args),
}

/// Runs the chosen subcommand.
pub fn dispatch(cli: Cli) -> ExitCode {
    if !matches!(cli.command, Command::Serve(_)) {
        // A command whose output is piped into `head` ends quietly when the
        // reader does, as Unix tools do (Rust ignores SIGPIPE, so `println!`
        // panicked on the closed pipe). Socket writes are not affected: the
        // standard library sends with MSG_NOSIGNAL. The server keeps
        // ignoring it.
        // SAFETY: setting a signal's disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::ValidateConfig(args) => validate_config::run(args),
        Command::GenConfig(args) => gen_config::run(args),
        Command::Infer(args) => infer::run(args),
        Command::Status(args) => status::run(args),
        Command::Perf(args) => perf::run(args),
    }
}
