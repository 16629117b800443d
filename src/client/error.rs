//! The client's error: what the server answered, or why it could not be
//! reached or understood.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The server answered with an HTTP error status and `{"error": ...}`.
    Http { status: u16, message: String },
    /// The server answered with a gRPC error status.
    Grpc { code: String, message: String },
    /// The server could not be reached.
    Transport(String),
    /// The server closed the connection while the request was still being
    /// sent: it refused the request before reading it whole (an HTTP
    /// server answers 413 and closes when a body is over its limit).
    Closed(String),
    /// The server's answer could not be understood.
    Decode(String),
    /// What was asked cannot be done with the chosen API.
    Unsupported(String),
}

impl ClientError {
    /// The server's message, or the transport/decoding error.
    pub fn message(&self) -> &str {
        match self {
            ClientError::Http { message, .. } | ClientError::Grpc { message, .. } => message,
            ClientError::Transport(m)
            | ClientError::Closed(m)
            | ClientError::Decode(m)
            | ClientError::Unsupported(m) => m,
        }
    }

    /// Whether the server was unreachable (rather than answering an error).
    pub fn is_transport(&self) -> bool {
        matches!(self, ClientError::Transport(_))
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Http { status, message } => write!(f, "HTTP {status}: {message}"),
            ClientError::Grpc { code, message } => write!(f, "gRPC {code}: {message}"),
            ClientError::Transport(m) => write!(f, "cannot reach the server: {m}"),
            ClientError::Closed(m) => f.write_str(m),
            ClientError::Decode(m) => write!(f, "unexpected answer from the server: {m}"),
            ClientError::Unsupported(m) => write!(f, "not supported: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// An error with its causes ("transport error: tcp connect error:
/// Connection refused"), without repeating a cause already in the text.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

impl From<tonic::Status> for ClientError {
    fn from(s: tonic::Status) -> Self {
        if s.code() == tonic::Code::Unavailable && s.message().contains("transport") {
            return ClientError::Transport(s.message().to_string());
        }
        ClientError::Grpc {
            code: format!("{:?}", s.code()),
            message: s.message().to_string(),
        }
    }
}

/// Whether `e` is a request whose connection the server closed (or reset)
/// while it was going out, after the connection was made: a write failed
/// with EPIPE, or with ECONNRESET where hyper says it was writing (its
/// "error writing a body to connection"; a reset while reading the answer
/// is not this).
fn closed_while_sending(e: &reqwest::Error) -> bool {
    if e.is_connect() || e.is_timeout() || !e.is_request() {
        return false;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::BrokenPipe => true,
                std::io::ErrorKind::ConnectionReset => with_causes(e).contains("writing"),
                _ => false,
            };
        }
        source = s.source();
    }
    false
}

impl From<reqwest::Error> for ClientError {
    fn from(e: reqwest::Error) -> Self {
        if closed_while_sending(&e) {
            // The answer (a 413, say) is lost with the connection: the
            // client cannot read it while it is still writing, so say what
            // most likely happened instead of "cannot reach the server".
            return ClientError::Closed(format!(
                "the server closed the connection before the request was sent whole ({}): \
                 it most likely refused the request as too large (a Triton server's \
                 limit is its --http-max-input-size, 64 MiB by default)",
                with_causes(&e)
            ));
        }
        if e.is_connect() || e.is_timeout() || e.is_request() {
            ClientError::Transport(with_causes(&e))
        } else {
            ClientError::Decode(with_causes(&e))
        }
    }
}
