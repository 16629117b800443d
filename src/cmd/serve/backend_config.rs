//! `--backend-config=[BACKEND,]KEY=VALUE`, read as Triton reads it: the
//! settings trtis honours, the ones with nothing to tune here (a note
//! saying why), and Triton's errors for a malformed one.

use std::time::Duration;

/// What one `--backend-config` does.
#[derive(Debug, PartialEq)]
pub(super) enum BackendSetting {
    /// python,stub-timeout-seconds=N: how long a Python worker may take to
    /// start.
    StubTimeout(Duration),
    /// [onnxruntime,]default-max-batch-size=N: the max_batch_size
    /// auto-complete gives a model that batches.
    DefaultMaxBatchSize(i32),
    /// A setting with nothing to tune here: the line that says why.
    Note(String),
}

/// One `--backend-config=[BACKEND,]KEY=VALUE`, as Triton reads it: a
/// setting trtis honours, one with nothing to tune here (a note), or an
/// error in Triton's words.
pub(super) fn backend_setting(setting: &str) -> Result<BackendSetting, String> {
    let shape = || {
        format!(
            "--backend-config option format is '<backend name>,<setting>=<value>'. Got {setting}"
        )
    };
    if setting.starts_with(',') {
        return Err(format!(
            "No backend specified. --backend-config option format is '<backend name>,<setting>=<value>'. Got {setting}"
        ));
    }
    // A global setting's value may hold commas: only a name before the
    // first '=' is a backend's.
    let (backend, rest) = match setting.split_once(',') {
        Some((b, rest)) if !b.contains('=') => (b, rest),
        _ => ("", setting),
    };
    let (key, value) = rest.split_once('=').ok_or_else(shape)?;
    if key.is_empty() || value.is_empty() {
        return Err(shape());
    }
    let positive = |what: &str| -> Result<u64, String> {
        value.parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| {
            format!("--backend-config={setting}: '{value}' is not a positive {what}")
        })
    };
    Ok(match (backend, key) {
        ("python", "stub-timeout-seconds") => {
            BackendSetting::StubTimeout(Duration::from_secs(positive("number of seconds")?))
        }
        ("" | "onnxruntime", "default-max-batch-size") => {
            let n = positive("batch size")?;
            BackendSetting::DefaultMaxBatchSize(i32::try_from(n).map_err(|_| {
                format!("--backend-config={setting}: '{value}' is too large")
            })?)
        }
        (
            "python",
            "shm-default-byte-size"
            | "shm-growth-byte-size"
            | "shm-region-prefix-name"
            | "shm_message_queue_size"
            | "thread-pool-size",
        ) => BackendSetting::Note(format!(
            "--backend-config={setting}: trtis's Python workers exchange tensors over a socket and run BLS calls on the server's runtime, so there is nothing to tune"
        )),
        ("", _) => BackendSetting::Note(format!(
            "--backend-config={setting}: trtis reads no global backend setting '{key}' (it reads default-max-batch-size); not applied"
        )),
        (_, _) => BackendSetting::Note(format!(
            "--backend-config={setting}: trtis's {backend} backend reads no setting '{key}' (trtis reads python,stub-timeout-seconds and default-max-batch-size; model settings go in the model's config.pbtxt parameters); not applied"
        )),
    })
}
