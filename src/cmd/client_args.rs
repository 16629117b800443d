//! Arguments shared by the subcommands that talk to a server.

use std::process::ExitCode;

use trtis::client::{Api, Client, ClientError, Protocol};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    Http,
    Grpc,
}

/// Which API to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiArg {
    /// KServe v2, as Triton (the default).
    V2,
    /// The legacy TRTIS 0.12/1.x API (`/api/...` over HTTP,
    /// `nvidia.inferenceserver.GRPCService` over gRPC).
    V1,
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

    /// The API: v2 (KServe, Triton) or v1 (TRTIS 0.12/1.x).
    #[arg(long = "api", value_enum, default_value_t = ApiArg::V2)]
    pub api: ApiArg,
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

    pub fn api(&self) -> Api {
        match self.api {
            ApiArg::V2 => Api::V2,
            ApiArg::V1 => Api::V1,
        }
    }

    pub async fn connect(&self) -> Result<Client, ClientError> {
        Client::connect_api(&self.url(), self.protocol(), self.api()).await
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
