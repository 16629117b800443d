//! What `trtis perf` does before it measures, apart from reading its
//! flags: the sweep [`plan`] from the load flags, the runtime's
//! [`worker_threads`], and [`prepare`]: the model's metadata and config,
//! each request's inputs ([`InputPlan`]: generated, or from an
//! `--input-data` file), system shared memory [`Regions`] for the tensors,
//! the prepared requests, the [`sequences`] of a sequence model, and one
//! probe request, so that a model that cannot serve fails before the
//! measurement starts.
//!
//! The parts: `sweep` reads the load flags, `sequence` the sequence flags,
//! `input_plan` builds each request's inputs and `regions` makes the shared
//! memory regions; [`prepare`] here puts them together.

mod input_plan;
mod regions;
mod sequence;
mod sweep;

use std::path::PathBuf;

use crate::client::inputs::Generate;
use crate::client::{Api, Client, ClientError, ConnectOptions, Prepared, Protocol, SeqFlags};
use crate::core::types::RequestedOutput;

use super::driver::Sequences;

pub(crate) use input_plan::InputPlan;
pub use regions::Regions;
pub use sequence::SequenceOptions;
pub use sweep::{plan, worker_threads, LoadFlags};

use sequence::sequences;

/// Why the setup failed; the command gives each its exit code.
#[derive(Debug)]
pub enum SetupError {
    /// The flags are malformed or do not fit the model (exit 2).
    Usage(String),
    /// Something else failed, such as registering shared memory (exit 1).
    Failed(String),
    /// The server could not be reached, or answered with an error.
    Server(ClientError),
}

/// What the requests are made of and where their tensors travel.
#[derive(Debug, Clone)]
pub struct Options {
    pub model: String,
    /// Empty: the server's choice.
    pub version: String,
    pub batch: i64,
    /// `--shape NAME:d1,d2` specs.
    pub shapes: Vec<String>,
    /// How to fill inputs that no file provides.
    pub generate: Generate,
    /// A perf_analyzer `--input-data` JSON file: one request per entry.
    pub input_data: Option<PathBuf>,
    /// Tensors in system shared memory regions instead of the requests.
    pub shared_memory: bool,
    /// Bytes of the region of each output.
    pub output_shm_size: usize,
    pub sequence: SequenceOptions,
    /// Headers and TLS of the connections.
    pub connect: ConnectOptions,
}

/// What the measurement runs with.
pub struct Setup {
    /// The connection (the driver reads statistics through it).
    pub client: Client,
    /// The requests, sent in turn.
    pub requests: Vec<Prepared>,
    /// The sequences of a sequence model.
    pub sequences: Option<Sequences>,
}

