//! The backends this server knows, as data: one [`BackendSpec`] per
//! backend, the only place a decision depends on a backend's name outside
//! the backend's own folder. Normalization reads its formats (platforms
//! and default file names), the support table its parameters, request
//! style, GPU capability and what it refuses, validation its platforms;
//! `core::backend` registers one `Backend` (load, checks, auto-complete)
//! per entry this build has. An entry this build lacks says why.
//!
//! Adding a backend: an entry here, a folder under `src/core/backend/`
//! with its `Backend`, one line in `backend::registry`, and its page under
//! docs/backends/.

/// A model format a backend reads: its Triton platform ("" for none) and
/// default model file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    pub platform: &'static str,
    pub file: &'static str,
    /// What such a file is, for help texts ("ONNX models (a .onnx file)").
    pub what: &'static str,
    /// `trtis gen-config` makes a config from such a file.
    pub gen_config: bool,
    /// Why it does not, where there is more to say than what it reads.
    pub no_gen_config: Option<&'static str>,
}

/// How a backend takes a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requests {
    /// Concatenated tensors, one execution of the whole batch.
    Batches,
    /// A list of requests, each with its own tensors and answering on its
    /// own (Triton's Python backend; a custom library's payloads).
    Lists,
    /// Batches, except a ragged batch (an input with `allow_ragged_batch`,
    /// no batch inputs or outputs), which goes as a list (Triton's identity
    /// backend answers each request of a batch on its own).
    ListsWhenRagged,
}

/// The `parameters` a backend reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parameters {
    /// Any (the model reads its config itself).
    Any,
    /// These names, and any name starting with one of `prefixes`.
    Listed {
        names: &'static [&'static str],
        prefixes: &'static [&'static str],
    },
}

/// How many instances a CPU group without a `count` gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuCount {
    One,
    /// Triton's two.
    Two,
    /// Two with `intra_op_thread_count` set or under the sequence batcher,
    /// else one (an ONNX Runtime instance uses every core by default;
    /// docs/performance.md has the measurement).
    TwoWhenThreadsOrSequences,
}

/// One backend: what the rest of the server decides by it.
#[derive(Debug)]
pub struct BackendSpec {
    /// The config's `backend`.
    pub name: &'static str,
    /// Its formats; the first is the default where the file does not say.
    pub formats: &'static [Format],
    /// Only the model file decides the format (TensorFlow: no default).
    pub format_from_file_only: bool,
    /// Triton checks the platform/backend pair of this backend.
    pub pairs_platform: bool,
    pub parameters: Parameters,
    pub requests: Requests,
    /// It can run KIND_GPU instances (where its runtime has the GPU
    /// support: `Backend::gpu_ready` says at run time).
    pub gpu: bool,
    /// It answers a request any number of times
    /// (`model_transaction_policy { decoupled: true }`).
    pub decoupled: bool,
    /// It applies `optimization.graph.level`.
    pub graph_optimization: bool,
    /// CPU execution accelerators it runs (`optimization.execution_accelerators`).
    pub cpu_accelerators: &'static [&'static str],
    /// Why implicit state (`sequence_batching.state`) is refused; None: it
    /// is honoured.
    pub no_implicit_state: Option<&'static str>,
    pub cpu_count: CpuCount,
    /// Whether this build runs it.
    pub availability: Availability,
    /// One line for help texts and docs.
    pub about: &'static str,
}

/// Whether this build has a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Built,
    /// Built with this cargo feature only, which this build lacks.
    NeedsFeature(&'static str),
    /// Not built by this server at all (Triton's own words answer).
    NotBuilt,
}

impl Availability {
    /// What follows "unable to find backend library for backend 'X'" in
    /// the refusal of a model of this backend (Triton's words where this
    /// server has no such backend).
    pub fn refusal(self) -> String {
        match self {
            Availability::NeedsFeature(f) => {
                format!(": this trtis was built without the '{f}' feature")
            }
            _ => ", try specifying runtime on the model configuration.".into(),
        }
    }
}

/// `Built`, or `NeedsFeature(feature)` when `on` is false.
const fn feature(on: bool, feature: &'static str) -> Availability {
    if on {
        Availability::Built
    } else {
        Availability::NeedsFeature(feature)
    }
}

/// Why a backend that takes requests apart (the Python backend) cannot
/// have implicit state: Triton's Python backend cannot either.
pub const LIST_BACKEND_STATE: &str = "implicit state needs a backend that reads and updates it, and the Python backend does not (nor does Triton's); keep a sequence's state in the model, keyed by request.correlation_id()";

