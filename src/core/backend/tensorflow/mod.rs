//! The TensorFlow backend (`backend: "tensorflow"`; platforms
//! `tensorflow_graphdef`, a frozen `model.graphdef`, and
//! `tensorflow_savedmodel`, a `model.savedmodel/` directory), through the
//! TensorFlow C API of the `tensorflow-cpu` wheel's library (`capi`),
//! loaded when the first TensorFlow model loads.
//!
//! As Triton's TensorFlow backend: a GraphDef's inputs are its Placeholder
//! nodes and its outputs any other node, named as the config names them
//! (`name` or `name:0`); a SavedModel's inputs and outputs are the keys of
//! its signature (`serving_default`, or `TF_SIGNATURE_DEF`), each fed or
//! fetched through the tensor the signature maps it to, and the config is
//! checked against the signature (names, count, datatypes, shapes) with
//! Triton's messages. Batches arrive concatenated on the first dimension
//! (the schedulers form them); BYTES travel as `TF_TString`s. The
//! signature is also read without TensorFlow, from `saved_model.pb`
//! (`model_io`), for auto-complete and for `validate-config`.

pub mod capi;
mod proto;
pub mod settings;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use prost::Message;

use self::capi::{dt, Output, Session, TfTensor};
use self::proto::{MetaGraphDef, SignatureDef};
use self::settings::TfSettings;
use super::LoadContext;
use crate::core::config::autocomplete::ModelTensor;
use crate::core::config::pb::model_config::SchedulingChoice;
use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::{element_count, DataType, Tensor};

pub const SAVEDMODEL: &str = "tensorflow_savedmodel";
pub const GRAPHDEF: &str = "tensorflow_graphdef";

/// The TensorFlow type of ours (Triton's TensorFlow backend has no BF16).
pub fn tf_type(d: DataType) -> Option<i32> {
    Some(match d {
        DataType::Bool => dt::BOOL,
        DataType::Uint8 => dt::UINT8,
        DataType::Uint16 => dt::UINT16,
        DataType::Uint32 => dt::UINT32,
        DataType::Uint64 => dt::UINT64,
        DataType::Int8 => dt::INT8,
        DataType::Int16 => dt::INT16,
        DataType::Int32 => dt::INT32,
        DataType::Int64 => dt::INT64,
        DataType::Fp16 => dt::HALF,
        DataType::Fp32 => dt::FLOAT,
        DataType::Fp64 => dt::DOUBLE,
        DataType::Bytes => dt::STRING,
        DataType::Bf16 => return None,
    })
}

/// Ours of a TensorFlow type (its `_REF` variants too).
pub fn data_type_of(tf: i32) -> Option<DataType> {
    let tf = if tf > 100 { tf - 100 } else { tf };
    DataType::ALL.into_iter().find(|d| tf_type(*d) == Some(tf))
}

/// TensorFlow's name of a type, for messages (`DT_FLOAT`).
fn tf_type_name(tf: i32) -> String {
    match data_type_of(tf) {
        Some(DataType::Fp32) => "DT_FLOAT".into(),
        Some(DataType::Fp64) => "DT_DOUBLE".into(),
        Some(DataType::Fp16) => "DT_HALF".into(),
        Some(DataType::Bytes) => "DT_STRING".into(),
        Some(d) => format!("DT_{}", d.name()),
        None if tf == dt::BFLOAT16 => "DT_BFLOAT16".into(),
        None => format!("DT_{tf}"),
    }
}

/// The config's name of a type (`TYPE_BYTES` for strings, as Triton
/// prints them here).
fn config_type_name(d: DataType) -> String {
    match d {
        DataType::Bytes => "TYPE_BYTES".into(),
        d => format!("TYPE_{}", d.name()),
    }
}

