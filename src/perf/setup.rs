//! What `trtis perf` does before it measures, apart from reading its
//! flags: the sweep [`plan`] from the load flags, the runtime's
//! [`worker_threads`], and [`prepare`]: the model's metadata and config,
//! each request's inputs ([`InputPlan`]: generated, or from an
//! `--input-data` file), system shared memory [`Regions`] for the tensors,
//! the prepared requests, the [`sequences`] of a sequence model, and one
//! probe request, so that a model that cannot serve fails before the
//! measurement starts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::client::inputs::{self, Generate, InputSpec};
use crate::client::{Client, ClientError, Prepared, Protocol, SeqFlags};
use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::ModelConfig;
use crate::core::types::{RequestedOutput, ShmRef, Tensor, TensorMetadata};

use super::driver::Sequences;
use super::load::Plan;

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

/// The load flags as given: perf_client's `-t`, `-d` with `-c`,
/// `--concurrency-range` and `--request-rate-range`.
#[derive(Debug, Clone, Default)]
pub struct LoadFlags<'a> {
    pub concurrency: Option<usize>,
    pub dynamic: bool,
    pub max_concurrency: usize,
    pub concurrency_range: Option<&'a str>,
    pub rate_range: Option<&'a str>,
}

/// `a:b:c` → up to three numbers.
fn range(spec: &str, flag: &str) -> Result<Vec<f64>, String> {
    let parts: Result<Vec<f64>, _> = spec.split(':').map(|p| p.trim().parse::<f64>()).collect();
    match parts {
        Ok(p) if !p.is_empty() && p.len() <= 3 && p.iter().all(|v| *v >= 0.0) => Ok(p),
        _ => Err(format!("{flag} expects start[:end[:step]], got '{spec}'")),
    }
}

/// The loads to sweep: a request-rate range, else a concurrency range,
/// else `-d` (1 up to `-c`, 0: no end), else the one concurrency of `-t`.
pub fn plan(flags: &LoadFlags) -> Result<Plan, String> {
    if let Some(spec) = flags.rate_range {
        let p = range(spec, "--request-rate-range")?;
        let start = p[0];
        if start <= 0.0 {
            return Err("--request-rate-range must start above 0".into());
        }
        let end = p.get(1).copied().unwrap_or(start);
        if end < start {
            return Err(format!(
                "--request-rate-range ends ({end}) below where it starts ({start})"
            ));
        }
        return Ok(Plan::Rate {
            start,
            end,
            step: p.get(2).copied().unwrap_or(1.0),
        });
    }
    if let Some(spec) = flags.concurrency_range {
        let p = range(spec, "--concurrency-range")?;
        let start = (p[0] as usize).max(1);
        let end = p.get(1).map(|&e| e as usize).unwrap_or(start);
        if end != 0 && end < start {
            return Err(format!(
                "--concurrency-range ends ({end}) below where it starts ({start}); 0 means no end"
            ));
        }
        return Ok(Plan::Concurrency {
            start,
            end,
            step: p.get(2).map(|&s| s as usize).unwrap_or(1).max(1),
        });
    }
    if flags.dynamic {
        return Ok(Plan::Concurrency {
            start: 1,
            end: flags.max_concurrency,
            step: 1,
        });
    }
    let n = flags.concurrency.unwrap_or(1).max(1);
    Ok(Plan::Concurrency {
        start: n,
        end: n,
        step: 1,
    })
}

/// The async runtime's worker threads on a machine of `cores`: no more
/// than requests outstanding (idle workers cost CPU in wake-ups; a
/// concurrency-1 run on one thread is the cheapest), at most 4.
pub fn worker_threads(plan: &Plan, cores: usize) -> usize {
    let most = match *plan {
        Plan::Concurrency { start, end, .. } if end != 0 => start.max(end),
        _ => cores,
    };
    most.clamp(1, cores.min(4))
}

/// The sequence flags (perf_analyzer's `--sequence-length`,
/// `--sequence-length-variation`, `--sequence-id-range`,
/// `--num-of-sequences`).
#[derive(Debug, Clone)]
pub struct SequenceOptions {
    pub length: usize,
    pub length_variation: f64,
    pub id_range: Option<String>,
    pub num_of_sequences: usize,
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
}