/// Connects, reads the model, builds and prepares its requests (their
/// tensors in `regions` with `shared_memory`) and sends one of them (as a
/// sequence of one to a sequence model). On an error the regions made so
/// far are left in `regions` for the caller to clean up.
pub async fn prepare(
    url: &str,
    protocol: Protocol,
    options: &Options,
    regions: &mut Regions,
) -> Result<Setup, SetupError> {
    let mut client = Client::connect_with(url, protocol, Api::V2, &options.connect)
        .await
        .map_err(SetupError::Server)?;
    let (model, version) = (options.model.as_str(), options.version.as_str());
    let meta = client
        .model_metadata(model, version)
        .await
        .map_err(SetupError::Server)?;
    let config = client
        .model_config(model, version)
        .await
        .map_err(SetupError::Server)?;
    let plan = InputPlan::new(&config, options)?;
    let mut outputs = Vec::new();
    if options.shared_memory {
        for (k, o) in meta.outputs.iter().enumerate() {
            let r = regions
                .create(
                    &mut client,
                    &format!("out{k}"),
                    None,
                    options.output_shm_size,
                )
                .await
                .map_err(SetupError::Failed)?;
            outputs.push(RequestedOutput {
                name: o.name.clone(),
                classification: None,
                shm: Some(r),
            });
        }
    }
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut requests = Vec::with_capacity(plan.requests());
    for i in 0..plan.requests() {
        let tensors = plan.inputs(&meta.inputs, i, &mut seed)?;
        let mut input_shm = Vec::new();
        if options.shared_memory {
            for (j, t) in tensors.iter().enumerate() {
                let r = regions
                    .create(&mut client, &format!("in{i}_{j}"), Some(&t.data), 0)
                    .await
                    .map_err(SetupError::Failed)?;
                input_shm.push(Some(r));
            }
        }
        let request = client
            .prepare_shm(model, version, tensors, &input_shm, outputs.clone())
            .map_err(|e| SetupError::Failed(e.to_string()))?;
        requests.push(request);
    }
    let sequences = sequences(&config, &options.sequence)?;
    // One request first: a model that cannot serve them fails here,
    // clearly (a sequence model gets a sequence of one).
    let probe = sequences.as_ref().map(|s| SeqFlags {
        id: s.next_id(),
        start: true,
        end: true,
    });
    let probed = requests[0].send_seq(probe).await;
    if let (Some(s), Some(p)) = (&sequences, probe) {
        s.release(p.id);
    }
    probed.map_err(SetupError::Server)?;
    Ok(Setup {
        client,
        requests,
        sequences,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::core::config::{parse_config, ModelConfig};
    use crate::core::{Engine, ServerConfig};
    use crate::server::frontend::http::AppState;
    use crate::server::frontend::router;

    pub(super) fn config(text: &str) -> ModelConfig {
        parse_config(text.as_bytes()).unwrap().config
    }

    pub(super) fn options(model: &str) -> Options {
        Options {
            model: model.into(),
            version: String::new(),
            batch: 1,
            shapes: Vec::new(),
            generate: Generate::Zero,
            input_data: None,
            shared_memory: false,
            output_shm_size: 64,
            sequence: SequenceOptions {
                length: 5,
                length_variation: 0.0,
                id_range: None,
                num_of_sequences: 2,
            },
            connect: ConnectOptions::default(),
        }
    }

    /// Whether any `/dev/shm` file of this process's regions with `label`
    /// in its name is left.
    pub(super) fn region_files(label: &str) -> Vec<String> {
        let prefix = format!("trtis_perf_{}_", std::process::id());
        std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&prefix) && n.contains(label))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// An in-process server (identity models, client shared memory
    /// allowed) on 127.0.0.1:0.
    struct TestServer {
        url: String,
        _runtime: tokio::runtime::Runtime,
        _repo: tempfile::TempDir,
    }

    fn server() -> TestServer {
        let repo = tempfile::tempdir().unwrap();
        for (name, extra) in [("fixed", ""), ("seq", "sequence_batching { }")] {
            let dir = repo.path().join(name);
            std::fs::create_dir_all(dir.join("1")).unwrap();
            std::fs::write(dir.join("1/.keep"), "").unwrap();
            std::fs::write(
                dir.join("config.pbtxt"),
                format!(
                    "backend: \"identity\"\nmax_batch_size: 8\n{extra}\n\
                     input [ {{ name: \"IN\" data_type: TYPE_FP32 dims: [ 4 ] }} ]\n\
                     output [ {{ name: \"OUT\" data_type: TYPE_FP32 dims: [ 4 ] }} ]\n"
                ),
            )
            .unwrap();
        }
        let mut config = ServerConfig::new(repo.path());
        config.allow_client_shm = true;
        let (engine, errors) = Engine::start(config).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = listener.local_addr().unwrap().to_string();
        let state = AppState {
            engine,
            max_input_size: 1 << 20,
        };
        let app = router(state, true);
        runtime.spawn(async move { axum::serve(listener, app).await });
        TestServer {
            url,
            _runtime: runtime,
            _repo: repo,
        }
    }

    #[test]
    fn prepare_puts_tensors_in_shared_memory_and_probes_the_model() {
        if !Path::new("/dev/shm").is_dir() {
            return;
        }
        let server = server();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut o = options("fixed");
        o.batch = 2;
        o.shared_memory = true;
        let mut regions = Regions::default();
        let setup = rt.block_on(prepare(&server.url, Protocol::Http, &o, &mut regions));
        // One region for the output, one for the input.
        let names = regions.names.clone();
        let files = region_files("");
        regions.cleanup(&server.url, Protocol::Http, &ConnectOptions::default());
        let setup = setup.unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(setup.requests.len(), 1);
        assert!(setup.sequences.is_none());
        let pid = std::process::id();
        assert_eq!(
            names,
            [
                format!("trtis_perf_{pid}_out0"),
                format!("trtis_perf_{pid}_in0_0")
            ]
        );
        assert!(names.iter().all(|n| files.contains(n)), "{files:?}");
        assert!(region_files("_out0").is_empty() && region_files("_in0_0").is_empty());

        // A sequence model gets sequences (its probe is a sequence of one).
        let mut regions = Regions::default();
        let setup = rt
            .block_on(prepare(
                &server.url,
                Protocol::Http,
                &options("seq"),
                &mut regions,
            ))
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(regions.names.is_empty());
        let s = setup.sequences.expect("sequences for a sequence model");
        assert_eq!(s.next_id(), 2, "the probe used id 1");

        // Errors keep their kind: a model the server does not have, a
        // server that is not there.
        let mut regions = Regions::default();
        match rt.block_on(prepare(
            &server.url,
            Protocol::Http,
            &options("none"),
            &mut regions,
        )) {
            Err(SetupError::Server(e)) => assert!(!e.is_transport(), "{e}"),
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("a missing model prepared"),
        }
        match rt.block_on(prepare(
            "127.0.0.1:1",
            Protocol::Http,
            &options("fixed"),
            &mut regions,
        )) {
            Err(SetupError::Server(e)) => assert!(e.is_transport(), "{e}"),
            Err(e) => panic!("{e:?}"),
            Ok(_) => panic!("prepared without a server"),
        }
    }
}