/// The model file the config names, by platform.
pub fn model_file(config: &ModelConfig) -> Result<&str> {
    if !config.default_model_filename.is_empty() {
        return Ok(&config.default_model_filename);
    }
    match config.platform.as_str() {
        SAVEDMODEL => Ok("model.savedmodel"),
        GRAPHDEF => Ok("model.graphdef"),
        p => Err(Error::invalid_arg(format!(
            "platform {p} not supported for TensorFlow model '{}'",
            config.name
        ))),
    }
}

/// A tensor a signature declares.
struct SigTensor {
    key: String,
    dtype: i32,
    shape: Option<Vec<i64>>,
}

fn sig_tensors(map: &std::collections::BTreeMap<String, proto::TensorInfo>) -> Vec<SigTensor> {
    map.iter()
        .map(|(k, info)| SigTensor {
            key: k.clone(),
            dtype: info.dtype,
            shape: info.shape(),
        })
        .collect()
}

/// Reads a SavedModel's signature from its `saved_model.pb`, without
/// TensorFlow: (inputs, outputs) with shapes including any batch dimension.
pub fn model_io(dir: &Path, config: &ModelConfig) -> Result<(Vec<ModelTensor>, Vec<ModelTensor>)> {
    let settings = TfSettings::from_config(config)?;
    let model = &config.name;
    let fail = |why: String| {
        Error::invalid_arg(format!(
            "unable to auto-complete model configuration for '{model}', failed to load model: {why}"
        ))
    };
    let pb = std::fs::read(dir.join("saved_model.pb"))
        .map_err(|e| fail(format!("{}: {e}", dir.join("saved_model.pb").display())))?;
    let saved = proto::SavedModel::decode(pb.as_slice())
        .map_err(|e| fail(format!("saved_model.pb does not parse: {e}")))?;
    let sig = served_signature(&saved, &settings, model).map_err(fail)?;
    let tensors = |map| -> Vec<ModelTensor> {
        sig_tensors(map)
            .into_iter()
            .map(|t| ModelTensor {
                name: t.key,
                datatype: data_type_of(t.dtype),
                shape: t.shape.unwrap_or_default(),
            })
            .collect()
    };
    Ok((tensors(&sig.inputs), tensors(&sig.outputs)))
}

/// The signature a SavedModel serves: its MetaGraph of the settings' tag,
/// the signature they name (or the default one).
fn served_signature<'a>(
    saved: &'a proto::SavedModel,
    settings: &TfSettings,
    model: &str,
) -> std::result::Result<&'a SignatureDef, String> {
    let meta = proto::meta_graph(saved, settings.tag(), model)?;
    proto::pick_signature(meta, settings.signature.as_deref(), model).map(|(_, sig)| sig)
}

/// The refusal of a tensor whose datatype in the model (`has`, a
/// TensorFlow type) is not the config's.
fn datatype_mismatch(
    model: &str,
    what: &str,
    name: &str,
    data_type: i32,
    has: i32,
) -> Option<String> {
    let want = DataType::from_config(data_type)?;
    (data_type_of(has) != Some(want)).then(|| {
        let provides = data_type_of(has)
            .map(config_type_name)
            .unwrap_or_else(|| tf_type_name(has));
        format!(
            "unable to load model '{model}', configuration expects datatype {} for {what} '{name}', model provides {provides}",
            config_type_name(want)
        )
    })
}

/// The names of every tensor the config feeds the model: its inputs, the
/// sequence batcher's control inputs and implicit state inputs, and the
/// batch inputs.
fn fed_names(config: &ModelConfig) -> Vec<String> {
    let mut names: Vec<String> = config.input.iter().map(|i| i.name.clone()).collect();
    if let Some(SchedulingChoice::SequenceBatching(s)) = &config.scheduling_choice {
        names.extend(s.control_input.iter().map(|c| c.name.clone()));
        names.extend(s.state.iter().map(|st| st.input_name.clone()));
    }
    names.extend(
        config
            .batch_input
            .iter()
            .flat_map(|b| b.target_name.iter().cloned()),
    );
    names
}

