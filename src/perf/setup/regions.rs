//! The system shared memory [`Regions`] of a run: files under `/dev/shm`
//! registered with the server, unregistered and removed afterwards.

use std::path::Path;

use crate::client::{Api, Client, ConnectOptions, Protocol};
use crate::core::types::ShmRef;

/// System shared memory regions made for a run: files under `/dev/shm`
/// registered with the server; `cleanup` unregisters and removes them.
#[derive(Debug, Default)]
pub struct Regions {
    pub(super) names: Vec<String>,
}

impl Regions {
    /// A new region `trtis_perf_<pid>_<label>` holding `data` (or `size`
    /// zero bytes), registered with the server.
    pub(super) async fn create(
        &mut self,
        client: &mut Client,
        label: &str,
        data: Option<&[u8]>,
        size: usize,
    ) -> Result<ShmRef, String> {
        let name = format!("trtis_perf_{}_{label}", std::process::id());
        let path = Path::new("/dev/shm").join(&name);
        let bytes = match data {
            Some(d) => d.to_vec(),
            None => vec![0; size],
        };
        std::fs::write(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        self.names.push(name.clone());
        client
            .register_system_shared_memory(&name, &format!("/{name}"), 0, bytes.len() as u64)
            .await
            .map_err(|e| format!("registering shared memory region '{name}': {}", e.message()))?;
        Ok(ShmRef {
            region: name,
            byte_size: bytes.len(),
            offset: 0,
        })
    }

    /// Unregisters and removes the regions (on a fresh connection, from
    /// outside any async runtime).
    pub fn cleanup(&self, url: &str, protocol: Protocol, options: &ConnectOptions) {
        if self.names.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(async {
                if let Ok(mut c) = Client::connect_with(url, protocol, Api::V2, options).await {
                    for n in &self.names {
                        let _ = c.unregister_system_shared_memory(n).await;
                    }
                }
            });
        }
        for n in &self.names {
            let _ = std::fs::remove_file(Path::new("/dev/shm").join(n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::setup::tests::region_files;

    #[test]
    fn a_region_the_server_refuses_is_still_cleaned_up() {
        if !Path::new("/dev/shm").is_dir() {
            return;
        }
        // Nothing listens on port 1: registering fails, the file stays
        // listed and cleanup removes it.
        let url = "127.0.0.1:1";
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut regions = Regions::default();
        let err = rt.block_on(async {
            let mut client = Client::connect(url, Protocol::Http).await.unwrap();
            regions
                .create(&mut client, "refused", Some(&[1, 2, 3]), 0)
                .await
                .unwrap_err()
        });
        let name = format!("trtis_perf_{}_refused", std::process::id());
        let left = region_files("_refused");
        regions.cleanup(url, Protocol::Http, &ConnectOptions::default());
        assert!(
            err.starts_with(&format!("registering shared memory region '{name}': ")),
            "{err}"
        );
        assert_eq!(left, [name]);
        assert!(region_files("_refused").is_empty());
    }
}
