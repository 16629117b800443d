//! Shared memory regions that clients register and then name in requests
//! instead of sending tensor data: system (POSIX) shared memory (Triton's
//! `system_shared_memory` extension) and, on a machine with a GPU, CUDA
//! device memory shared by IPC handle (`cuda_shared_memory`, through
//! `device::cuda_ipc`). Both kinds share one namespace of region names, as
//! in Triton; without a GPU a CUDA registration gets the answer of Triton's
//! CPU-only build.
//!
//! A region is `/dev/shm/<key>` (what `shm_open(key)` opens) from `offset`
//! for `byte_size` bytes. Every use is bounds-checked against the registered
//! range, and the server never maps a region: it copies in and out with
//! `pread`/`pwrite` on the descriptor it opened at registration. A client
//! can truncate its object at any moment; a mapping would then fault
//! (SIGBUS, the whole server), while a read past the end is only a short
//! read, which fails that request with a clear error.
//!
//! The key must name a shared memory object itself: one path component
//! (`/name`), opened with `O_NOFOLLOW`, a regular file on the same file
//! system as `/dev/shm` (so neither a symlink nor a hard link can lead the
//! server to a file elsewhere).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::core::device::cuda_ipc::IpcMemory;
use crate::core::error::{Error, ErrorKind, Result};
use crate::core::types::ShmRef;

/// Keys Triton keeps for its Python backend's own regions.
const RESERVED_PREFIX: &str = "triton_python_backend_shm_region_";

/// Where `shm_open` keeps its objects on Linux.
const SHM_DIR: &str = "/dev/shm";

/// One registered region.
struct Region {
    byte_size: usize,
    backing: Backing,
}

enum Backing {
    System {
        key: String,
        offset: usize,
        /// The shared memory object, opened read-write at registration.
        file: File,
    },
    Cuda {
        device_id: i64,
        memory: IpcMemory,
    },
}

/// The two kinds of region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    System,
    Cuda,
}

impl Region {
    fn kind(&self) -> Kind {
        match self.backing {
            Backing::System { .. } => Kind::System,
            Backing::Cuda { .. } => Kind::Cuda,
        }
    }
}

/// What status reports for a CUDA region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaRegionStatus {
    pub name: String,
    pub device_id: u64,
    pub byte_size: u64,
}

