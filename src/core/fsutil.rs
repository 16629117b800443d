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

/// Opens `path` (following symlinks) for reading, refusing anything but a
/// regular file: a FIFO would block the reader until some writer came (a
/// `config.pbtxt` that is one would hang a load or the CLI forever), and a
/// device or socket is no file to read whole. The file is opened
/// non-blocking, so even a FIFO's open returns at once, and its type is
/// checked on the open file, not on a path that could change in between;
/// non-blocking has no effect on a regular file's reads.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(file);
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a file"
    };
    Err(not_regular(path, what))
}

/// The error for `path`, which is `what` (a FIFO, a directory, ..) instead
/// of a regular file.
fn not_regular(path: &Path, what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{} is not a regular file ({what})", path.display()),
    )
}

/// Whether `path` names a regular file, following symlinks; an error that
/// names the path when it is something else (a FIFO, a device). For a
/// check before something else opens the file; to read it, use
/// `read_regular`, which checks the file it opened.
pub fn check_regular(path: &Path) -> std::io::Result<()> {
    open_regular(path).map(drop)
}

/// The whole of the regular file `path` (see `open_regular`).
pub fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The whole of the regular file `path` as UTF-8 text (see
/// `open_regular`).
pub fn read_regular_to_string(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_regular(path)?).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
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
    fn only_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.pbtxt");
        std::fs::write(&file, "name: \"m\"").unwrap();
        assert_eq!(read_regular(&file).unwrap(), b"name: \"m\"");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular_to_string(&link).unwrap(), "name: \"m\"");

        // A FIFO with no writer: refused at once, not read forever.
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_regular(&fifo).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(
            e.to_string().contains("is not a regular file (a FIFO)"),
            "{e}"
        );
        assert!(e.to_string().contains(&fifo.display().to_string()), "{e}");
        // Through a symlink too.
        let fifo_link = dir.path().join("fifo-link");
        std::os::unix::fs::symlink(&fifo, &fifo_link).unwrap();
        assert!(check_regular(&fifo_link).is_err());

        let e = read_regular(dir.path()).unwrap_err();
        assert!(e.to_string().contains("(a directory)"), "{e}");
        assert!(read_regular(Path::new("/dev/null")).is_err());
        assert_eq!(
            read_regular(&dir.path().join("absent")).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }

    #[test]
    fn fnv1a_is_the_reference_hash() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    }
}
