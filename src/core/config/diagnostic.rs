//! What validation reports: an [`Issue`] names a field path and says what is
//! wrong with it; the repository layer turns it into a located finding.

use std::fmt;

/// How bad a finding is. An error stops the model from loading; a warning
/// does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One problem with a model configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub severity: Severity,
    /// The field path it is about (`dynamic_batching.preferred_batch_size[1]`),
    /// empty for the model as a whole.
    pub field: String,
    /// The text, following Triton's message where Triton has one.
    pub message: String,
}

impl Issue {
    pub fn error(field: impl Into<String>, message: impl Into<String>) -> Self {
        Issue {
            severity: Severity::Error,
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn warning(field: impl Into<String>, message: impl Into<String>) -> Self {
        Issue {
            severity: Severity::Warning,
            field: field.into(),
            message: message.into(),
        }
    }
}
