//! Arguments shared by the subcommands that talk to a server.

use std::process::ExitCode;

use std::path::PathBuf;

use trtis::client::{Api, Client, ClientError, ClientTls, ConnectOptions, Protocol};

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

    /// A header sent with every request, "Name:Value" (repeatable; over
    /// gRPC as metadata, e.g. triton-grpc-protocol-<key>:<value> for a
    /// restricted protocol).
    #[arg(short = 'H', long = "header", value_name = "NAME:VALUE")]
    pub headers: Vec<String>,

    /// gRPC over TLS.
    #[arg(long = "ssl-grpc-use-ssl")]
    pub ssl_grpc_use_ssl: bool,

    /// gRPC TLS: the root certificate(s) the server's must chain to (PEM).
    #[arg(long = "ssl-grpc-root-certifications-file", value_name = "FILE")]
    pub ssl_grpc_root: Option<PathBuf>,

    /// gRPC TLS: the client's private key (PEM), for mutual TLS.
    #[arg(long = "ssl-grpc-private-key-file", value_name = "FILE")]
    pub ssl_grpc_key: Option<PathBuf>,

    /// gRPC TLS: the client's certificate chain (PEM), for mutual TLS.
    #[arg(long = "ssl-grpc-certificate-chain-file", value_name = "FILE")]
    pub ssl_grpc_cert: Option<PathBuf>,

    /// HTTPS: check the server's certificate (1) or accept any (0).
    #[arg(long = "ssl-https-verify-peer", value_name = "0|1")]
    pub ssl_https_verify_peer: Option<u8>,

    /// HTTPS: check that the certificate names the host (2, or 1 as
    /// libcurl does) or not (0).
    #[arg(long = "ssl-https-verify-host", value_name = "0|1|2")]
    pub ssl_https_verify_host: Option<u8>,

    /// HTTPS: the CA certificate(s) the server's must chain to (PEM).
    #[arg(long = "ssl-https-ca-certificates-file", value_name = "FILE")]
    pub ssl_https_ca: Option<PathBuf>,

    /// HTTPS: the client's certificate (for mutual TLS).
    #[arg(long = "ssl-https-client-certificate-file", value_name = "FILE")]
    pub ssl_https_cert: Option<PathBuf>,

    /// HTTPS: the client certificate's format (PEM only).
    #[arg(long = "ssl-https-client-certificate-type", value_name = "PEM")]
    pub ssl_https_cert_type: Option<String>,

    /// HTTPS: the client's private key (for mutual TLS).
    #[arg(long = "ssl-https-private-key-file", value_name = "FILE")]
    pub ssl_https_key: Option<PathBuf>,

    /// HTTPS: the private key's format (PEM only).
    #[arg(long = "ssl-https-private-key-type", value_name = "PEM")]
    pub ssl_https_key_type: Option<String>,
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

    /// The headers and TLS settings; a setting for the other protocol, or
    /// one trtis cannot honour, is refused.
    pub fn options(&self) -> Result<ConnectOptions, String> {
        let mut headers = Vec::new();
        for h in &self.headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| format!("-H expects \"Name:Value\", got '{h}'"))?;
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
        let grpc_given = self.ssl_grpc_use_ssl
            || self.ssl_grpc_root.is_some()
            || self.ssl_grpc_key.is_some()
            || self.ssl_grpc_cert.is_some();
        let https_given = self.ssl_https_verify_peer.is_some()
            || self.ssl_https_verify_host.is_some()
            || self.ssl_https_ca.is_some()
            || self.ssl_https_cert.is_some()
            || self.ssl_https_key.is_some()
            || self.ssl_https_cert_type.is_some()
            || self.ssl_https_key_type.is_some();
        for (what, ty) in [
            (
                "--ssl-https-client-certificate-type",
                &self.ssl_https_cert_type,
            ),
            ("--ssl-https-private-key-type", &self.ssl_https_key_type),
        ] {
            if let Some(t) = ty {
                if !t.eq_ignore_ascii_case("PEM") {
                    return Err(format!(
                        "{what} {t} is not supported: trtis reads PEM files only"
                    ));
                }
            }
        }
        let tls = match self.protocol {
            ProtocolArg::Grpc => {
                if https_given {
                    return Err(
                        "the --ssl-https-* options are for -i http; use --ssl-grpc-* with -i grpc"
                            .into(),
                    );
                }
                if grpc_given && !self.ssl_grpc_use_ssl {
                    return Err("the --ssl-grpc-* files need --ssl-grpc-use-ssl".into());
                }
                self.ssl_grpc_use_ssl.then(|| ClientTls {
                    ca: self.ssl_grpc_root.clone(),
                    cert: self.ssl_grpc_cert.clone(),
                    key: self.ssl_grpc_key.clone(),
                    verify_peer: true,
                    verify_host: true,
                })
            }
            ProtocolArg::Http => {
                if grpc_given {
                    return Err(
                        "the --ssl-grpc-* options are for -i grpc; use --ssl-https-* with -i http"
                            .into(),
                    );
                }
                let https_url = self
                    .url
                    .as_deref()
                    .is_some_and(|u| u.starts_with("https://"));
                (https_given || https_url).then(|| ClientTls {
                    ca: self.ssl_https_ca.clone(),
                    cert: self.ssl_https_cert.clone(),
                    key: self.ssl_https_key.clone(),
                    verify_peer: self.ssl_https_verify_peer != Some(0),
                    verify_host: self.ssl_https_verify_host != Some(0),
                })
            }
        };
        Ok(ConnectOptions { headers, tls })
    }

    pub async fn connect(&self) -> Result<Client, ClientError> {
        let options = self.options().map_err(ClientError::Unsupported)?;
        Client::connect_with(&self.url(), self.protocol(), self.api(), &options).await
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
