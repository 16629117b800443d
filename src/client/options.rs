//! How the client connects beyond the address: extra headers on every
//! request (perf_analyzer's `-H`; over gRPC as metadata, which is how
//! Triton's restricted protocols read them) and TLS, with perf_analyzer's
//! `--ssl-grpc-*` / `--ssl-https-*` settings: the CA the server's
//! certificate must chain to, the client's own certificate and key (mutual
//! TLS), and for HTTPS whether the peer and the host name are verified.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::{
    self,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    client::WebPkiServerVerifier,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName, UnixTime},
    DigitallySignedStruct, SignatureScheme,
};

use super::ClientError;

/// A client certificate chain and its key, PEM.
pub type Identity = (Vec<u8>, Vec<u8>);

/// TLS settings of one connection.
#[derive(Debug, Clone, Default)]
pub struct ClientTls {
    /// The CA certificate(s) the server's must chain to (PEM).
    pub ca: Option<PathBuf>,
    /// The client's certificate chain and key (PEM), for mutual TLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// HTTPS only: whether the server's certificate is checked at all, and
    /// whether it must name the host (perf_analyzer's
    /// `--ssl-https-verify-peer` / `--ssl-https-verify-host`).
    pub verify_peer: bool,
    pub verify_host: bool,
}

/// Everything about a connection but the address, protocol and API.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// Sent with every request (name, value).
    pub headers: Vec<(String, String)>,
    pub tls: Option<ClientTls>,
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, ClientError> {
    crate::core::fsutil::read_regular(path).map_err(|e| {
        ClientError::Transport(format!("cannot read the {what} {}: {e}", path.display()))
    })
}

impl ClientTls {
    /// (CA, (client certificate, client key)) as PEM bytes.
    pub fn pem(&self) -> Result<(Option<Vec<u8>>, Option<Identity>), ClientError> {
        let ca = self
            .ca
            .as_deref()
            .map(|p| read(p, "CA certificate"))
            .transpose()?;
        let identity = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Some((read(c, "client certificate")?, read(k, "client key")?)),
            (None, None) => None,
            _ => {
                return Err(ClientError::Transport(
                    "a client certificate needs its private key, and the key its certificate"
                        .into(),
                ))
            }
        };
        Ok((ca, identity))
    }

    /// The rustls configuration of an HTTPS connection.
    pub fn rustls_config(&self) -> Result<rustls::ClientConfig, ClientError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| {
            ClientError::Transport(format!("invalid {what}: {e}"))
        };
        let (ca, identity) = self.pem()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("TLS settings", &e))?;
        let verifier: Arc<dyn ServerCertVerifier> = if !self.verify_peer {
            Arc::new(AnyServer(provider))
        } else {
            let ca = ca.ok_or_else(|| {
                ClientError::Transport(
                    "HTTPS needs the CA certificate the server's chains to (--ssl-https-ca-certificates-file), or --ssl-https-verify-peer 0".into(),
                )
            })?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&ca) {
                roots
                    .add(c.map_err(|e| bad("CA certificate", &e))?)
                    .map_err(|e| bad("CA certificate", &e))?;
            }
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| bad("CA certificate", &e))?;
            if self.verify_host {
                webpki
            } else {
                Arc::new(AnyName(webpki))
            }
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        match identity {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(&cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad("client certificate", &e))?;
                let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| bad("client key", &e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| bad("client certificate or key", &e))
            }
        }
    }
}

/// `--ssl-https-verify-peer 0`: any certificate is accepted (the handshake
/// signatures are still checked).
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

/// `--ssl-https-verify-host 0`: the chain is verified, the name is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A tonic interceptor adding the headers as request metadata.
#[derive(Clone, Default)]
pub struct Headers(Arc<tonic::metadata::MetadataMap>);

impl Headers {
    pub fn new(headers: &[(String, String)]) -> Result<Self, ClientError> {
        let mut map = tonic::metadata::MetadataMap::new();
        for (name, value) in headers {
            let key =
                tonic::metadata::MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
                    .map_err(|_| ClientError::Transport(format!("invalid header name '{name}'")))?;
            let value = value
                .parse()
                .map_err(|_| ClientError::Transport(format!("invalid value of header '{name}'")))?;
            map.insert(key, value);
        }
        Ok(Headers(Arc::new(map)))
    }
}

impl tonic::service::Interceptor for Headers {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        for kv in self.0.iter() {
            if let tonic::metadata::KeyAndValueRef::Ascii(k, v) = kv {
                request.metadata_mut().insert(k.clone(), v.clone());
            }
        }
        Ok(request)
    }
}

/// A gRPC channel to `base` (`http://host:port`), over TLS when asked.
pub async fn grpc_channel(
    base: &str,
    options: &ConnectOptions,
) -> Result<tonic::transport::Channel, ClientError> {
    use tonic::transport::{Certificate, Channel, ClientTlsConfig};
    let mut endpoint = Channel::from_shared(base.to_string())
        .map_err(|e| ClientError::Transport(e.to_string()))?;
    if let Some(tls) = &options.tls {
        let (ca, identity) = tls.pem()?;
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = ca {
            config = config.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = identity {
            config = config.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| ClientError::Transport(super::error::with_causes(&e)))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| ClientError::Transport(super::error::with_causes(&e)))
}

/// A reqwest client with the headers and TLS.
pub fn http_client(options: &ConnectOptions) -> Result<reqwest::Client, ClientError> {
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &options.headers {
        let key = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ClientError::Transport(format!("invalid header name '{name}'")))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| ClientError::Transport(format!("invalid value of header '{name}'")))?;
        headers.insert(key, value);
    }
    // reqwest builds its TLS set-up even for plain HTTP: it needs the
    // process's default crypto provider, ring (as everywhere in trtis).
    // Already installed is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder().default_headers(headers);
    if let Some(tls) = &options.tls {
        builder = builder.tls_backend_preconfigured(tls.rustls_config()?);
    }
    builder
        .build()
        .map_err(|e| ClientError::Transport(super::error::with_causes(&e)))
}