/// `--sequence-id-range start[:end]` → (start, ids in the range; 0:
/// unbounded). perf_analyzer's default starts at 1.
fn sequence_ids(spec: Option<&str>) -> Result<(u64, u64), String> {
    let Some(spec) = spec else {
        return Ok((1, 0));
    };
    let bad = || format!("--sequence-id-range expects start[:end] with start >= 1, got '{spec}'");
    let mut parts = spec.split(':').map(|p| p.trim().parse::<u64>());
    let start = parts
        .next()
        .and_then(|p| p.ok())
        .filter(|&s| s >= 1)
        .ok_or_else(bad)?;
    let range = match parts.next() {
        None => 0,
        Some(Ok(end)) if end > start => end - start,
        Some(_) => return Err(bad()),
    };
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((start, range))
}

/// The sequences to send to a sequence model (`sequence_batching`); None
/// for other models.
fn sequences(
    config: &ModelConfig,
    options: &SequenceOptions,
) -> Result<Option<Sequences>, SetupError> {
    let Some(SchedulingChoice::SequenceBatching(_)) = &config.scheduling_choice else {
        return Ok(None);
    };
    let (start, range) = sequence_ids(options.id_range.as_deref()).map_err(SetupError::Usage)?;
    Ok(Some(Sequences::new(
        options.length,
        options.length_variation,
        start,
        range,
        options.num_of_sequences,
    )))
}

/// The inputs of each request, checked against the model: one request per
/// `--input-data` entry, or one of generated data.
#[derive(Debug)]
pub(crate) struct InputPlan {
    batching: bool,
    batch: i64,
    shapes: BTreeMap<String, Vec<i64>>,
    generate: Generate,
    entries: Vec<Map<String, Value>>,
}

impl InputPlan {
    /// Reads the shapes and the data file; a batch above 1 for a model
    /// that does not batch is refused.
    pub(crate) fn new(config: &ModelConfig, options: &Options) -> Result<InputPlan, SetupError> {
        let batching = config.max_batch_size > 0;
        if !batching && options.batch > 1 {
            return Err(SetupError::Usage(format!(
                "model '{}' does not batch (max_batch_size 0): -b must be 1",
                options.model
            )));
        }
        let shapes = inputs::parse_shapes(&options.shapes).map_err(SetupError::Usage)?;
        let entries = match &options.input_data {
            Some(path) => inputs::read_input_data(path).map_err(SetupError::Usage)?,
            None => Vec::new(),
        };
        Ok(InputPlan {
            batching,
            batch: options.batch,
            shapes,
            generate: options.generate,
            entries,
        })
    }

    /// How many different requests there are.
    pub(crate) fn requests(&self) -> usize {
        self.entries.len().max(1)
    }

    /// The inputs of request `i` in the model's order (`seed` advances, so
    /// generated data differs between requests).
    pub(crate) fn inputs(
        &self,
        specs: &[TensorMetadata],
        i: usize,
        seed: &mut u64,
    ) -> Result<Vec<Tensor>, SetupError> {
        let how = InputSpec {
            batching: self.batching,
            batch: self.batch,
            shapes: &self.shapes,
            generate: self.generate,
            entry: self.entries.get(i),
        };
        inputs::build(specs, &how, seed).map_err(SetupError::Usage)
    }
}

/// System shared memory regions made for a run: files under `/dev/shm`
/// registered with the server; `cleanup` unregisters and removes them.
#[derive(Debug, Default)]
pub struct Regions {
    names: Vec<String>,
}

