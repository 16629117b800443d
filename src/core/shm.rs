//! System (POSIX) shared memory regions that clients register and then name
//! in requests instead of sending tensor data (Triton's
//! `system_shared_memory` extension).
//!
//! A region maps `/dev/shm/<key>` (what `shm_open(key)` opens) from `offset`
//! for `byte_size` bytes. Every use is bounds-checked against the registered
//! range: a request can never read or write outside the mapping.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use memmap2::MmapMut;

use crate::core::error::{Error, Result};
use crate::core::types::ShmRef;

/// Keys Triton keeps for its Python backend's own regions.
const RESERVED_PREFIX: &str = "triton_python_backend_shm_region_";

/// One registered region.
struct Region {
    key: String,
    offset: usize,
    byte_size: usize,
    /// The whole shared memory object, mapped shared and writable.
    map: Mutex<MmapMut>,
}

/// What status reports for a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// The registered regions, by name.
#[derive(Default)]
pub struct SharedMemoryManager {
    regions: RwLock<BTreeMap<String, Arc<Region>>>,
}

impl SharedMemoryManager {
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> Result<()> {
        if self.regions.read().unwrap().contains_key(name) {
            return Err(Error::new(
                crate::core::error::ErrorKind::AlreadyExists,
                format!("shared memory region '{name}' already in manager"),
            ));
        }
        if key.contains(RESERVED_PREFIX) {
            return Err(Error::invalid_arg(format!(
                "cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved prefix '{RESERVED_PREFIX}'"
            )));
        }
        let file_name = key.strip_prefix('/').unwrap_or(key);
        if file_name.is_empty() || file_name.contains('/') || file_name == "." || file_name == ".."
        {
            return Err(Error::internal(format!(
                "Unable to open shared memory region: '{key}'"
            )));
        }
        let path = std::path::Path::new("/dev/shm").join(file_name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|_| {
                Error::internal(format!("Unable to open shared memory region: '{key}'"))
            })?;
        let size = file
            .metadata()
            .map_err(|e| {
                Error::internal(format!("Unable to stat shared memory region '{key}': {e}"))
            })?
            .len();
        let end = offset.checked_add(byte_size);
        if end.is_none_or(|end| end > size) {
            return Err(Error::invalid_arg(format!(
                "failed to register shared memory region '{name}': invalid args"
            )));
        }
        // SAFETY: the mapping is of a file the client shares on purpose; we
        // only copy to and from it within the registered bounds, under a lock.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| {
            Error::internal(format!("Unable to map shared memory region '{key}': {e}"))
        })?;
        let region = Region {
            key: key.to_string(),
            offset: offset as usize,
            byte_size: byte_size as usize,
            map: Mutex::new(map),
        };
        let mut regions = self.regions.write().unwrap();
        if regions.contains_key(name) {
            return Err(Error::new(
                crate::core::error::ErrorKind::AlreadyExists,
                format!("shared memory region '{name}' already in manager"),
            ));
        }
        regions.insert(name.to_string(), Arc::new(region));
        Ok(())
    }

    /// Unregisters one region (an unknown name is not an error, as in
    /// Triton), or every region when `name` is None.
    pub fn unregister(&self, name: Option<&str>) {
        let mut regions = self.regions.write().unwrap();
        match name {
            Some(n) => {
                regions.remove(n);
            }
            None => regions.clear(),
        }
    }

    pub fn status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>> {
        let regions = self.regions.read().unwrap();
        let status = |(n, r): (&String, &Arc<Region>)| RegionStatus {
            name: n.clone(),
            key: r.key.clone(),
            offset: r.offset as u64,
            byte_size: r.byte_size as u64,
        };
        match name {
            None => Ok(regions.iter().map(status).collect()),
            Some(n) => regions
                .get_key_value(n)
                .map(|kv| vec![status(kv)])
                .ok_or_else(|| {
                    Error::not_found(format!("Unable to find system shared memory region: '{n}'"))
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

    /// The byte range a reference covers inside the mapping, checked in
    /// Triton's order and with its messages.
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
        let start = region.offset + r.offset;
        Ok(start..start + r.byte_size)
    }

    /// Copies the referenced bytes out of a region.
    pub fn read(&self, r: &ShmRef) -> Result<Vec<u8>> {
        let region = self.region(&r.region)?;
        let range = Self::range(&region, r)?;
        let map = region.map.lock().unwrap();
        Ok(map[range].to_vec())
    }

    /// Writes `data` at the referenced place; `data` must fit.
    pub fn write(&self, r: &ShmRef, output: &str, data: &[u8]) -> Result<()> {
        let region = self.region(&r.region)?;
        let range = Self::range(&region, r)?;
        if data.len() > range.len() {
            return Err(Error::internal(format!(
                "shared memory size specified with the request for output '{output}' ({} bytes) should be at least {} bytes to hold the results",
                range.len(),
                data.len()
            )));
        }
        let mut map = region.map.lock().unwrap();
        map[range.start..range.start + data.len()].copy_from_slice(data);
        Ok(())
    }
}

/// Triton's answer to a CUDA shared memory registration in a build without
/// GPU support (this one).
pub fn cuda_unsupported(name: &str) -> Error {
    Error::invalid_arg(format!(
        "failed to register CUDA shared memory region: '{name}', GPUs not supported"
    ))
}
