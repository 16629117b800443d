//! Triton's response cache: with `--cache-config local,size=BYTES`, a model
//! whose config has `response_cache { enable: true }` answers a request it
//! has answered before (same model and version, same input names, types,
//! shapes and bytes, same requested outputs and classification) from a
//! bounded LRU, without running the model.
//!
//! Keys are two SipHash-1-3 digests under keys drawn at random when the
//! cache is made (128 bits no client can aim a collision at); entries are
//! the finished output tensors, and the cache holds at most `size` bytes of
//! them (an answer larger than the whole cache is not kept).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Mutex;

use lru::LruCache;

use crate::core::error::{Error, Result};
use crate::core::types::{RequestedOutput, Tensor};

/// `--cache-config` settings: the local cache and its size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSettings {
    pub size: usize,
}

impl CacheSettings {
    /// Reads Triton's `--cache-config <cache>,<key>=<value>` values (and the
    /// deprecated `--response-cache-byte-size`, given as `local,size=N`).
    /// `None` without any: no cache.
    pub fn from_flags(values: &[String]) -> Result<Option<CacheSettings>> {
        let mut size = None;
        for value in values {
            let (cache, setting) = value.split_once(',').ok_or_else(|| {
                Error::invalid_arg(format!(
                    "--cache-config '{value}': expected <cache>,<key>=<value>, e.g. local,size=1048576"
                ))
            })?;
            if cache != "local" {
                return Err(Error::unsupported(format!(
                    "--cache-config: cache '{cache}' is not supported; trtis has the 'local' cache"
                )));
            }
            match setting.split_once('=') {
                Some(("size", n)) => {
                    size = Some(n.trim().parse::<usize>().map_err(|_| {
                        Error::invalid_arg(format!(
                            "--cache-config local,size={n}: the size must be a number of bytes"
                        ))
                    })?);
                }
                _ => {
                    return Err(Error::unsupported(format!(
                        "--cache-config local: unknown setting '{setting}' (the local cache takes size=BYTES)"
                    )))
                }
            }
        }
        Ok(size.map(|size| CacheSettings { size }))
    }
}

/// A request's identity for the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key(u64, u64);

struct Entries {
    lru: LruCache<Key, Vec<Tensor>>,
    bytes: usize,
}

/// The server's response cache, shared by every model that enables it.
pub struct ResponseCache {
    capacity: usize,
    hashers: (RandomState, RandomState),
    entries: Mutex<Entries>,
}

/// What an entry costs: its tensors' data and names.
fn cost(tensors: &[Tensor]) -> usize {
    tensors
        .iter()
        .map(|t| t.data.len() + t.name.len() + 8 * t.shape.len() + 64)
        .sum()
}

impl ResponseCache {
    pub fn new(settings: CacheSettings) -> Self {
        ResponseCache {
            capacity: settings.size,
            hashers: (RandomState::new(), RandomState::new()),
            entries: Mutex::new(Entries {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
        }
    }

    /// The key of a request to `model` as loaded the `generation`th time
    /// (each load of a version is a new generation, so a reload with other
    /// files never answers from the old one's entries).
    pub fn key(
        &self,
        model: &str,
        generation: u64,
        inputs: &[Tensor],
        outputs: &[RequestedOutput],
    ) -> Key {
        let digest = |state: &RandomState| {
            let mut h = state.build_hasher();
            model.hash(&mut h);
            generation.hash(&mut h);
            for t in inputs {
                t.name.hash(&mut h);
                t.datatype.name().hash(&mut h);
                t.shape.hash(&mut h);
                t.data.hash(&mut h);
            }
            for o in outputs {
                o.name.hash(&mut h);
                o.classification.hash(&mut h);
            }
            h.finish()
        };
        Key(digest(&self.hashers.0), digest(&self.hashers.1))
    }

    /// A cached answer (now the most recently used).
    pub fn get(&self, key: Key) -> Option<Vec<Tensor>> {
        self.entries.lock().unwrap().lru.get(&key).cloned()
    }

    /// Keeps an answer, evicting the least recently used ones to make room.
    pub fn insert(&self, key: Key, tensors: &[Tensor]) {
        let size = cost(tensors);
        if size > self.capacity {
            return;
        }
        let mut e = self.entries.lock().unwrap();
        if let Some(old) = e.lru.pop(&key) {
            e.bytes -= cost(&old);
        }
        while e.bytes + size > self.capacity {
            match e.lru.pop_lru() {
                Some((_, old)) => e.bytes -= cost(&old),
                None => break,
            }
        }
        e.bytes += size;
        e.lru.put(key, tensors.to_vec());
    }

    /// Entries and bytes held.
    pub fn usage(&self) -> (usize, usize) {
        let e = self.entries.lock().unwrap();
        (e.lru.len(), e.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::types::DataType;

    fn tensor(name: &str, bytes: usize) -> Tensor {
        Tensor {
            name: name.into(),
            datatype: DataType::Uint8,
            shape: vec![bytes as i64],
            data: vec![7; bytes],
        }
    }

    #[test]
    fn flags_read_as_tritons() {
        let s = |v: &[&str]| {
            CacheSettings::from_flags(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(s(&[]).unwrap(), None);
        assert_eq!(
            s(&["local,size=1048576"]).unwrap(),
            Some(CacheSettings { size: 1048576 })
        );
        assert!(s(&["redis,host=x"]).is_err());
        assert!(s(&["local,size=lots"]).is_err());
        assert!(s(&["local"]).is_err());
    }

    #[test]
    fn same_request_same_key_any_difference_another() {
        let c = ResponseCache::new(CacheSettings { size: 1 << 20 });
        let out = [RequestedOutput::named("OUT")];
        let a = c.key("m", 1, &[tensor("IN", 4)], &out);
        assert_eq!(a, c.key("m", 1, &[tensor("IN", 4)], &out));
        assert_ne!(a, c.key("m", 2, &[tensor("IN", 4)], &out));
        assert_ne!(a, c.key("n", 1, &[tensor("IN", 4)], &out));
        assert_ne!(a, c.key("m", 1, &[tensor("IN", 5)], &out));
        let mut other = tensor("IN", 4);
        other.data[3] = 8;
        assert_ne!(a, c.key("m", 1, &[other], &out));
        let classified = [RequestedOutput {
            classification: Some(3),
            ..out[0].clone()
        }];
        assert_ne!(a, c.key("m", 1, &[tensor("IN", 4)], &classified));
    }

    #[test]
    fn the_least_recently_used_go_first_and_the_size_holds() {
        let one = cost(&[tensor("OUT", 1000)]);
        let c = ResponseCache::new(CacheSettings { size: 3 * one });
        let k = |n: u64| Key(n, n);
        for n in 0..3 {
            c.insert(k(n), &[tensor("OUT", 1000)]);
        }
        assert!(c.get(k(0)).is_some(), "0 is now the most recent");
        c.insert(k(3), &[tensor("OUT", 1000)]);
        assert!(c.get(k(1)).is_none(), "1 was the least recently used");
        assert!(c.get(k(0)).is_some() && c.get(k(2)).is_some() && c.get(k(3)).is_some());
        assert_eq!(c.usage(), (3, 3 * one));
        c.insert(k(9), &[tensor("OUT", 10_000)]);
        assert!(
            c.get(k(9)).is_none(),
            "larger than the whole cache: not kept"
        );
        assert_eq!(c.usage().0, 3);
    }
}