impl Regions {
    /// A new region `trtis_perf_<pid>_<label>` holding `data` (or `size`
    /// zero bytes), registered with the server.
    async fn create(
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
    pub fn cleanup(&self, url: &str, protocol: Protocol) {
        if self.names.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(async {
                if let Ok(mut c) = Client::connect(url, protocol).await {
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
    let mut client = Client::connect(url, protocol)
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
    use super::*;
    use crate::core::config::parse_config;
    use crate::core::frontend::http::{router, AppState};
    use crate::core::{Engine, ServerConfig};

    fn config(text: &str) -> ModelConfig {
        parse_config(text.as_bytes()).unwrap().config
    }

    fn options(model: &str) -> Options {
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
        }
    }

    #[test]
    fn plans_from_the_load_flags() {
        let flags = |f: fn(&mut LoadFlags<'static>)| {
            let mut flags = LoadFlags::default();
            f(&mut flags);
            plan(&flags)
        };
        let one = |n| Plan::Concurrency {
            start: n,
            end: n,
            step: 1,
        };
        assert_eq!(flags(|_| {}), Ok(one(1)));
        assert_eq!(flags(|f| f.concurrency = Some(4)), Ok(one(4)));
        assert_eq!(
            flags(|f| {
                f.dynamic = true;
                f.max_concurrency = 3
            }),
            Ok(Plan::Concurrency {
                start: 1,
                end: 3,
                step: 1
            })
        );
        assert_eq!(
            flags(|f| f.concurrency_range = Some("2:10:4")),
            Ok(Plan::Concurrency {
                start: 2,
                end: 10,
                step: 4
            })
        );
        assert_eq!(
            flags(|f| f.concurrency_range = Some("0:0")),
            Ok(Plan::Concurrency {
                start: 1,
                end: 0,
                step: 1
            })
        );
        assert_eq!(
            flags(|f| f.concurrency_range = Some("8:4")),
            Err("--concurrency-range ends (4) below where it starts (8); 0 means no end".into())
        );
        assert_eq!(
            flags(|f| f.concurrency_range = Some("1:2:3:4")),
            Err("--concurrency-range expects start[:end[:step]], got '1:2:3:4'".into())
        );
        // A rate range wins over the concurrency flags.
        assert_eq!(
            flags(|f| {
                f.rate_range = Some("100:300:50");
                f.concurrency = Some(2)
            }),
            Ok(Plan::Rate {
                start: 100.0,
                end: 300.0,
                step: 50.0
            })
        );
        assert_eq!(
            flags(|f| f.rate_range = Some("0")),
            Err("--request-rate-range must start above 0".into())
        );
        assert_eq!(
            flags(|f| f.rate_range = Some("5:2")),
            Err("--request-rate-range ends (2) below where it starts (5)".into())
        );
        assert_eq!(
            flags(|f| f.rate_range = Some("-1")),
            Err("--request-rate-range expects start[:end[:step]], got '-1'".into())
        );
    }

    #[test]
    fn no_more_worker_threads_than_requests_outstanding() {
        assert_eq!(worker_threads(&plan(&LoadFlags::default()).unwrap(), 8), 1);
        let range = |start, end| Plan::Concurrency {
            start,
            end,
            step: 1,
        };
        assert_eq!(worker_threads(&range(1, 3), 8), 3);
        assert_eq!(worker_threads(&range(1, 64), 8), 4);
        assert_eq!(worker_threads(&range(1, 64), 2), 2);
        // Open-ended sweeps and rates: every core, at most 4.
        assert_eq!(worker_threads(&range(1, 0), 2), 2);
        let rate = Plan::Rate {
            start: 10.0,
            end: 10.0,
            step: 1.0,
        };
        assert_eq!(worker_threads(&rate, 16), 4);
    }

    #[test]
    fn sequence_id_ranges() {
        assert_eq!(sequence_ids(None), Ok((1, 0)));
        assert_eq!(sequence_ids(Some("5")), Ok((5, 0)));
        assert_eq!(sequence_ids(Some("5:8")), Ok((5, 3)));
        for bad in ["0", "5:5", "5:2", "x", "1:2:3", ""] {
            assert_eq!(
                sequence_ids(Some(bad)),
                Err(format!(
                    "--sequence-id-range expects start[:end] with start >= 1, got '{bad}'"
                )),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_sequence_models_get_sequences() {
        let plain = config(
            r#"name: "m" max_batch_size: 8
               input [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] } ]
               output [ { name: "B" data_type: TYPE_INT32 dims: [ 1 ] } ]"#,
        );
        let stateful = config(
            r#"name: "s" max_batch_size: 8 sequence_batching { }
               input [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] } ]
               output [ { name: "B" data_type: TYPE_INT32 dims: [ 1 ] } ]"#,
        );
        let mut o = options("s").sequence;
        assert!(sequences(&plain, &o).unwrap().is_none());
        o.id_range = Some("7:9".into());
        let s = sequences(&stateful, &o).unwrap().unwrap();
        assert_eq!((s.length, s.id_start, s.id_range), (5, 7, 2));
        assert_eq!(s.rate_sequences, 2);
        o.id_range = Some("0".into());
        assert!(matches!(
            sequences(&stateful, &o),
            Err(SetupError::Usage(_))
        ));
        // A bad range does not matter to a model without sequences.
        assert!(sequences(&plain, &o).unwrap().is_none());
    }

    #[test]
    fn inputs_come_from_the_data_file_or_are_generated() {
        let batching = config(
            r#"name: "m" max_batch_size: 8
               input [ { name: "A" data_type: TYPE_INT32 dims: [ 2 ] },
                       { name: "V" data_type: TYPE_FP32 dims: [ -1 ] } ]
               output [ { name: "B" data_type: TYPE_INT32 dims: [ 2 ] } ]"#,
        );
        let specs = [
            TensorMetadata {
                name: "A".into(),
                datatype: "INT32".into(),
                shape: vec![-1, 2],
            },
            TensorMetadata {
                name: "V".into(),
                datatype: "FP32".into(),
                shape: vec![-1, -1],
            },
        ];
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.json");
        std::fs::write(
            &file,
            r#"{"data": [{"A": [1, 2]}, {"A": [3, 4], "V": {"content": [0.5], "shape": [1]}}]}"#,
        )
        .unwrap();
        let mut o = options("m");
        o.batch = 2;
        o.shapes = vec!["V:3".into()];
        o.input_data = Some(file);
        let plan = InputPlan::new(&batching, &o).unwrap();
        assert_eq!(plan.requests(), 2);
        let mut seed = 1;
        let first = plan.inputs(&specs, 0, &mut seed).unwrap();
        assert_eq!(first[0].data, [1i32, 2].map(i32::to_le_bytes).concat());
        assert_eq!(first[0].shape, [2, 2]);
        // Generated (zero), in the --shape given, after the batch size.
        assert_eq!(
            (first[1].shape.as_slice(), first[1].data.len()),
            (&[2, 3][..], 24)
        );
        assert!(first[1].data.iter().all(|&b| b == 0));
        let second = plan.inputs(&specs, 1, &mut seed).unwrap();
        assert_eq!(second[1].shape, [2, 1]);
        assert_eq!(second[1].data, 0.5f32.to_le_bytes());

        // Without the data file: one request, and a variable dimension
        // needs --shape.
        let mut o = options("m");
        o.generate = Generate::Random;
        let plan = InputPlan::new(&batching, &o).unwrap();
        assert_eq!(plan.requests(), 1);
        match plan.inputs(&specs, 0, &mut seed) {
            Err(SetupError::Usage(m)) => assert!(m.contains("--shape V:d1,d2"), "{m}"),
            other => panic!("{other:?}"),
        }

        let not_batching = config(
            r#"name: "n" max_batch_size: 0
               input [ { name: "A" data_type: TYPE_INT32 dims: [ 2 ] } ]
               output [ { name: "B" data_type: TYPE_INT32 dims: [ 2 ] } ]"#,
        );
        let mut o = options("n");
        o.batch = 2;
        match InputPlan::new(&not_batching, &o) {
            Err(SetupError::Usage(m)) => assert_eq!(
                m,
                "model 'n' does not batch (max_batch_size 0): -b must be 1"
            ),
            other => panic!("{other:?}"),
        }
        o.batch = 1;
        o.shapes = vec!["A".into()];
        assert!(matches!(
            InputPlan::new(&not_batching, &o),
            Err(SetupError::Usage(m)) if m == "--shape expects NAME:d1,d2, got 'A'"
        ));
    }

    /// Whether any `/dev/shm` file of this process's regions with `label`
    /// in its name is left.
    fn region_files(label: &str) -> Vec<String> {
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
        regions.cleanup(url, Protocol::Http);
        assert!(
            err.starts_with(&format!("registering shared memory region '{name}': ")),
            "{err}"
        );
        assert_eq!(left, [name]);
        assert!(region_files("_refused").is_empty());
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
        let app = router(AppState {
            engine,
            max_input_size: 1 << 20,
        });
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
        regions.cleanup(&server.url, Protocol::Http);
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