/// Why a custom library cannot have implicit state: the C API has no way
/// to hand it the state (TRTIS 0.12 had none).
pub const CUSTOM_BACKEND_STATE: &str = "implicit state needs a backend that reads and updates it, and custom.h has no way to hand a library its state; keep a sequence's state in the library, keyed by the CORRID control input (or per batch slot, the payload's index)";

const BATCH_BACKEND: BackendSpec = BackendSpec {
    name: "",
    formats: &[],
    format_from_file_only: false,
    pairs_platform: false,
    parameters: Parameters::Listed {
        names: &[],
        prefixes: &[],
    },
    requests: Requests::Batches,
    gpu: false,
    decoupled: false,
    graph_optimization: false,
    cpu_accelerators: &[],
    no_implicit_state: None,
    cpu_count: CpuCount::One,
    availability: Availability::Built,
    about: "",
};

/// Every backend this server knows, built or not.
pub static CATALOG: &[BackendSpec] = &[
    BackendSpec {
        name: "identity",
        parameters: Parameters::Listed {
            names: &[
                "execute_delay_ms",
                "instance_wise_delay_multiplier",
                "delay_input",
                "record_inputs",
            ],
            prefixes: &[],
        },
        requests: Requests::ListsWhenRagged,
        about: "Triton's test backend: each output is its input",
        ..BATCH_BACKEND
    },
    BackendSpec {
        name: "tensorrt",
        formats: &[Format {
            platform: "tensorrt_plan",
            file: "model.plan",
            what: "TensorRT plans (a .plan file)",
            gen_config: false,
            no_gen_config: None,
        }],
        pairs_platform: true,
        gpu: true,
        availability: Availability::NotBuilt,
        about: "TensorRT plans (not built)",
        ..BATCH_BACKEND
    },
    BackendSpec {
        name: "onnxruntime",
        formats: &[Format {
            platform: "onnxruntime_onnx",
            file: "model.onnx",
            what: "ONNX models (a .onnx file)",
            gen_config: true,
            no_gen_config: None,
        }],
        pairs_platform: true,
        // What backend::onnx::settings reads (a test there checks), plus
        // any `session.*` key.
        parameters: Parameters::Listed {
            names: &[
                "intra_op_thread_count",
                "inter_op_thread_count",
                "allow_spinning",
                "execution_mode",
                "enable_mem_arena",
                "enable_mem_pattern",
                "memory.enable_memory_arena_shrinkage",
                // The CUDA provider's, for KIND_GPU instances.
                "cudnn_conv_algo_search",
                "gpu_mem_limit",
                "arena_extend_strategy",
                "do_copy_in_default_stream",
            ],
            prefixes: &["session."],
        },
        gpu: true,
        graph_optimization: true,
        // Triton's ONNX Runtime backend offers OpenVINO as a CPU
        // accelerator; the PyPI library has no such provider, so the model
        // runs on trtis's OpenVINO backend instead.
        cpu_accelerators: if cfg!(feature = "openvino") {
            &["openvino"]
        } else {
            &[]
        },
        cpu_count: CpuCount::TwoWhenThreadsOrSequences,
        availability: feature(cfg!(feature = "onnx"), "onnx"),
        about: "ONNX models through ONNX Runtime",
        ..BATCH_BACKEND
    },
    BackendSpec {
        name: "pytorch",
        formats: &[
            Format {
                platform: "pytorch_libtorch",
                file: "model.pt",
                what: "TorchScript modules (a .pt file)",
                gen_config: true,
                no_gen_config: None,
            },
            Format {
                platform: "torch_aoti",
                file: "model.pt2",
                what: "AOTInductor packages (a .pt2 file)",
                gen_config: true,
                no_gen_config: None,
            },
        ],
        pairs_platform: true,
        // What backend::pytorch::settings reads (a test there checks).
        parameters: Parameters::Listed {
            names: &[
                "DISABLE_OPTIMIZED_EXECUTION",
                "INFERENCE_MODE",
                "DISABLE_CUDNN",
                "ENABLE_WEIGHT_SHARING",
                "ENABLE_CACHE_CLEANING",
                "ENABLE_JIT_EXECUTOR",
                "ENABLE_JIT_PROFILING",
                "ENABLE_TENSOR_FUSER",
                "INTRA_OP_THREAD_COUNT",
                "INTER_OP_THREAD_COUNT",
            ],
            prefixes: &[],
        },
        gpu: true,
        about: "TorchScript modules (.pt) and AOTInductor packages (.pt2) through libtorch",
        ..BATCH_BACKEND
    },
    BackendSpec {
        name: "tensorflow",
        formats: &[
            Format {
                platform: "tensorflow_savedmodel",
                file: "model.savedmodel",
                what: "TensorFlow SavedModels (a .savedmodel directory)",
                gen_config: true,
                no_gen_config: None,
            },
            Format {
                platform: "tensorflow_graphdef",
                file: "model.graphdef",
                what: "TensorFlow GraphDefs (a .graphdef file)",
                gen_config: false,
                no_gen_config: None,
            },
        ],
        format_from_file_only: true,
        pairs_platform: true,
        // What backend::tensorflow::settings reads.
        parameters: Parameters::Listed {
            names: &[
                "TF_NUM_INTRA_THREADS",
                "TF_NUM_INTER_THREADS",
                "TF_USE_PER_SESSION_THREADS",
                "TF_DISABLE_THREAD_SPINNING",
                "TF_GRAPH_TAG",
                "TF_SIGNATURE_DEF",
                "TF_INIT_OPS_FILE",
                "MAX_SESSION_SHARE_COUNT",
            ],
            prefixes: &[],
        },
        cpu_count: CpuCount::Two,
        availability: feature(cfg!(feature = "tensorflow"), "tensorflow"),
        about: "TensorFlow SavedModels and GraphDefs through the TensorFlow C API",
        ..BATCH_BACKEND
    },
    BackendSpec {
        name: "python",
        formats: &[Format {
            platform: "",
            file: "model.py",
            what: "Python models (a model.py)",
            gen_config: false,
            no_gen_config: None,
        }],
        parameters: Parameters::Any,
        requests: Requests::Lists,
        gpu: true,
        decoupled: true,
        no_implicit_state: Some(LIST_BACKEND_STATE),
        about: "a model.py with a TritonPythonModel class, in a worker process per instance",
        ..BATCH_BACKEND
    },
    BackendSpec {
        name: "openvino",
        formats: &[Format {
            platform: "",
            file: "model.xml",
            what: "OpenVINO IRs (a .xml file)",
            gen_config: true,
            no_gen_config: None,
        }],
        // What backend::openvino::settings reads (its PARAMETERS; a test
        // there holds the two together).
        parameters: Parameters::Listed {
            names: &[
                "PERFORMANCE_HINT",
                "NUM_STREAMS",
                "INFERENCE_NUM_THREADS",
                "COMPILATION_NUM_THREADS",
                "HINT_BF16",
                "INFERENCE_PRECISION_HINT",
                "RESHAPE_IO_LAYERS",
                "SKIP_OV_DYNAMIC_BATCHSIZE",
                "ENABLE_BATCH_PADDING",
                "TARGET_DEVICE",
                "CPU_EXTENSION_PATH",
            ],
            prefixes: &[],
        },
        availability: feature(cfg!(feature = "openvino"), "openvino"),
        about: "OpenVINO IR models (model.xml + model.bin) through the OpenVINO C API",
        ..BATCH_BACKEND
    },
    BackendSpec {
        name: "fil",
        // No platform and no one file: the `model_type` parameter names
        // the format and its default file (backend::fil::settings).
        // What backend::fil::settings reads (its PARAMETERS; a test there
        // holds the two together).
        parameters: Parameters::Listed {
            names: &[
                "model_type",
                "is_classifier",
                "output_class",
                "threshold",
                "predict_proba",
                "cpu_nthread",
                "use_experimental_optimizations",
                "xgboost_allow_unknown_field",
                "algo",
                "storage_type",
                "blocks_per_sm",
                "threads_per_tree",
                "transfer_threshold",
                "layout",
                "chunk_size",
            ],
            prefixes: &[],
        },
        about: "tree models (XGBoost JSON and UBJSON, LightGBM text, Treelite checkpoints) as Triton's FIL backend serves them",
        ..BATCH_BACKEND
    },
    BackendSpec {
        name: "custom",
        // The legacy TRTIS custom backend API (custom.h).
        formats: &[Format {
            platform: "custom",
            file: "libcustom.so",
            what: "custom backend libraries (a .so file)",
            gen_config: false,
            no_gen_config: Some(
                "gen-config does not apply to custom backend libraries: custom.h gives a library no way \
                 to declare its inputs and outputs, so write its config.pbtxt by hand (platform: \"custom\"; \
                 examples/custom_backends/models has some)",
            ),
        }],
        parameters: Parameters::Any,
        requests: Requests::Lists,
        no_implicit_state: Some(CUSTOM_BACKEND_STATE),
        about: "a shared library implementing TRTIS's custom.h C API",
        ..BATCH_BACKEND
    },
];

