//! Model repositories in object storage, as Triton names them:
//! `s3://bucket/prefix` (with a custom endpoint: `s3://http://host:port/
//! bucket/prefix`, or `https://`), `gs://bucket/prefix` and
//! `as://account/container/prefix`. A repository is mirrored into a local
//! directory (every object under the prefix, at its relative path) and
//! served from there as any local one; `sync` again (poll mode) fetches what
//! was added or changed and removes what was removed, so the next poll of
//! the local directory sees it.
//!
//! Credentials come from where Triton's documentation says: for S3 the
//! `AWS_*` environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_DEFAULT_REGION`, and
//! the rest the `object_store` crate reads); for Azure `AZURE_STORAGE_KEY`
//! (Triton's name) or the `AZURE_STORAGE_*` variables `object_store` reads,
//! with `AZURE_STORAGE_USE_EMULATOR=true` for Azurite; for GCS
//! `GOOGLE_APPLICATION_CREDENTIALS` / `GOOGLE_SERVICE_ACCOUNT*`; and, over
//! all of these, Triton's credential file `TRITON_CLOUD_CREDENTIAL_PATH`
//! (JSON: per scheme `s3`, `gs`, `as`, keys that are URL prefixes, `""`
//! for any; the longest key that prefixes the repository's URL wins). The
//! `object_store` crate does the protocols (hand-writing S3 signing and
//! Azure's shared key is not worth it).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use futures_util::StreamExt;
use object_store::{path::Path as ObjectPath, ObjectStore, ObjectStoreExt};

use crate::core::error::{Error, Result};
use crate::core::fsutil::{fnv1a, private_dir};

/// Whether a `--model-store` value names object storage.
pub fn is_remote(location: &str) -> bool {
    ["s3://", "gs://", "as://"]
        .iter()
        .any(|s| location.starts_with(s))
}

/// A parsed repository URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteUrl {
    S3 {
        /// A custom endpoint (`http://host:port`), else AWS.
        endpoint: Option<String>,
        bucket: String,
        prefix: String,
    },
    Gcs {
        bucket: String,
        prefix: String,
    },
    Azure {
        account: String,
        container: String,
        prefix: String,
    },
}

fn bad(url: &str, why: &str) -> Error {
    Error::invalid_arg(format!("invalid model repository URL '{url}': {why}"))
}

/// Splits `first/rest...` into the first segment and the rest (without
/// leading or trailing slashes).
fn split_first(s: &str) -> (&str, &str) {
    let s = s.trim_start_matches('/');
    match s.split_once('/') {
        Some((a, b)) => (a, b.trim_matches('/')),
        None => (s, ""),
    }
}

impl RemoteUrl {
    pub fn parse(url: &str) -> Result<RemoteUrl> {
        if let Some(rest) = url.strip_prefix("s3://") {
            // Triton's custom endpoint form: s3://http://host:port/bucket/prefix.
            let (endpoint, rest) = match ["http://", "https://"]
                .iter()
                .find(|s| rest.starts_with(*s))
            {
                Some(scheme) => {
                    let after = &rest[scheme.len()..];
                    let (host, path) = split_first(after);
                    if host.is_empty() {
                        return Err(bad(url, "the endpoint has no host"));
                    }
                    (Some(format!("{scheme}{host}")), path)
                }
                None => (None, rest),
            };
            let (bucket, prefix) = split_first(rest);
            if bucket.is_empty() {
                return Err(bad(url, "no bucket"));
            }
            return Ok(RemoteUrl::S3 {
                endpoint,
                bucket: bucket.into(),
                prefix: prefix.into(),
            });
        }
        if let Some(rest) = url.strip_prefix("gs://") {
            let (bucket, prefix) = split_first(rest);
            if bucket.is_empty() {
                return Err(bad(url, "no bucket"));
            }
            return Ok(RemoteUrl::Gcs {
                bucket: bucket.into(),
                prefix: prefix.into(),
            });
        }
        if let Some(rest) = url.strip_prefix("as://") {
            let (account, rest) = split_first(rest);
            let (container, prefix) = split_first(rest);
            if account.is_empty() || container.is_empty() {
                return Err(bad(url, "expected as://account/container/prefix"));
            }
            return Ok(RemoteUrl::Azure {
                account: account.into(),
                container: container.into(),
                prefix: prefix.into(),
            });
        }
        Err(bad(url, "expected s3://, gs:// or as://"))
    }

    fn prefix(&self) -> &str {
        match self {
            RemoteUrl::S3 { prefix, .. }
            | RemoteUrl::Gcs { prefix, .. }
            | RemoteUrl::Azure { prefix, .. } => prefix,
        }
    }

