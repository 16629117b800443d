//! TLS for the frontends (Triton's `--grpc-use-ssl*` flags, and our
//! `--http-use-ssl*` equivalents): the server's certificate and key from PEM
//! files, and with mutual TLS the root certificate(s) a client's certificate
//! must chain to. HTTPS uses rustls through `TlsListener` (an axum listener
//! whose handshakes run in their own tasks, so a slow or failing client
//! never holds up the others); gRPC uses tonic's own rustls.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::{
    self,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::core::error::{Error, Result};

/// The files of one listener's TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With mutual TLS: the roots a client certificate must chain to.
    pub client_roots: Option<PathBuf>,
}

/// What `TlsFiles` hold, read.
pub struct Pem {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub client_roots: Option<Vec<u8>>,
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::invalid_arg(format!("failed to read the {what} {}: {e}", path.display()))
    })
}

impl TlsFiles {
    /// The PEM contents of the files.
    pub fn pem(&self) -> Result<Pem> {
        Ok(Pem {
            cert: read(&self.cert, "server certificate")?,
            key: read(&self.key, "server key")?,
            client_roots: self
                .client_roots
                .as_deref()
                .map(|p| read(p, "root certificate"))
                .transpose()?,
        })
    }

    /// The rustls server configuration (ring; HTTP/1.1 offered by ALPN).
    pub fn server_config(&self) -> Result<rustls::ServerConfig> {
        let Pem {
            cert,
            key,
            client_roots: roots,
        } = self.pem()?;
        let bad = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
            Error::invalid_arg(format!("invalid {what} {}: {e}", path.display()))
        };
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad("server certificate", &self.cert, &e))?;
        if chain.is_empty() {
            return Err(bad(
                "server certificate",
                &self.cert,
                &"no certificate in it",
            ));
        }
        let key =
            PrivateKeyDer::from_pem_slice(&key).map_err(|e| bad("server key", &self.key, &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::internal(format!("TLS set-up failed: {e}")))?;
        let builder = match (&roots, &self.client_roots) {
            (Some(pem), Some(path)) => {
                let mut store = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(pem) {
                    let c = c.map_err(|e| bad("root certificate", path, &e))?;
                    store
                        .add(c)
                        .map_err(|e| bad("root certificate", path, &e))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider)
                        .build()
                        .map_err(|e| bad("root certificate", path, &e))?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| bad("server certificate or key", &self.cert, &e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An axum listener that accepts TLS connections: a task accepts TCP
/// connections and runs each handshake in a task of its own; `accept`
/// hands out the connections whose handshake succeeded.
pub struct TlsListener {
    incoming: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    pub fn new(listener: TcpListener, config: rustls::ServerConfig) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (tx, incoming) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                // The listener goes (and its port is freed) with the server.
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    () = tx.closed() => return,
                };
                let (tcp, addr) = match accepted {
                    Ok(c) => c,
                    Err(_) => {
                        // Out of file descriptors and the like: wait a little.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    // A failed or timed-out handshake only closes its connection.
                    if let Ok(Ok(tls)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                    {
                        let _ = tx.send((tls, addr)).await;
                    }
                });
            }
        });
        Ok(TlsListener { incoming, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(conn) => conn,
            // The accepting task never ends while this listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