/// The entry of backend `name`.
pub fn spec(name: &str) -> Option<&'static BackendSpec> {
    CATALOG.iter().find(|s| s.name == name)
}

/// The backends built into this executable.
pub fn built() -> impl Iterator<Item = &'static BackendSpec> {
    CATALOG
        .iter()
        .filter(|s| s.availability == Availability::Built)
}

/// Whether backend `name` is built into this executable.
pub fn is_built(name: &str) -> bool {
    spec(name).is_some_and(|s| s.availability == Availability::Built)
}

/// The parameter names backend `name` reads (none listed for one that
/// reads any, or that the catalog lacks).
pub fn parameter_names(name: &str) -> &'static [&'static str] {
    match spec(name).map(|s| s.parameters) {
        Some(Parameters::Listed { names, .. }) => names,
        _ => &[],
    }
}

/// A backend of this build that runs on the CPU only (the backends it does
/// not have, TensorRT say, run on GPUs in Triton).
pub fn cpu_only(name: &str) -> bool {
    spec(name).is_some_and(|s| !s.gpu && s.availability == Availability::Built)
}

/// Every (platform, backend, default file) the catalog knows, in catalog
/// order (what normalization recognises a model by).
pub fn formats() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> + Clone {
    CATALOG
        .iter()
        .flat_map(|s| s.formats.iter().map(move |f| (f.platform, s.name, f.file)))
}

