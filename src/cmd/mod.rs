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
    /// Print a config.pbtxt made from a model file: what auto-complete makes
    /// of it, with placeholders to edit where the file does not say.
    GenConfig(gen_config::Args),
    /// Check Triton model configurations (config.pbtxt) without loading any
    /// model: every finding with file, line and field.
    ValidateConfig(validate_config::Args),
}

/// SIGPIPE ends the process, as by default, only when stdout or stderr is
/// the broken pipe. A socket's is ignored, so the write fails with EPIPE
/// and the client reports it: the HTTP client writes a request body with
/// `writev`, which (unlike `send`) cannot be told MSG_NOSIGNAL, so a server
/// that answers 413 and closes while a large body is still going out would
/// otherwise kill `trtis infer` silently (exit 141).
fn stdout_sigpipe_only() {
    /// The handler: async-signal-safe calls only (poll, signal, raise). A
    /// pipe's write end polls POLLERR once its reader is gone (a socket's,
    /// POLLERR or POLLHUP).
    extern "C" fn on_sigpipe(_: libc::c_int) {
        let mut fds = [1, 2].map(|fd| libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        });
        // SAFETY: two valid pollfd entries, no wait.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        let broken = ready > 0
            && fds
                .iter()
                .any(|p| p.revents & (libc::POLLERR | libc::POLLHUP) != 0);
        if broken {
            // Dies of SIGPIPE once the handler returns (the signal is
            // blocked while it runs), as a Unix tool does.
            // SAFETY: both are async-signal-safe.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                libc::raise(libc::SIGPIPE);
            }
        }
    }
    // SAFETY: installing a handler that only makes async-signal-safe
    // calls, before any thread starts.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigpipe as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGPIPE, &action, std::ptr::null_mut());
    }
}

/// Runs the chosen subcommand.
pub fn dispatch(cli: Cli) -> ExitCode {
    if !matches!(cli.command, Command::Serve(_)) {
        // A command whose output is piped into `head` ends quietly when the
        // reader does, as Unix tools do (Rust ignores SIGPIPE, so `println!`
        // panicked on the closed pipe). The server keeps ignoring it.
        stdout_sigpipe_only();
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
