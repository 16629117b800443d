//! A Python model's packed environment: an `EXECUTION_ENV_PATH` that names
//! an archive (a conda-pack `.tar.gz`, or any tar of an environment with
//! `bin/python3`) rather than a directory. Triton unpacks it and runs the
//! model in it; so does trtis, once per archive: it is unpacked into a
//! cache directory keyed by the archive's path, size and modification time,
//! so a model's instances, its reloads and a restarted server reuse one
//! copy, and a changed archive gets a new one.
//!
//! The cache is `<temp dir>/trtis-python-envs-<uid>/<key>/`: this user's
//! alone (mode 0700, checked like the worker's scripts directory). An
//! archive unpacks into a temporary directory beside its key that is
//! renamed into place when complete, so a reader never sees a half-unpacked
//! environment and two servers unpacking at once both end with one whole
//! copy; within a process one unpacking runs at a time.
//!
//! An archive is the model's, so it must not write outside its directory:
//! an entry with an absolute path or a `..`, a symbolic link that points
//! outside (absolute, or out through `..` and the archive's other links),
//! anything placed beneath one of its symbolic links, and device or FIFO
//! entries refuse the whole archive. Symbolic links are made last, after
//! every file and directory, and checked against all of the archive's
//! links, so no entry is ever written through a link.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::{BufReader, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use crate::core::error::{Error, Result};
use crate::core::fsutil::{fnv1a, private_dir};

/// The most symbolic links one link's target may pass through (Linux's
/// limit); more is a loop.
const MAX_LINK_HOPS: usize = 40;

/// The unpacked environment of `archive`, unpacked now if the cache has no
/// copy of this version of it yet.
pub fn unpacked(archive: &Path) -> Result<PathBuf> {
    unpacked_in(&cache_root()?, archive)
}

/// The per-user cache directory of unpacked environments.
fn cache_root() -> Result<PathBuf> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let root = std::env::temp_dir().join(format!("trtis-python-envs-{uid}"));
    private_dir(&root, uid).map_err(|e| {
        Error::internal(format!(
            "failed to make the Python environment cache {}: {e}",
            root.display()
        ))
    })?;
    Ok(root)
}

/// The cache key of an archive: its canonical path, size and modification
/// time (FNV-1a, hex).
fn cache_key(archive: &Path) -> std::io::Result<String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let path = std::fs::canonicalize(archive)?;
    let meta = std::fs::metadata(&path)?;
    let stamp = format!("\0{}\0{}.{}", meta.len(), meta.mtime(), meta.mtime_nsec());
    let hash = fnv1a(path.as_os_str().as_bytes().iter().chain(stamp.as_bytes()));
    Ok(format!("{hash:016x}"))
}

/// The environment's interpreter, if it has one.
pub fn python_of(env: &Path) -> Option<PathBuf> {
    ["bin/python3", "bin/python"]
        .iter()
        .map(|p| env.join(p))
        .find(|p| p.is_file())
}

/// `unpacked` with the cache at `root`.
fn unpacked_in(root: &Path, archive: &Path) -> Result<PathBuf> {
    static UNPACKING: Mutex<()> = Mutex::new(());
    let io = |e: std::io::Error| {
        Error::internal(format!(
            "failed to unpack {} into {}: {e}",
            archive.display(),
            root.display()
        ))
    };
    let key = cache_key(archive).map_err(io)?;
    let target = root.join(&key);
    let _one_at_a_time = UNPACKING.lock().unwrap_or_else(|p| p.into_inner());
    if target.is_dir() {
        if python_of(&target).is_some() {
            return Ok(target);
        }
        // A copy that lost its interpreter (a temp-directory cleaner):
        // unpacked again.
        std::fs::remove_dir_all(&target).map_err(io)?;
    }
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{key}-"))
        .tempdir_in(root)
        .map_err(io)?;
    let file = crate::core::fsutil::open_regular(archive).map_err(io)?;
    unpack(file, tmp.path()).map_err(|e| match e {
        Unpack::Refused(why) => Error::invalid_arg(format!(
            "the archive {} is refused: {why}",
            archive.display()
        )),
        Unpack::Io(e) => io(e),
    })?;
    let done = tmp.keep();
    if let Err(e) = std::fs::rename(&done, &target) {
        let _ = std::fs::remove_dir_all(&done);
        // Another server unpacked the same archive first: its copy is
        // whole (it was renamed into place complete).
        if !target.is_dir() {
            return Err(io(e));
        }
    }
    crate::core::logging::log(
        'I',
        &format!(
            "unpacked Python environment {} into {}",
            archive.display(),
            target.display()
        ),
    );
    Ok(target)
}