    fn scheme(&self) -> &'static str {
        match self {
            RemoteUrl::S3 { .. } => "s3",
            RemoteUrl::Gcs { .. } => "gs",
            RemoteUrl::Azure { .. } => "as",
        }
    }

    /// The store for the repository at `url`, with credentials from the
    /// environment and the credential file (its entries are matched against
    /// `url`).
    fn store_for(&self, url: &str) -> Result<Arc<dyn ObjectStore>> {
        let creds = credentials_for(self.scheme(), url)?;
        // An entry of the wrong shape is an error, not a silent fallback to
        // the environment: s3 and as entries are objects, gs entries paths.
        let shape_ok = match (&creds, self.scheme()) {
            (None, _) => true,
            (Some(c), "gs") => c.is_string(),
            (Some(c), _) => c.is_object(),
        };
        if !shape_ok {
            return Err(Error::invalid_arg(format!(
                "TRITON_CLOUD_CREDENTIAL_PATH: the \"{}\" entry for '{url}' must be {}",
                self.scheme(),
                if self.scheme() == "gs" {
                    "a path"
                } else {
                    "an object"
                }
            )));
        }
        let text = |key: &str| {
            creds
                .as_ref()
                .and_then(|c| c.get(key))
                .and_then(|v| v.as_str())
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        // object_store's reqwest needs the process's rustls provider: ring,
        // as everywhere in trtis (already installed is fine).
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        let failed = |e: object_store::Error| {
            Error::invalid_arg(format!("cannot open the model repository: {e}"))
        };
        Ok(match self {
            RemoteUrl::S3 {
                endpoint, bucket, ..
            } => {
                // Keys from the credential file replace the environment's
                // whole (an environment session token would not fit them).
                let from_file = text("key_id").is_some() || text("secret_key").is_some();
                let b = if from_file {
                    object_store::aws::AmazonS3Builder::new()
                } else {
                    object_store::aws::AmazonS3Builder::from_env()
                };
                let mut b = b.with_bucket_name(bucket).with_retry(retry());
                if std::env::var_os("AWS_DEFAULT_REGION").is_none()
                    && std::env::var_os("AWS_REGION").is_none()
                {
                    b = b.with_region("us-east-1");
                }
                if let Some(e) = endpoint {
                    b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
                }
                if let Some(k) = text("key_id") {
                    b = b.with_access_key_id(k);
                }
                if let Some(k) = text("secret_key") {
                    b = b.with_secret_access_key(k);
                }
                if let Some(r) = text("region") {
                    b = b.with_region(r);
                }
                if let Some(t) = text("session_token") {
                    b = b.with_token(t);
                }
                if text("profile").is_some() {
                    return Err(Error::invalid_arg(
                        "the credential file's s3 \"profile\" is not supported by trtis: give key_id and secret_key",
                    ));
                }
                Arc::new(b.build().map_err(failed)?)
            }
            RemoteUrl::Gcs { bucket, .. } => {
                let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry());
                // The gs entry is the path of a service account file.
                if let Some(path) = creds.as_ref().and_then(|c| c.as_str()) {
                    b = b.with_service_account_path(path);
                }
                Arc::new(b.build().map_err(failed)?)
            }
            RemoteUrl::Azure {
                account, container, ..
            } => {
                let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_retry(retry())
                    .with_account(account)
                    .with_container_name(container);
                if let Ok(key) = std::env::var("AZURE_STORAGE_KEY") {
                    b = b.with_access_key(key);
                }
                if let Some(key) = text("account_key") {
                    b = b.with_access_key(key);
                }
                if let Some(a) = text("account_str") {
                    if &a != account {
                        return Err(Error::invalid_arg(format!(
                            "the credential file's account_str '{a}' is not the repository's account '{account}'"
                        )));
                    }
                }
                Arc::new(b.build().map_err(failed)?)
            }
        })
    }
}

/// The entry of Triton's credential file (`TRITON_CLOUD_CREDENTIAL_PATH`)
/// for `scheme` whose key is the longest prefix of `url` (`""` matches any);
/// None without a file or a matching entry.
fn credentials_for(scheme: &str, url: &str) -> Result<Option<serde_json::Value>> {
    let Some(path) = std::env::var_os("TRITON_CLOUD_CREDENTIAL_PATH") else {
        return Ok(None);
    };
    let bad = |why: String| {
        Error::invalid_arg(format!(
            "TRITON_CLOUD_CREDENTIAL_PATH {}: {why}",
            Path::new(&path).display()
        ))
    };
    let text = crate::core::fsutil::read_regular_to_string(Path::new(&path))
        .map_err(|e| bad(e.to_string()))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let Some(section) = doc.get(scheme) else {
        return Ok(None);
    };
    let entries = section
        .as_object()
        .ok_or_else(|| bad(format!("\"{scheme}\" must be an object")))?;
    Ok(entries
        .iter()
        .filter(|(key, _)| url.starts_with(key.as_str()))
        .max_by_key(|(key, _)| key.len())
        .map(|(_, v)| v.clone()))
}

