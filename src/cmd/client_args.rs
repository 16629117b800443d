//! Arguments shared by the subcommands that talk to a server.

use std::process::ExitCode;

use trtis::client::{Client, ClientError, Protocol};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    Http,
    Grpc,
}

#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// Server address, `host:port` (default localhost:8000 for HTTP,
    /// localhost:8001 for gRPC).
    #[arg(short = 'u', long = "url", env = "TRTIS_URL")]
    pub url: Option<String>,

    /// Protocol.
    #[arg(short = 'i', long = "protocol", value_enum, default_value_t = ProtocolArg::Http)]
    pub protocol: ProtocolArg,
}

impl ServerArgs {
    pub fn url(&self) -> String {
        self.url.clone().unwrap_or_else(|| match self.protocol {
            ProtocolArg::Http => "localhost:8000".to_string(),
            ProtocolArg::Grpc => "localhost:8001".to_string(),
        })
    }

    pub fn protocol(&self) -> Protocol {
        match self.protocol {
            ProtocolArg::Http => Protocol::Http,
            ProtocolArg::Grpc => Protocol::Grpc,
        }
    }

    pub async fn connect(&self) -> Result<Client, ClientError> {
        Client::connect(&self.url(), self.protocol()).await
    }
}

/// A current-thread runtime for a short client command.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts")
}

/// Prints `error: MESSAGE` and gives the exit code.
pub fn fail(message: impl std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}

/// A client error as an exit: 2 when the server cannot be reached, 1 when
/// it answered with an error.
pub fn server_error(url: &str, e: ClientError) -> ExitCode {
    if e.is_transport() {
        fail(
            format!("cannot reach a server at {url}: {}", e.message()),
            2,
        )
    } else {
        fail(e.message(), 1)
    }
}