/// Why an archive did not unpack.
#[derive(Debug)]
enum Unpack {
    /// The archive would write outside its directory, or holds what an
    /// environment has no use for.
    Refused(String),
    Io(std::io::Error),
}

impl From<std::io::Error> for Unpack {
    fn from(e: std::io::Error) -> Self {
        Unpack::Io(e)
    }
}

/// Unpacks a tar archive (gzip-compressed or not) into the empty directory
/// `dst`, refusing any entry that would write outside it.
fn unpack(file: impl Read, dst: &Path) -> std::result::Result<(), Unpack> {
    let mut reader = BufReader::new(file);
    let gzip = {
        use std::io::BufRead;
        reader.fill_buf()?.starts_with(&[0x1f, 0x8b])
    };
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::GzDecoder::new(reader))
    } else {
        Box::new(reader)
    };
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(false);
    archive.set_unpack_xattrs(false);
    // Symbolic links wait until every file and directory is in place.
    let mut links: Vec<(PathBuf, PathBuf)> = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = inside(&entry.path()?)
            .map_err(|why| Unpack::Refused(format!("entry '{}' {why}", lossy(&entry))))?;
        use tar::EntryType as T;
        match entry.header().entry_type() {
            T::Symlink => {
                let target = entry.link_name()?.ok_or_else(|| {
                    Unpack::Refused(format!("symbolic link '{}' has no target", path.display()))
                })?;
                links.push((path, target.into_owned()));
            }
            kind @ (T::Regular | T::Continuous | T::Directory | T::Link) => {
                if kind == T::Link {
                    let target = entry.link_name()?.unwrap_or_default();
                    inside(&target).map_err(|why| {
                        Unpack::Refused(format!(
                            "hard link '{}' -> '{}': its target {why}",
                            path.display(),
                            target.display()
                        ))
                    })?;
                }
                if !entry.unpack_in(dst)? {
                    return Err(Unpack::Refused(format!(
                        "entry '{}' would be written outside the environment",
                        path.display()
                    )));
                }
            }
            // Extended headers the reader has already applied.
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => {}
            other => {
                return Err(Unpack::Refused(format!(
                    "entry '{}' is a {other:?}: an environment holds files, directories and links",
                    path.display()
                )))
            }
        }
    }
    let map: HashMap<&Path, &Path> = links
        .iter()
        .map(|(p, t)| (p.as_path(), t.as_path()))
        .collect();
    for (path, target) in &links {
        if let Some(link) = path.ancestors().skip(1).find(|a| map.contains_key(a)) {
            return Err(Unpack::Refused(format!(
                "symbolic link '{}' lies beneath the symbolic link '{}'",
                path.display(),
                link.display()
            )));
        }
        let from = path.parent().unwrap_or(Path::new(""));
        if !stays_inside(&map, from, target) {
            return Err(Unpack::Refused(format!(
                "symbolic link '{}' -> '{}' points outside the environment (a packed environment must hold its own interpreter: conda-pack makes one so, and `python -m venv --copies` for a venv)",
                path.display(),
                target.display()
            )));
        }
    }
    // Files and directories never lie beneath a link either (a real tar of
    // a directory tree has none): their parents were made as directories,
    // so a link there cannot be made below.
    for (path, target) in &links {
        let at = dst.join(path);
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::os::unix::fs::symlink(target, &at).map_err(|e| {
            Unpack::Io(std::io::Error::new(
                e.kind(),
                format!("symbolic link '{}': {e}", path.display()),
            ))
        })?;
    }
    Ok(())
}

/// An entry's path as given, for messages.
fn lossy<R: Read>(entry: &tar::Entry<R>) -> String {
    String::from_utf8_lossy(&entry.path_bytes()).into_owned()
}

/// An entry path (or hard link target) relative to the environment: no
/// root, no `..`; `.` parts dropped. Err: why not.
fn inside(path: &Path) -> std::result::Result<PathBuf, &'static str> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err("has a '..' in its path"),
            Component::RootDir | Component::Prefix(_) => return Err("has an absolute path"),
        }
    }
    Ok(out)
}

