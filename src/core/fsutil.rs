//! Small file-system helpers the layers share: a directory private to this
//! user (the Python backend's script and environment caches, the object
//! storage mirrors), the FNV-1a hash their directory names use, and where
//! the libraries built beside the executable are (the PyTorch backend, the
//! Python worker's native core).

use std::path::{Path, PathBuf};

/// The file `name` beside the running executable (where cargo builds the
/// workspace's libraries) or in its parent folder, if there is one.
pub fn beside_executable(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Makes `dir` (mode 0700), or accepts it when it exists and is a
/// directory of user `uid` open to nobody else; refuses anything else (a
/// directory someone else made in a shared temp directory, a symlink).
pub fn private_dir(dir: &Path, uid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(dir) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(e);
        }
        let meta = std::fs::symlink_metadata(dir)?;
        if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "it exists and is not a private directory of this user",
            ));
        }
    }
    Ok(())
}

/// FNV-1a (64 bits) of `bytes`: a stable name for a cache directory (not
/// a cryptographic hash).
pub fn fnv1a<'a>(bytes: impl IntoIterator<Item = &'a u8>) -> u64 {
    bytes.into_iter().fold(0xcbf29ce484222325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_reference_hash() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    }
}
