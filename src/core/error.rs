//! The error kinds of Triton's status codes, and the engine's error type.
//! The frontends map `ErrorKind` to HTTP status and gRPC code, each in one
//! table (`server::frontend::http::status_of`).

use std::fmt;

/// Triton's error codes (`TRITONSERVER_Error_Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    Unknown,
    Internal,
    NotFound,
    InvalidArg,
    Unavailable,
    Unsupported,
    AlreadyExists,
    Cancelled,
}

/// An engine error: a kind and Triton's message text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// The model's own answer (a Python model's `InferenceResponse(error=
    /// TritonError(...))`): the client gets the error, but the request ran
    /// and counts as a success, as Triton counts it.
    pub answered: bool,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            answered: false,
        }
    }

    /// This error as the model's own answer (see `answered`).
    pub fn answered(mut self) -> Self {
        self.answered = true;
        self
    }

    pub fn invalid_arg(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArg, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    /// A request cancelled before it ran: Triton's schedulers answer it
    /// with status CANCELLED and no message (core's
    /// `Status(Status::Code::CANCELLED)`).
    pub fn cancelled() -> Self {
        Self::new(ErrorKind::Cancelled, "")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// An I/O error as `strerror` words it ("No such file or directory"),
/// without Rust's "(os error N)" suffix.
pub fn os_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Triton's prefix for messages about a request (`LogRequest()`).
pub fn request_prefix(id: &str) -> String {
    format!(
        "[request id: {}] ",
        if id.is_empty() { "<id_unknown>" } else { id }
    )
}