/// The repositories in object storage a server serves, synced together
/// (before each poll, and before an explicit load reads its model).
pub struct Remotes(tokio::sync::Mutex<Vec<RemoteRepository>>);

impl std::fmt::Debug for Remotes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Remotes")
    }
}

impl Remotes {
    pub fn new(repositories: Vec<RemoteRepository>) -> Remotes {
        Remotes(tokio::sync::Mutex::new(repositories))
    }

    /// Mirrors every repository (one sync at a time). A store that fails
    /// keeps its last mirror; the others sync anyway. Returns the failures.
    pub async fn sync(&self) -> Vec<Error> {
        let mut errors = Vec::new();
        for r in self.0.lock().await.iter_mut() {
            if let Err(e) = r.sync().await {
                errors.push(e);
            }
        }
        errors
    }
}

/// Retries of a failed store request: a few, within 15 s (object_store's
/// default, 10 retries within 3 minutes, keeps a server with an unreachable
/// store from starting or failing for minutes).
fn retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        max_retries: 3,
        retry_timeout: std::time::Duration::from_secs(15),
        ..Default::default()
    }
}

/// What a sync changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    pub fetched: usize,
    pub removed: usize,
}

/// A repository in object storage and its local mirror.
pub struct RemoteRepository {
    url: String,
    remote: RemoteUrl,
    local: PathBuf,
    /// Relative path → (size, e_tag or last-modified) of what is mirrored.
    seen: HashMap<String, (u64, String)>,
}

impl RemoteRepository {
    /// Opens `url`, mirrored under `cache_root` (a directory of its own per
    /// URL, made private to this user).
    pub fn open(url: &str, cache_root: &Path) -> Result<RemoteRepository> {
        let remote = RemoteUrl::parse(url)?;
        // The settings are checked now; each sync makes its own client (a
        // sync may run on another async runtime than the last).
        remote.store_for(url)?;
        let hash = fnv1a(url.as_bytes());
        let local = cache_root.join(format!("repo-{hash:016x}"));
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        for dir in [cache_root, &local] {
            private_dir(dir, uid).map_err(|e| {
                Error::internal(format!("model repository cache {}: {e}", dir.display()))
            })?;
        }
        Ok(RemoteRepository {
            url: url.to_string(),
            remote,
            local,
            seen: HashMap::new(),
        })
    }

    /// The local directory the repository is mirrored into.
    pub fn local_dir(&self) -> &Path {
        &self.local
    }

    /// Mirrors the repository: fetches new and changed objects, removes
    /// local files whose objects are gone.
    pub async fn sync(&mut self) -> Result<SyncReport> {
        let failed = |e: object_store::Error| {
            Error::unavailable(format!(
                "failed to read the model repository '{}': {e}",
                self.url
            ))
        };
        let store = self.remote.store_for(&self.url)?;
        let prefix = self.remote.prefix();
        let base = (!prefix.is_empty()).then(|| ObjectPath::from(prefix));
        let mut listing = store.list(base.as_ref());
        let mut now: HashMap<String, (u64, String, ObjectPath)> = HashMap::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(failed)?;
            let full = meta.location.as_ref();
            let relative = full
                .strip_prefix(prefix)
                .unwrap_or(full)
                .trim_start_matches('/')
                .to_string();
            if relative.is_empty() {
                continue;
            }
            let stamp = meta
                .e_tag
                .clone()
                .unwrap_or_else(|| meta.last_modified.to_rfc3339());
            now.insert(relative, (meta.size, stamp, meta.location));
        }
        // "Folder" objects (a console's "create folder"; object_store lists
        // them without their trailing slash): an object that other objects
        // lie under is a directory. An empty one with nothing under it is a
        // directory when its name is a version number (an empty version
        // directory is the one empty directory a repository can mean),
        // else an empty file.
        let parents: std::collections::HashSet<String> = now
            .keys()
            .flat_map(|k| {
                let mut out = Vec::new();
                let mut rest = k.as_str();
                while let Some((parent, _)) = rest.rsplit_once('/') {
                    out.push(parent.to_string());
                    rest = parent;
                }
                out
            })
            .collect();
        now.retain(|k, (size, _, _)| !(*size == 0 && parents.contains(k)));
        let mut report = SyncReport::default();
        let first = self.seen.is_empty();
        for (relative, (size, stamp, location)) in &now {
            if self.seen.get(relative) == Some(&(*size, stamp.clone())) {
                continue;
            }
            let target = match self.target(relative) {
                Ok(t) => t,
                Err(e) => {
                    // One bad name skips that object, not the repository.
                    crate::core::logging::log('W', &e.message);
                    continue;
                }
            };
            let version_dir = *size == 0
                && relative
                    .rsplit('/')
                    .next()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
            if version_dir {
                tokio::fs::create_dir_all(&target)
                    .await
                    .map_err(|e| io_error(&target, e))?;
            } else {
                let data = store.get(location).await.map_err(failed)?.into_stream();
                write_atomically(&target, data, &self.url).await?;
            }
            self.seen.insert(relative.clone(), (*size, stamp.clone()));
            report.fetched += 1;
        }
        let gone: Vec<String> = self
            .seen
            .keys()
            .filter(|k| !now.contains_key(*k))
            .cloned()
            .collect();
        for relative in gone {
            if let Ok(target) = self.target(&relative) {
                let _ = tokio::fs::remove_file(&target).await;
                remove_empty_parents(&target, &self.local);
            }
            self.seen.remove(&relative);
            report.removed += 1;
        }
        if first {
            // A mirror left by an earlier run: what is no longer in the
            // store (and any half-written file) goes.
            report.removed += remove_unlisted(&self.local, &self.local, &now);
        }
        Ok(report)
    }

    /// Where an object goes: under the mirror, never outside it.
    fn target(&self, relative: &str) -> Result<PathBuf> {
        let path = Path::new(relative);
        if path
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(Error::invalid_arg(format!(
                "model repository '{}' holds an object whose name leads outside it: '{relative}'",
                self.url
            )));
        }
        Ok(self.local.join(path))
    }
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::internal(format!("model repository cache {}: {e}", path.display()))
}