/// Whether the config's backend takes a batch's requests apart rather than
/// concatenated (Triton's Python backend hands `execute` a list of
/// requests; a custom library gets one `CustomPayload` per request); the
/// schedulers then hand it `BackendRequest`s.
pub fn takes_request_lists(config: &super::ModelConfig) -> bool {
    match spec(&config.backend).map(|s| s.requests) {
        Some(Requests::Lists) => true,
        // Triton's identity backend answers each request of a batch on its
        // own, so a ragged batch (requests of different shapes) answers
        // each with its own tensors; with batch inputs or scattered outputs
        // it sees the batch whole, as the other backends do.
        Some(Requests::ListsWhenRagged) => {
            config.input.iter().any(|i| i.allow_ragged_batch)
                && config.batch_input.is_empty()
                && config.batch_output.is_empty()
        }
        _ => false,
    }
}

/// The formats `trtis gen-config` reads, in words ("ONNX models (a .onnx
/// file), ... and ..."), of the backends this build has.
pub fn gen_config_formats() -> String {
    let what: Vec<&str> = built()
        .flat_map(|s| s.formats.iter())
        .filter(|f| f.gen_config)
        .map(|f| f.what)
        .collect();
    match what.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "nothing (this build has no backend that reads a model file)".into(),
    }
}

/// The backend and format of a model file, by its extension (a
/// `.savedmodel` directory included), among every backend known.
pub fn format_of_file(path: &std::path::Path) -> Option<(&'static BackendSpec, &'static Format)> {
    let ext = path.extension()?.to_str()?;
    CATALOG.iter().find_map(|s| {
        s.formats
            .iter()
            .find(|f| f.file.rsplit_once('.').is_some_and(|(_, e)| e == ext))
            .map(|f| (s, f))
    })
}

/// The backend a platform implies (the platforms Triton pairs with a
/// backend).
pub fn backend_of_platform(platform: &str) -> Option<&'static BackendSpec> {
    CATALOG
        .iter()
        .find(|s| s.pairs_platform && s.formats.iter().any(|f| f.platform == platform))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_platforms_are_unique() {
        let mut names: Vec<&str> = CATALOG.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CATALOG.len());
        let mut platforms: Vec<&str> = formats()
            .map(|(p, _, _)| p)
            .filter(|p| !p.is_empty())
            .collect();
        let n = platforms.len();
        platforms.sort();
        platforms.dedup();
        assert_eq!(platforms.len(), n);
    }

    #[test]
    fn a_backend_that_takes_lists_refuses_implicit_state_with_a_reason() {
        for s in CATALOG.iter().filter(|s| s.requests == Requests::Lists) {
            assert!(s.no_implicit_state.is_some(), "{}", s.name);
        }
    }
}
