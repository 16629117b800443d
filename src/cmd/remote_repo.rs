//! `--model-store` / `validate-config` locations in object storage
//! (`s3://`, `gs://`, `as://`): mirrored into this user's cache directory
//! (`$TMPDIR/trtis-repos-<uid>/`) before anything reads them.

use std::path::{Path, PathBuf};

use trtis::core::remote::{is_remote, RemoteRepository};

/// Where mirrors go.
fn cache_root() -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("trtis-repos-{uid}"))
}

/// The repository at `location` when it is in object storage, mirrored
/// once (on a short-lived runtime: this runs before the server's own).
/// `None` for a local path.
pub fn mirror(location: &Path) -> Result<Option<RemoteRepository>, String> {
    let text = location.to_string_lossy();
    if !is_remote(&text) {
        return Ok(None);
    }
    let mut repo = RemoteRepository::open(&text, &cache_root()).map_err(|e| e.message)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("failed to start the async runtime: {e}"))?;
    let report = runtime.block_on(repo.sync()).map_err(|e| e.message)?;
    trtis::core::logging::log(
        'I',
        &format!(
            "model repository {text}: {} files fetched into {}",
            report.fetched,
            repo.local_dir().display()
        ),
    );
    Ok(Some(repo))
}