/// The names of every tensor the server fetches: the outputs, and the
/// sequence batcher's implicit state outputs.
fn fetched_names(config: &ModelConfig) -> Vec<String> {
    let mut names: Vec<String> = config.output.iter().map(|o| o.name.clone()).collect();
    if let Some(SchedulingChoice::SequenceBatching(s)) = &config.scheduling_choice {
        names.extend(s.state.iter().map(|st| st.output_name.clone()));
    }
    names
}

/// The config's shape of a tensor (its reshape's, if any), with the batch
/// dimension when the model batches.
fn config_shape(config: &ModelConfig, dims: &[i64], reshape: Option<&[i64]>) -> Vec<i64> {
    let dims = reshape.unwrap_or(dims);
    if config.max_batch_size > 0 {
        std::iter::once(-1).chain(dims.iter().copied()).collect()
    } else {
        dims.to_vec()
    }
}

fn shape_text(s: &[i64]) -> String {
    format!(
        "[{}]",
        s.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// Triton's checks of a config against a SavedModel signature (names,
/// count, datatypes, shapes).
fn check_signature(config: &ModelConfig, sig: &SignatureDef) -> std::result::Result<(), String> {
    let model = &config.name;
    let inputs = sig_tensors(&sig.inputs);
    let outputs = sig_tensors(&sig.outputs);
    let fed = fed_names(config);
    if fed.len() != inputs.len() {
        return Err(format!(
            "unable to load model '{model}', configuration expects {} inputs, model provides {}",
            fed.len(),
            inputs.len()
        ));
    }
    let allowed = |ts: &[SigTensor]| {
        ts.iter()
            .map(|t| t.key.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let find =
        |ts: &'_ [SigTensor], name: &str, what: &str| -> std::result::Result<usize, String> {
            ts.iter().position(|t| t.key == name).ok_or_else(|| {
                format!(
                    "unexpected inference {what} '{name}', allowed {what}s are: {}",
                    allowed(ts)
                )
            })
        };
    for name in &fed {
        find(&inputs, name, "input")?;
    }
    for name in &fetched_names(config) {
        find(&outputs, name, "output")?;
    }
    let batching = config.max_batch_size > 0;
    let compare = |what: &str,
                   name: &str,
                   t: &SigTensor,
                   data_type: i32,
                   dims: &[i64],
                   reshape: Option<&[i64]>,
                   exact: bool|
     -> std::result::Result<(), String> {
        if let Some(refusal) = datatype_mismatch(model, what, name, data_type, t.dtype) {
            return Err(refusal);
        }
        let Some(model_shape) = &t.shape else {
            return Ok(());
        };
        if batching && model_shape.first() != Some(&-1) {
            return Err(format!(
                "unable to load model '{model}', model {what} '{name}': for the model to support batching the shape should have at least 1 dimension and the first dimension must be -1; but shape expected by the model is {}",
                shape_text(model_shape)
            ));
        }
        let want = config_shape(config, dims, reshape);
        let fits = model_shape.len() == want.len()
            && model_shape
                .iter()
                .zip(&want)
                .all(|(m, c)| m == c || (!exact && *m == -1));
        if !fits {
            return Err(format!(
                "unable to load model '{model}', {what} '{name}' dims {} don't match configuration dims {}",
                shape_text(model_shape),
                shape_text(&want)
            ));
        }
        Ok(())
    };
    for i in &config.input {
        let t = &inputs[find(&inputs, &i.name, "input")?];
        let reshape = i.reshape.as_ref().map(|r| r.shape.as_slice());
        if i.allow_ragged_batch {
            continue;
        }
        compare("input", &i.name, t, i.data_type, &i.dims, reshape, false)?;
    }
    for o in &config.output {
        let t = &outputs[find(&outputs, &o.name, "output")?];
        let reshape = o.reshape.as_ref().map(|r| r.shape.as_slice());
        compare("output", &o.name, t, o.data_type, &o.dims, reshape, true)?;
    }
    Ok(())
}

/// What `validate-config` and `serve` find of a TensorFlow config without
/// TensorFlow: the parameters, the model file, and for a SavedModel the
/// config against its signature.
pub fn check(
    config: &ModelConfig,
    version_dirs: &[std::path::PathBuf],
) -> Vec<crate::core::config::Issue> {
    use crate::core::config::Issue;
    let model = &config.name;
    let settings = match TfSettings::from_config(config) {
        Ok(s) => s,
        Err(e) => return vec![Issue::error("parameters", e.message)],
    };
    let file = match model_file(config) {
        Ok(f) => f,
        Err(e) => return vec![Issue::error("platform", e.message)],
    };
    let savedmodel = config.platform == SAVEDMODEL;
    if savedmodel && (config.input.is_empty() || config.output.is_empty()) {
        // Auto-complete fills them from the signature; the load compares
        // the completed config with it.
        return Vec::new();
    }
    let (what, read): (&str, fn(&Path) -> std::path::PathBuf) = if savedmodel {
        ("saved_model.pb", |p| p.join("saved_model.pb"))
    } else {
        ("the GraphDef", Path::to_path_buf)
    };
    let mut out = Vec::new();
    for dir in version_dirs {
        let path = read(&dir.join(file));
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let unparsed = |e: prost::DecodeError| {
            Issue::error(
                "default_model_filename",
                format!(
                    "unable to load model '{model}', {}: {what} does not parse: {e}",
                    path.display()
                ),
            )
        };
        let checked = if savedmodel {
            proto::SavedModel::decode(bytes.as_slice())
                .map_err(unparsed)
                .and_then(|saved| {
                    served_signature(&saved, &settings, model)
                        .and_then(|sig| check_signature(config, sig))
                        .map_err(|e| Issue::error("input", e))
                })
        } else {
            proto::GraphDef::decode(bytes.as_slice())
                .map_err(unparsed)
                .and_then(|graph| {
                    check_graph_names(config, &graph).map_err(|e| Issue::error("input", e))
                })
        };
        if let Err(issue) = checked {
            if !out.contains(&issue) {
                out.push(issue);
            }
        }
    }
    out
}

/// A GraphDef's names against the config: each input a Placeholder node,
/// each output another node, no more inputs than Placeholders.
fn check_graph_names(
    config: &ModelConfig,
    graph: &proto::GraphDef,
) -> std::result::Result<(), String> {
    let model = &config.name;
    if graph.node.is_empty() {
        return Err(format!("model {model} has an empty network"));
    }
    let op_of = |name: &str| {
        let node = name.split(':').next().unwrap_or(name);
        graph
            .node
            .iter()
            .find(|n| n.name == node)
            .map(|n| n.op.as_str())
    };
    let placeholders: Vec<&str> = graph
        .node
        .iter()
        .filter(|n| n.op == "Placeholder")
        .map(|n| n.name.as_str())
        .collect();
    let fed = fed_names(config);
    if fed.len() > placeholders.len() {
        return Err(format!(
            "unable to load model '{model}', configuration expects {} inputs, model provides at most {}",
            fed.len(),
            placeholders.len()
        ));
    }
    for name in &fed {
        if op_of(name) != Some("Placeholder") {
            return Err(format!(
                "unexpected inference input '{name}', allowed inputs are: {}",
                placeholders.join(", ")
            ));
        }
    }
    for name in fetched_names(config) {
        if !matches!(op_of(&name), Some(op) if op != "Placeholder") {
            return Err(unknown_output(&name));
        }
    }
    Ok(())
}

fn unknown_output(name: &str) -> String {
    format!(
        "unexpected inference output '{name}', the model has no node of that name (an output is any node that is not a Placeholder)"
    )
}

/// One instance: a session of its own and where each tensor the config
/// names is fed or fetched.
pub struct TfInstance {
    session: Session,
    api: &'static capi::Api,
    inputs: HashMap<String, Output>,
    outputs: HashMap<String, Output>,
    /// The last run's non-string input tensors, written again by the next
    /// request of the same shape while TensorFlow holds no reference to
    /// them: a 600 KB image batch is then copied into warm memory instead
    /// of a fresh allocation each time.
    spare: HashMap<String, TfTensor>,
    timing: (Duration, Duration),
}

// SAFETY: the operations `Output`s point to belong to the session's graph,
// which lives as long as the instance; TensorFlow allows a session and its
// graph to be used from any thread.
unsafe impl Send for TfInstance {}

fn tf_error(model: &str) -> impl Fn((i32, String)) -> Error + '_ {
    move |(_, message)| Error::internal(format!("unable to load model '{model}': {message}"))
}

/// `op` or `op:N` → the graph's output.
fn graph_output(graph: &capi::Graph, name: &str) -> Option<Output> {
    match name.rsplit_once(':') {
        Some((op, idx)) if idx.chars().all(|c| c.is_ascii_digit()) && !idx.is_empty() => {
            graph.output(op, idx.parse().ok()?)
        }
        _ => graph.output(name, 0),
    }
}

/// Where each of `names` is in the graph (`tensor` gives its `op[:N]`).
fn bind(
    graph: &capi::Graph,
    model: &str,
    names: Vec<String>,
    tensor: impl Fn(&str) -> String,
) -> Result<HashMap<String, Output>> {
    names
        .into_iter()
        .map(|n| {
            let t = tensor(&n);
            let out = graph_output(graph, &t).ok_or_else(|| {
                Error::invalid_arg(format!(
                    "unable to load model '{model}', tensor '{t}' of '{n}' is not in the graph"
                ))
            })?;
            Ok((n, out))
        })
        .collect()
}

impl TfInstance {
    pub fn load(ctx: &LoadContext) -> Result<Self> {
        let config = ctx.config;
        let model = config.name.as_str();
        let settings = TfSettings::from_config(config)?;
        let path = ctx.version_dir.join(model_file(config)?);
        if !path.exists() {
            return Err(Error::unavailable(format!(
                "unable to find '{}' for model instance '{}'",
                path.display(),
                ctx.instance_name
            )));
        }
        let api = capi::api()?;
        let proto = settings.config_proto();
        let (session, inputs, outputs) = if config.platform == SAVEDMODEL {
            let (session, meta) = Session::load_saved_model(api, &path, &[settings.tag()], &proto)
                .map_err(|(_, m)| {
                    if m.contains("Could not find meta graph def matching supplied tags") {
                        Error::invalid_arg(format!(
                            "unable to load model '{model}', expected '{}' tag",
                            settings.tag()
                        ))
                    } else {
                        Error::internal(format!("unable to load model '{model}': {m}"))
                    }
                })?;
            let meta = MetaGraphDef::decode(meta.as_slice()).map_err(|e| {
                Error::internal(format!(
                    "unable to load model '{model}': its MetaGraphDef does not parse: {e}"
                ))
            })?;
            let (_, sig) = proto::pick_signature(&meta, settings.signature.as_deref(), model)
                .map_err(Error::invalid_arg)?;
            check_signature(config, sig).map_err(Error::invalid_arg)?;
            let inputs = bind(&session.graph, model, fed_names(config), |n| {
                sig.inputs[n].name.clone()
            })?;
            let outputs = bind(&session.graph, model, fetched_names(config), |n| {
                sig.outputs[n].name.clone()
            })?;
            (session, inputs, outputs)
        } else {
            let bytes = std::fs::read(&path).map_err(|e| {
                Error::unavailable(format!("unable to read '{}': {e}", path.display()))
            })?;
            // The names as `validate-config` checks them, then the graph
            // as TensorFlow imports it.
            let graph_def = proto::GraphDef::decode(bytes.as_slice()).map_err(|e| {
                Error::invalid_arg(format!(
                    "unable to load model '{model}', {}: the GraphDef does not parse: {e}",
                    path.display()
                ))
            })?;
            check_graph_names(config, &graph_def).map_err(Error::invalid_arg)?;
            let graph = capi::Graph::new(api);
            graph.import(&bytes).map_err(tf_error(model))?;
            let inputs = bind(&graph, model, fed_names(config), str::to_string)?;
            let outputs = bind(&graph, model, fetched_names(config), str::to_string)?;
            // Triton does not compare a GraphDef's types with the config;
            // a mismatch would be read as the wrong type, so it is refused.
            let types = config
                .input
                .iter()
                .map(|i| ("input", &i.name, i.data_type, &inputs))
                .chain(
                    config
                        .output
                        .iter()
                        .map(|o| ("output", &o.name, o.data_type, &outputs)),
                );
            for (what, name, data_type, map) in types {
                let has = graph.output_type(map[name]);
                if let Some(refusal) = datatype_mismatch(model, what, name, data_type, has) {
                    return Err(Error::invalid_arg(refusal));
                }
            }
            let session = Session::new(graph, &proto).map_err(tf_error(model))?;
            (session, inputs, outputs)
        };
        let instance = TfInstance {
            session,
            api,
            inputs,
            outputs,
            spare: HashMap::new(),
            timing: Default::default(),
        };
        if let Some(file) = settings.init_ops_path(&ctx.version_dir, ctx.model_dir) {
            instance.run_init_ops(model, &file)?;
        }
        Ok(instance)
    }

    /// Runs each op of a `TF_INIT_OPS_FILE` once, as a target.
    fn run_init_ops(&self, model: &str, file: &Path) -> Result<()> {
        let fail = |why: String| {
            Error::invalid_arg(format!(
                "unable to load model '{model}': init ops file {}: {why}",
                file.display()
            ))
        };
        let text = std::fs::read_to_string(file).map_err(|e| fail(e.to_string()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
        let ops = json
            .get("init_ops")
            .and_then(|v| v.as_array())
            .ok_or_else(|| fail("expected {\"init_ops\": [...]}".into()))?;
        let mut targets = Vec::new();
        for op in ops {
            let name = op
                .as_str()
                .ok_or_else(|| fail("init_ops holds a non-string".into()))?;
            let out = self
                .session
                .graph
                .output(name, 0)
                .or_else(|| self.session.graph.output(name, -1))
                .ok_or_else(|| fail(format!("no operation '{name}' in the graph")))?;
            targets.push(out.oper);
        }
        self.session
            .run(&[], &[], &targets)
            .map_err(|(_, m)| fail(m))?;
        Ok(())
    }

    fn tensor_for(&mut self, t: &Tensor) -> Result<TfTensor> {
        let dtype = tf_type(t.datatype).ok_or_else(|| {
            Error::unsupported(format!(
                "input '{}': {} is not supported by the TensorFlow backend",
                t.name,
                t.datatype.name()
            ))
        })?;
        if t.datatype == DataType::Bytes {
            let elements = Tensor::bytes_elements(&t.data)?;
            let want = element_count(&t.shape).unwrap_or(usize::MAX);
            if elements.len() != want {
                return Err(Error::invalid_arg(format!(
                    "unexpected number of string elements {} for inference input '{}', expecting {want}",
                    elements.len(),
                    t.name
                )));
            }
            return Ok(TfTensor::from_strings(self.api, &t.shape, &elements));
        }
        if let Some(mut spare) = self.spare.remove(&t.name) {
            if spare.dtype() == dtype
                && spare.dims() == t.shape
                && spare.bytes().len() == t.data.len()
                && spare.is_sole_owner()
            {
                spare.overwrite(&t.data);
                return Ok(spare);
            }
        }
        Ok(TfTensor::from_bytes(self.api, dtype, &t.shape, &t.data))
    }
}

fn from_tf(name: &str, t: &TfTensor) -> Result<Tensor> {
    let datatype = data_type_of(t.dtype()).ok_or_else(|| {
        Error::unsupported(format!(
            "output '{name}' has type {}, which the TensorFlow backend does not serve",
            tf_type_name(t.dtype())
        ))
    })?;
    let data = if datatype == DataType::Bytes {
        t.serialized_strings()
    } else {
        t.bytes().to_vec()
    };
    Ok(Tensor {
        name: name.to_string(),
        datatype,
        shape: t.dims(),
        data,
    })
}

impl super::BatchExec for TfInstance {
    fn execute(&mut self, inputs: Vec<Tensor>, outputs: &[String]) -> Result<Vec<Tensor>> {
        let start = Instant::now();
        // Each input's name stays beside its feed, to keep the tensor for
        // the next request; the request's bytes are freed as they are fed.
        let mut feeds = Vec::with_capacity(inputs.len());
        for t in inputs {
            let out = *self.inputs.get(&t.name).ok_or_else(|| {
                Error::invalid_arg(format!("unexpected inference input '{}'", t.name))
            })?;
            let tensor = self.tensor_for(&t)?;
            feeds.push((out, tensor, t.name));
        }
        let fetches = outputs
            .iter()
            .map(|n| {
                self.outputs
                    .get(n)
                    .copied()
                    .ok_or_else(|| Error::invalid_arg(format!("unexpected inference output '{n}'")))
            })
            .collect::<Result<Vec<Output>>>()?;
        let converted = start.elapsed();
        let fed: Vec<(Output, &TfTensor)> = feeds.iter().map(|(o, t, _)| (*o, t)).collect();
        let results = self
            .session
            .run(&fed, &fetches, &[])
            .map_err(|(_, m)| Error::internal(m))?;
        let ran = Instant::now();
        let tensors = outputs
            .iter()
            .zip(&results)
            .map(|(n, t)| from_tf(n, t))
            .collect::<Result<Vec<Tensor>>>();
        // The outputs (which may alias an input) are gone before an input
        // is kept for the next request, which checks it is the only owner.
        drop(results);
        for (_, tensor, name) in feeds {
            if tensor.dtype() != dt::STRING {
                self.spare.insert(name, tensor);
            }
        }
        self.timing = (converted, ran.elapsed());
        tensors
    }

    fn timing(&self) -> (Duration, Duration) {
        self.timing
    }
}

/// The TensorFlow backend in the registry.
pub struct TensorFlow;

impl super::Backend for TensorFlow {
    fn name(&self) -> &'static str {
        "tensorflow"
    }

    fn load(&self, ctx: &LoadContext) -> Result<super::Instance> {
        Ok(super::Instance::Batches(Box::new(TfInstance::load(ctx)?)))
    }

    fn check(
        &self,
        config: &ModelConfig,
        version_dirs: &[std::path::PathBuf],
        _: bool,
    ) -> Vec<crate::core::config::Issue> {
        check(config, version_dirs)
    }

    /// A SavedModel completes from its signature, read without TensorFlow
    /// (a GraphDef never completes, as in Triton).
    fn auto_complete(
        &self,
        config: &ModelConfig,
        ctx: &super::CompleteContext,
    ) -> Option<Result<ModelConfig>> {
        let needs = config.input.is_empty() || config.output.is_empty();
        if !needs || config.platform != SAVEDMODEL {
            return None;
        }
        let file = ctx.version_dir.join(&config.default_model_filename);
        Some(super::completed_from(config, model_io(&file, config), ctx))
    }

    /// What auto-complete makes of a SavedModel's serving signature.
    fn gen_config(
        &self,
        file: &Path,
        req: &super::generate::GenRequest,
        config: &mut ModelConfig,
    ) -> std::result::Result<super::generate::Generated, String> {
        let io = model_io(file, config);
        super::generate::from_tensors(file, req, config, io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_but_bf16_maps_both_ways() {
        for d in DataType::ALL {
            match tf_type(d) {
                Some(t) => assert_eq!(data_type_of(t), Some(d)),
                None => assert_eq!(d, DataType::Bf16),
            }
        }
        assert_eq!(data_type_of(dt::FLOAT + 100), Some(DataType::Fp32));
        assert_eq!(tf_type_name(dt::BFLOAT16), "DT_BFLOAT16");
        assert_eq!(tf_type_name(dt::FLOAT), "DT_FLOAT");
    }
}