/// What status reports for a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// Regions held by a request in flight (`SharedMemoryManager::hold`).
#[derive(Default)]
pub struct InUse(#[allow(dead_code)] Vec<Arc<Region>>);

/// The registered regions, by name.
#[derive(Default)]
pub struct SharedMemoryManager {
    regions: RwLock<BTreeMap<String, Arc<Region>>>,
}

/// Opens the shared memory object a key names, refusing anything that is
/// not one: a key with a `/` past the leading one, `.`/`..`, a symlink, or
/// a file that is not on `/dev/shm`'s file system. Returns it with its size.
fn open_object(key: &str) -> Result<(File, u64)> {
    let unable = || Error::invalid_arg(format!("Unable to open shared memory region: '{key}'"));
    let file_name = key.strip_prefix('/').unwrap_or(key);
    if file_name.is_empty()
        || file_name.contains('/')
        || file_name.contains('\0')
        || file_name == "."
        || file_name == ".."
    {
        return Err(unable());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(Path::new(SHM_DIR).join(file_name))
        .map_err(|_| unable())?;
    let meta = file.metadata().map_err(|_| unable())?;
    let shm_dev = std::fs::metadata(SHM_DIR).map_err(|_| unable())?.dev();
    if !meta.file_type().is_file() || meta.dev() != shm_dev {
        return Err(unable());
    }
    Ok((file, meta.len()))
}

/// The object's current size (it can shrink at any moment).
fn current_size(file: &File, name: &str) -> Result<u64> {
    file.metadata().map(|m| m.len()).map_err(|e| {
        Error::internal(format!(
            "Unable to stat shared memory region '{name}': {}",
            crate::core::error::os_reason(&e)
        ))
    })
}

fn shrunk(name: &str) -> Error {
    Error::invalid_arg(format!(
        "shared memory region '{name}' is smaller than when it was registered"
    ))
}

impl SharedMemoryManager {
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> Result<()> {
        if self.regions.read().unwrap().contains_key(name) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("shared memory region '{name}' already in manager"),
            ));
        }
        if key.contains(RESERVED_PREFIX) {
            return Err(Error::invalid_arg(format!(
                "cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved prefix '{RESERVED_PREFIX}'"
            )));
        }
        let (file, size) = open_object(key)?;
        let end = offset.checked_add(byte_size);
        if end.is_none_or(|end| end > size) || usize::try_from(end.unwrap_or(0)).is_err() {
            return Err(Error::invalid_arg(format!(
                "failed to register shared memory region '{name}': invalid args"
            )));
        }
        let region = Region {
            byte_size: byte_size as usize,
            backing: Backing::System {
                key: key.to_string(),
                offset: offset as usize,
                file,
            },
        };
        self.insert(name, region)
    }

    fn insert(&self, name: &str, region: Region) -> Result<()> {
        let mut regions = self.regions.write().unwrap();
        if regions.contains_key(name) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("shared memory region '{name}' already in manager"),
            ));
        }
        regions.insert(name.to_string(), Arc::new(region));
        Ok(())
    }

    /// Registers CUDA device memory shared by IPC handle (64 bytes) on GPU
    /// `device_id`, one of `gpus` (the GPUs this server uses). Without a
    /// GPU, Triton's CPU-only answer.
    pub fn register_cuda(
        &self,
        name: &str,
        raw_handle: &[u8],
        device_id: i64,
        byte_size: u64,
        gpus: &[i32],
    ) -> Result<()> {
        if gpus.is_empty() {
            return Err(cuda_unsupported(name));
        }
        let failed = |why: String| {
            Error::invalid_arg(format!(
                "failed to register CUDA shared memory region '{name}': {why}"
            ))
        };
        if !gpus.iter().any(|&g| i64::from(g) == device_id) {
            let ids: Vec<String> = gpus.iter().map(i32::to_string).collect();
            return Err(failed(format!(
                "device {device_id} is not a GPU this server uses (its GPUs: {})",
                ids.join(", ")
            )));
        }
        if self.regions.read().unwrap().contains_key(name) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("shared memory region '{name}' already in manager"),
            ));
        }
        let size = usize::try_from(byte_size).map_err(|_| failed("invalid args".into()))?;
        let memory = IpcMemory::open(raw_handle, device_id as i32, size).map_err(failed)?;
        self.insert(
            name,
            Region {
                byte_size: size,
                backing: Backing::Cuda { device_id, memory },
            },
        )
    }

    /// Unregisters one region of `kind` (an unknown name is not an error,
    /// as in Triton), or every region of `kind` when `name` is None; a
    /// `kind` of None is either (the v1 API's unregister). A region a
    /// request in flight uses (`hold`) stays, with Triton's error; of all
    /// regions, the others go and the error names those that stay.
    pub fn unregister(&self, name: Option<&str>, kind: Option<Kind>) -> Result<()> {
        let mut regions = self.regions.write().unwrap();
        let of_kind = |r: &Region| kind.is_none_or(|k| r.kind() == k);
        // The map's Arc and none other: no request holds it.
        let in_use = |r: &Arc<Region>| Arc::strong_count(r) > 1;
        match name {
            Some(n) => match regions.get(n) {
                Some(r) if of_kind(r) && in_use(r) => Err(Error::internal(format!(
                    "Cannot unregister shared memory region '{n}', it is currently in use."
                ))),
                Some(r) if of_kind(r) => {
                    regions.remove(n);
                    Ok(())
                }
                _ => Ok(()),
            },
            None => {
                let mut kept = Vec::new();
                regions.retain(|n, r| {
                    if !of_kind(r) {
                        return true;
                    }
                    if in_use(r) {
                        kept.push(format!("{n} ,"));
                    }
                    in_use(r)
                });
                if kept.is_empty() {
                    return Ok(());
                }
                let what = match kind {
                    Some(Kind::Cuda) => "cuda",
                    _ => "system",
                };
                Err(Error::internal(format!(
                    "Failed to unregister the following {what} shared memory regions: {}",
                    kept.concat()
                )))
            }
        }
    }

    /// Holds the named regions (those registered) until the returned value
    /// is dropped: a request holds the regions of its inputs and outputs
    /// while in flight, so they cannot be unregistered under it.
    pub fn hold<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> InUse {
        let regions = self.regions.read().unwrap();
        InUse(
            names
                .into_iter()
                .filter_map(|n| regions.get(n).cloned())
                .collect(),
        )
    }

    /// The system regions (one, by name).
    pub fn status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>> {
        self.statuses(name, "system", |n, r| match &r.backing {
            Backing::System { key, offset, .. } => Some(RegionStatus {
                name: n.to_string(),
                key: key.clone(),
                offset: *offset as u64,
                byte_size: r.byte_size as u64,
            }),
            Backing::Cuda { .. } => None,
        })
    }

    /// The CUDA regions (one, by name).
    pub fn cuda_status(&self, name: Option<&str>) -> Result<Vec<CudaRegionStatus>> {
        self.statuses(name, "cuda", |n, r| match &r.backing {
            Backing::Cuda { device_id, .. } => Some(CudaRegionStatus {
                name: n.to_string(),
                device_id: *device_id as u64,
                byte_size: r.byte_size as u64,
            }),
            Backing::System { .. } => None,
        })
    }

    /// The statuses of the regions `status` describes (those of one kind),
    /// or of the one named; an unknown name (or one of the other kind) is
    /// Triton's "Unable to find <kind> shared memory region".
    fn statuses<T>(
        &self,
        name: Option<&str>,
        kind: &str,
        status: impl Fn(&str, &Region) -> Option<T>,
    ) -> Result<Vec<T>> {
        let regions = self.regions.read().unwrap();
        match name {
            None => Ok(regions.iter().filter_map(|(n, r)| status(n, r)).collect()),
            Some(n) => regions
                .get(n)
                .and_then(|r| status(n, r))
                .map(|s| vec![s])
                .ok_or_else(|| {
                    Error::not_found(format!("Unable to find {kind} shared memory region: '{n}'"))
                }),
        }
    }

    fn region(&self, name: &str) -> Result<Arc<Region>> {
        self.regions
            .read()
            .unwrap()
            .get(name)
            .cloned()
            .ok_or_else(|| {
                Error::not_found(format!("Unable to find shared memory region: '{name}'"))
            })
    }

    /// The byte range a reference covers inside the region (from the
    /// registered offset of a system region), checked in Triton's order and
    /// with its messages.
    fn range(region: &Region, r: &ShmRef) -> Result<std::ops::Range<usize>> {
        if r.offset >= region.byte_size && !(r.offset == 0 && r.byte_size == 0) {
            return Err(Error::invalid_arg(format!(
                "Invalid offset for shared memory region: '{}'",
                r.region
            )));
        }
        let Some(end) = r.offset.checked_add(r.byte_size) else {
            return Err(Error::invalid_arg(format!(
                "Integer overflow detected: byte_size ({}) + offset ({}) exceeds maximum value ({}) for region '{}'",
                r.byte_size,
                r.offset,
                usize::MAX,
                r.region
            )));
        };
        if end > region.byte_size {
            return Err(Error::invalid_arg(format!(
                "Invalid offset + byte size for shared memory region: '{}'",
                r.region
            )));
        }
        let start = match &region.backing {
            Backing::System { offset, .. } => offset + r.offset,
            Backing::Cuda { .. } => r.offset,
        };
        Ok(start..start + r.byte_size)
    }

    /// Copies the referenced bytes out of a region.
    pub fn read(&self, r: &ShmRef) -> Result<Vec<u8>> {
        let region = self.region(&r.region)?;
        let range = Self::range(&region, r)?;
        let mut data = vec![0u8; range.len()];
        let file = match &region.backing {
            Backing::System { file, .. } => file,
            Backing::Cuda { memory, .. } => {
                return match memory.read(range.start, &mut data) {
                    Ok(()) => Ok(data),
                    Err(why) => Err(Error::internal(format!(
                        "Unable to read CUDA shared memory region '{}': {why}",
                        r.region
                    ))),
                };
            }
        };
        match file.read_exact_at(&mut data, range.start as u64) {
            Ok(()) => Ok(data),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(shrunk(&r.region)),
            Err(e) => Err(Error::internal(format!(
                "Unable to read shared memory region '{}': {}",
                r.region,
                crate::core::error::os_reason(&e)
            ))),
        }
    }

    /// Writes `data` at the referenced place; `data` must fit, and the
    /// object must still hold the range (a write never grows it).
    pub fn write(&self, r: &ShmRef, output: &str, data: &[u8]) -> Result<()> {
        let region = self.region(&r.region)?;
        let range = Self::range(&region, r)?;
        if data.len() > range.len() {
            return Err(Error::invalid_arg(format!(
                "shared memory size specified with the request for output '{output}' ({} bytes) should be at least {} bytes to hold the results",
                range.len(),
                data.len()
            )));
        }
        let file = match &region.backing {
            Backing::System { file, .. } => file,
            Backing::Cuda { memory, .. } => {
                return memory.write(range.start, data).map_err(|why| {
                    Error::internal(format!(
                        "Unable to write CUDA shared memory region '{}': {why}",
                        r.region
                    ))
                });
            }
        };
        let end = (range.start + data.len()) as u64;
        if current_size(file, &r.region)? < end {
            return Err(shrunk(&r.region));
        }
        file.write_all_at(data, range.start as u64).map_err(|e| {
            Error::internal(format!(
                "Unable to write shared memory region '{}': {}",
                r.region,
                crate::core::error::os_reason(&e)
            ))
        })
    }
}

/// Triton's answer to a CUDA shared memory registration in a build without
/// GPU support; trtis's on a machine without a GPU.
pub fn cuda_unsupported(name: &str) -> Error {
    Error::invalid_arg(format!(
        "failed to register CUDA shared memory region: '{name}', GPUs not supported"
    ))
}