/// Whether a symbolic link in directory `from` (relative to the
/// environment) whose target is `target` resolves inside the environment,
/// following the archive's own links (`links`: link path → target) the way
/// the kernel will.
fn stays_inside(links: &HashMap<&Path, &Path>, from: &Path, target: &Path) -> bool {
    let mut at: Vec<OsString> = from.iter().map(OsString::from).collect();
    let mut todo: VecDeque<Component> = target.components().collect();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if at.pop().is_none() {
                    return false;
                }
            }
            Component::Normal(part) => {
                at.push(part.to_owned());
                let here: PathBuf = at.iter().collect();
                if let Some(next) = links.get(here.as_path()) {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return false;
                    }
                    at.pop();
                    for c in next.components().rev() {
                        todo.push_front(c);
                    }
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// What an archive holds, in order.
    enum Item<'a> {
        Dir(&'a str),
        File(&'a str, &'a [u8], u32),
        Symlink(&'a str, &'a str),
        HardLink(&'a str, &'a str),
    }

    /// A .tar.gz of `items`. Names go into the header as raw bytes, so an
    /// archive can hold what `tar::Builder` itself refuses to write
    /// (`../x`, `/x`), as a hostile archive would.
    fn archive(items: &[Item]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        for item in items {
            let mut h = tar::Header::new_old();
            let (name, data, kind, mode, link): (&str, &[u8], _, u32, &str) = match *item {
                Item::Dir(n) => (n, b"", tar::EntryType::Directory, 0o755, ""),
                Item::File(n, d, m) => (n, d, tar::EntryType::Regular, m, ""),
                Item::Symlink(n, t) => (n, b"", tar::EntryType::Symlink, 0o777, t),
                Item::HardLink(n, t) => (n, b"", tar::EntryType::Link, 0o644, t),
            };
            let old = h.as_old_mut();
            old.name[..name.len()].copy_from_slice(name.as_bytes());
            old.linkname[..link.len()].copy_from_slice(link.as_bytes());
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_size(data.len() as u64);
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        b.into_inner().unwrap().finish().unwrap()
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    const PYTHON: Item = Item::File("env/bin/python3", b"#!/bin/sh\n", 0o755);

    fn refused(items: &[Item]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("dst");
        std::fs::create_dir(&dst).unwrap();
        let result = unpack(&archive(items)[..], &dst);
        // Nothing was written beside the destination.
        let beside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(beside, ["dst"], "written outside");
        match result {
            Err(Unpack::Refused(why)) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_good_archive_unpacks_with_its_links_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = archive(&[
            Item::Dir("bin"),
            Item::File("bin/python3.11", b"#!/bin/sh\necho hi\n", 0o755),
            Item::Symlink("bin/python3", "python3.11"),
            Item::Symlink("bin/python", "./python3"),
            Item::File("lib/libx.so.1", b"ELF", 0o644),
            Item::Symlink("lib/libx.so", "libx.so.1"),
            Item::HardLink("lib/libx-copy.so.1", "lib/libx.so.1"),
            Item::Symlink("lib64", "lib"),
            Item::Symlink("share/python", "../bin/python3"),
            Item::File("./conda-meta/history", b"", 0o644),
        ]);
        unpack(&bytes[..], dir.path()).unwrap();
        let d = dir.path();
        let python = python_of(d).expect("bin/python3");
        assert_eq!(std::fs::read(&python).unwrap(), b"#!/bin/sh\necho hi\n");
        let mode = std::fs::metadata(&python).unwrap().permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "executable: {mode:o}");
        assert_eq!(std::fs::read(d.join("lib64/libx.so")).unwrap(), b"ELF");
        assert_eq!(std::fs::read(d.join("lib/libx-copy.so.1")).unwrap(), b"ELF");
        assert_eq!(
            std::fs::read_link(d.join("share/python")).unwrap(),
            Path::new("../bin/python3")
        );
        assert!(d.join("conda-meta/history").is_file());
    }

    #[test]
    fn a_plain_tar_unpacks_too() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        h.set_mode(0o755);
        h.set_cksum();
        b.append_data(&mut h, "bin/python3", &b"abc"[..]).unwrap();
        let bytes = b.into_inner().unwrap();
        let dir = tempfile::tempdir().unwrap();
        unpack(&bytes[..], dir.path()).unwrap();
        assert!(python_of(dir.path()).is_some());
    }

    #[test]
    fn an_entry_with_dot_dot_is_refused() {
        let why = refused(&[PYTHON, Item::File("../escape", b"x", 0o644)]);
        assert!(why.contains("'../escape'") && why.contains(".."), "{why}");
        let why = refused(&[Item::File("env/../../escape", b"x", 0o644)]);
        assert!(why.contains(".."), "{why}");
    }

    #[test]
    fn an_absolute_entry_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("abs-escape");
        let name = outside.to_str().unwrap().to_string();
        let why = refused(&[Item::File(&name, b"x", 0o644)]);
        assert!(why.contains("absolute"), "{why}");
        assert!(!outside.exists());
        let why = refused(&[Item::HardLink("passwd", "/etc/passwd")]);
        assert!(why.contains("absolute"), "{why}");
    }

    #[test]
    fn links_pointing_outside_are_refused() {
        for (link, target) in [
            ("evil", "/etc"),
            ("evil", ".."),
            ("lib/evil", "../../x"),
            ("lib/evil", "../lib/../.."),
        ] {
            let why = refused(&[PYTHON, Item::Symlink(link, target)]);
            assert!(why.contains("points outside"), "{link} -> {target}: {why}");
        }
        // Out through the archive's own links: `here` is the top, so
        // `here/..` is above it although it reads as the top.
        let why = refused(&[Item::Symlink("here", "."), Item::Symlink("up", "here/..")]);
        assert!(why.contains("'up'"), "{why}");
        let why = refused(&[Item::Symlink("deep", "a/b"), Item::Symlink("a/b", "../..")]);
        assert!(why.contains("points outside"), "{why}");
        // A loop never resolves.
        let why = refused(&[Item::Symlink("a", "b/x"), Item::Symlink("b", "a/y")]);
        assert!(why.contains("points outside"), "{why}");
    }

    #[test]
    fn nothing_lies_beneath_a_link() {
        let why = refused(&[Item::Symlink("here", "."), Item::Symlink("here/up", "..")]);
        assert!(why.contains("beneath"), "{why}");
    }

    #[test]
    fn devices_are_refused() {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Fifo);
        h.set_size(0);
        h.set_cksum();
        b.append_data(&mut h, "fifo", &b""[..]).unwrap();
        let bytes = b.into_inner().unwrap().finish().unwrap();
        let dir = tempfile::tempdir().unwrap();
        match unpack(&bytes[..], dir.path()) {
            Err(Unpack::Refused(why)) => assert!(why.contains("Fifo"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// A temporary directory with an empty cache root `cache/` and
    /// `env.tar.gz` holding `items`.
    fn cache_and_archive(items: &[Item]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        std::fs::create_dir(&root).unwrap();
        let tarball = write(dir.path(), "env.tar.gz", &archive(items));
        (dir, root, tarball)
    }

    #[test]
    fn the_cache_unpacks_once_per_version_of_an_archive() {
        let (dir, root, tarball) = cache_and_archive(&[Item::File("bin/python3", b"1", 0o755)]);
        // Several instances at once: one copy.
        let envs: Vec<PathBuf> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| unpacked_in(&root, &tarball).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(envs.iter().all(|e| e == &envs[0]), "{envs:?}");
        let entries = |root: &Path| -> Vec<OsString> {
            let mut v: Vec<_> = std::fs::read_dir(root)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            v.sort();
            v
        };
        assert_eq!(entries(&root).len(), 1, "no temporary directory left");
        // A marker shows the second load did not unpack again.
        write(&envs[0], "marker", b"");
        assert_eq!(unpacked_in(&root, &tarball).unwrap(), envs[0]);
        assert!(envs[0].join("marker").exists());
        // A changed archive is a new version.
        std::thread::sleep(std::time::Duration::from_millis(20));
        write(
            dir.path(),
            "env.tar.gz",
            &archive(&[Item::File("bin/python3", b"22", 0o755)]),
        );
        let newer = unpacked_in(&root, &tarball).unwrap();
        assert_ne!(newer, envs[0]);
        assert_eq!(std::fs::read(newer.join("bin/python3")).unwrap(), b"22");
        // A copy that lost its interpreter is unpacked again.
        std::fs::remove_file(newer.join("bin/python3")).unwrap();
        assert_eq!(unpacked_in(&root, &tarball).unwrap(), newer);
        assert!(python_of(&newer).is_some());
    }

    #[test]
    fn a_refused_archive_leaves_nothing_in_the_cache() {
        let (dir, root, tarball) =
            cache_and_archive(&[PYTHON, Item::File("../escape", b"x", 0o644)]);
        let e = unpacked_in(&root, &tarball).unwrap_err();
        assert!(e.message.contains("is refused: entry '../escape'"), "{e:?}");
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
        assert!(!dir.path().join("escape").exists());
    }

    #[test]
    fn the_cache_root_must_be_private() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let uid = std::fs::metadata(dir.path()).unwrap().uid();
        let root = dir.path().join("root");
        private_dir(&root, uid).unwrap();
        let mode = std::fs::metadata(&root).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        private_dir(&root, uid).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(private_dir(&root, uid).is_err(), "open to others");
        assert!(private_dir(&root, uid + 1).is_err(), "another user's");
    }
}