/// Streams an object into `target` through a temporary file renamed into
/// place (never the whole object in memory, no blocking I/O on the runtime).
async fn write_atomically(
    target: &Path,
    mut data: futures_util::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
    url: &str,
) -> Result<()> {
    use tokio::io::AsyncWriteExt;
    let dir = target.parent().unwrap_or(Path::new("."));
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| io_error(dir, e))?;
    let tmp = dir.join(format!(
        ".{}.{}.part",
        target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let result = async {
        let mut file = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| io_error(&tmp, e))?;
        while let Some(chunk) = data.next().await {
            let chunk = chunk.map_err(|e| {
                Error::unavailable(format!("failed to read the model repository '{url}': {e}"))
            })?;
            file.write_all(&chunk)
                .await
                .map_err(|e| io_error(&tmp, e))?;
        }
        file.flush().await.map_err(|e| io_error(&tmp, e))?;
        drop(file);
        tokio::fs::rename(&tmp, target)
            .await
            .map_err(|e| io_error(target, e))
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}

/// Removes the files under `dir` that are not in `listed` (paths relative
/// to `root`), and the directories left empty; returns how many files.
fn remove_unlisted(
    root: &Path,
    dir: &Path,
    listed: &HashMap<String, (u64, String, ObjectPath)>,
) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let relative = path
            .strip_prefix(root)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if listed.contains_key(&relative) {
                continue; // an empty version directory the store lists
            }
            removed += remove_unlisted(root, &path, listed);
            let _ = std::fs::remove_dir(&path); // only if now empty
        } else if !listed.contains_key(&relative) && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn remove_empty_parents(file: &Path, root: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if d == root || std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tritons_url_forms() {
        assert_eq!(
            RemoteUrl::parse("s3://bucket/path/to/repo").unwrap(),
            RemoteUrl::S3 {
                endpoint: None,
                bucket: "bucket".into(),
                prefix: "path/to/repo".into()
            }
        );
        assert_eq!(
            RemoteUrl::parse("s3://http://127.0.0.1:9000/models/repo/").unwrap(),
            RemoteUrl::S3 {
                endpoint: Some("http://127.0.0.1:9000".into()),
                bucket: "models".into(),
                prefix: "repo".into()
            }
        );
        assert_eq!(
            RemoteUrl::parse("gs://bucket").unwrap(),
            RemoteUrl::Gcs {
                bucket: "bucket".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            RemoteUrl::parse("as://account/container/a/b").unwrap(),
            RemoteUrl::Azure {
                account: "account".into(),
                container: "container".into(),
                prefix: "a/b".into()
            }
        );
        for bad in [
            "s3://",
            "s3://http:///b",
            "as://account",
            "gs://",
            "ftp://x",
        ] {
            assert!(RemoteUrl::parse(bad).is_err(), "{bad}");
        }
        assert!(is_remote("s3://b") && is_remote("as://a/c") && !is_remote("/models"));
    }
}
