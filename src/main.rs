//! The `trtis` command: parses the command line and hands off to `cmd`.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cmd::Cli::parse();
    cmd::dispatch(cli)
}
