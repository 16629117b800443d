//! `trtis gen-config MODEL_FILE`: prints a `config.pbtxt` for a model file,
//! ready to save and edit.
//!
//! - An ONNX model (`.onnx`): what auto-complete would make, every tensor's
//!   name, data type and dims read from the model.
//! - A TorchScript module (`.pt`): the `pytorch_libtorch` platform, inputs
//!   named after forward()'s arguments (Triton's PyTorch backend binds
//!   inputs to arguments by name when every name matches) and outputs
//!   `OUTPUT__0`.. by position (`backend::pytorch::torchscript` reads the signature
//!   without libtorch). TorchScript records neither data types nor shapes,
//!   so those are placeholders (`TYPE_FP32`, `dims: [-1]`; `TYPE_STRING` for
//!   a `List[str]`), and comment lines at the top of the output say what to
//!   edit.
//! - A PyTorch 2 AOTInductor package (`.pt2`): the `torch_aoti` platform,
//!   inputs `INPUT__0`.. with the data types and dims the compiled code
//!   checks (`backend::pytorch::pt2` reads them from the package's wrapper
//!   source), batching when every input's dimension 0 is dynamic (up to 4,
//!   as auto-complete's default, or the package's bound if lower);
//!   outputs `OUTPUT__0`.. from the call spec, with placeholder types and
//!   dims (a package does not record them), said in the comment lines.
//! - An OpenVINO IR (`model.xml`): what auto-complete would make of the
//!   inputs and outputs its XML declares (`backend::openvino::ir`).
//! - A TensorFlow SavedModel (a `model.savedmodel` directory): what
//!   auto-complete would make from its `serving_default` signature (read
//!   without TensorFlow).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use prost::Message;
use prost_reflect::text_format::FormatOptions;
use prost_reflect::DynamicMessage;
use trtis::core::backend::onnx;
use trtis::core::backend::pytorch::torchscript;
use trtis::core::config::autocomplete;
use trtis::core::config::pb::{
    model_config::SchedulingChoice, model_instance_group::Kind, DataType, ModelDynamicBatching,
    ModelInput, ModelInstanceGroup, ModelOutput, ModelTensorReshape,
};
use trtis::core::config::pbtxt::model_config_descriptor;
use trtis::core::config::ModelConfig;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model file: an ONNX model (`model.onnx`), a TorchScript module
    /// (`model.pt`), an AOTInductor package (`model.pt2`) or a TensorFlow
    /// SavedModel (`model.savedmodel`).
    model: PathBuf,

    /// The model name (default: the model directory's name when the file is
    /// at `<model>/<version>/model.onnx` (or `model.pt`), else the file's
    /// stem).
    #[arg(long)]
    name: Option<String>,

    /// Maximum batch size (default for ONNX: 4 when every tensor's first
    /// dimension is dynamic, else 0; for TorchScript: 0, as a module does
    /// not say whether it batches).
    #[arg(long)]
    max_batch_size: Option<i32>,

    /// Turn dynamic batching on (on by default when the model batches; a
    /// TorchScript model batches only with --max-batch-size above 0).
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    dynamic_batching: Option<bool>,

    /// Instances (CPU) to run.
    #[arg(long)]
    instance_count: Option<i32>,
}

fn default_name(model: &Path) -> String {
    let version_dir = model.parent();
    let is_version = version_dir
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.parse::<u64>().is_ok());
    let model_dir = version_dir
        .and_then(Path::parent)
        .and_then(|d| d.file_name());
    match (is_version, model_dir) {
        (true, Some(dir)) => dir.to_string_lossy().into_owned(),
        _ => model
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".to_string()),
    }
}

pub fn run(args: Args) -> ExitCode {
    let mut config = ModelConfig {
        name: args
            .name
            .clone()
            .unwrap_or_else(|| default_name(&args.model)),
        ..Default::default()
    };
    if let Err(message) = refuse_special_file(&args.model) {
        eprintln!("error: {message}");
        return ExitCode::from(1);
    }
    let made = match args.model.extension().and_then(|e| e.to_str()) {
        Some("onnx") => onnx_config(&args, &mut config).map(|()| Vec::new()),
        Some("pt") => torchscript_config(&args, &mut config),
        Some("pt2") => pt2_config(&args, &mut config),
        Some("xml") => openvino_config(&args, &mut config),
        Some("savedmodel") => savedmodel_config(&args, &mut config).map(|()| Vec::new()),
        Some("so") => {
            // A custom backend library (custom.h) declares no inputs or
            // outputs: there is nothing to generate a config from.
            eprintln!(
                "error: {}: gen-config does not apply to custom backend libraries: \
                 custom.h gives a library no way to declare its inputs and outputs, so \
                 write its config.pbtxt by hand (platform: \"custom\"; \
                 examples/custom_backends/models has some)",
                args.model.display()
            );
            return ExitCode::from(2);
        }
        _ => {
            eprintln!(
                "error: {}: gen-config reads ONNX models (a .onnx file), \
                 TorchScript modules (a .pt file), AOTInductor packages (a .pt2 file), OpenVINO IRs \
                 (a .xml file) and TensorFlow SavedModels (a .savedmodel directory)",
                args.model.display()
            );
            return ExitCode::from(2);
        }
    };
    let header = match made {
        Ok(header) => header,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(count) = args.instance_count {
        config.instance_group.push(ModelInstanceGroup {
            count,
            kind: Kind::Cpu as i32,
            ..Default::default()
        });
    }
    let message =
        DynamicMessage::decode(model_config_descriptor(), config.encode_to_vec().as_slice())
            .expect("a ModelConfig re-decodes");
    let text = message.to_text_format_with_options(&FormatOptions::new().pretty(true));
    for line in header {
        println!("# {line}");
    }
    println!("{text}");
    ExitCode::SUCCESS
}

/// Refuses a model path that is there but is no regular file (a FIFO
/// would block the reader until a writer came; a device is no model); for a
/// SavedModel directory, the same of its `saved_model.pb`. A path that is
/// not there, or a directory where a file is expected, is left to the
/// reader's own error.
fn refuse_special_file(model: &Path) -> Result<(), String> {
    let is_dir = std::fs::metadata(model).is_ok_and(|m| m.is_dir());
    let file = if is_dir {
        model.join("saved_model.pb")
    } else {
        model.to_path_buf()
    };
    match trtis::core::fsutil::check_regular(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(e.to_string()),
        _ => Ok(()),
    }
}

fn dynamic_batching() -> Option<SchedulingChoice> {
    Some(SchedulingChoice::DynamicBatching(
        ModelDynamicBatching::default(),
    ))
}

/// What auto-complete makes of the ONNX model's inputs and outputs.
fn onnx_config(args: &Args, config: &mut ModelConfig) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", args.model.display());
    let (inputs, outputs) = onnx::model_io(&args.model).map_err(|e| fail(&e))?;
    config.platform = "onnxruntime_onnx".into();
    config.backend = "onnxruntime".into();
    complete_from(args, config, &inputs, &outputs)
}

/// What the server's auto-complete makes of an OpenVINO IR (its ports
/// read from its XML, Triton's OpenVINO rules: batching only when every
/// port's layout has a batch dimension); its warnings go above the config.
#[cfg(feature = "openvino")]
fn openvino_config(args: &Args, config: &mut ModelConfig) -> Result<Vec<String>, String> {
    use trtis::core::backend::openvino;
    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", args.model.display());
    let (inputs, outputs) = openvino::model_ports(&args.model).map_err(|e| fail(&e))?;
    config.backend = "openvino".into();
    config.max_batch_size = args.max_batch_size.unwrap_or(0);
    let notes = openvino::complete::complete(config, &inputs, &outputs).map_err(|e| fail(&e))?;
    match args.dynamic_batching {
        Some(true) => config.scheduling_choice = dynamic_batching(),
        Some(false) => config.scheduling_choice = None,
        None => {}
    }
    let mut header: Vec<String> = notes
        .into_iter()
        .filter(|(level, _)| *level == 'W')
        .map(|(_, note)| note)
        .collect();
    if config.max_batch_size == 0 {
        header.push(
            "no batching: not every input and output has a layout with a batch dimension N (Triton's \
             OpenVINO rule); --max-batch-size N makes dimension 0 the batch"
                .into(),
        );
    }
    Ok(header)
}

#[cfg(not(feature = "openvino"))]
fn openvino_config(args: &Args, _: &mut ModelConfig) -> Result<Vec<String>, String> {
    Err(format!(
        "{}: this build has no OpenVINO backend (cargo feature `openvino`)",
        args.model.display()
    ))
}

/// What auto-complete makes of a SavedModel's serving signature.
#[cfg(feature = "tensorflow")]
fn savedmodel_config(args: &Args, config: &mut ModelConfig) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", args.model.display());
    let (inputs, outputs) =
        trtis::core::backend::tensorflow::model_io(&args.model, config).map_err(|e| fail(&e))?;
    config.platform = "tensorflow_savedmodel".into();
    config.backend = "tensorflow".into();
    complete_from(args, config, &inputs, &outputs)
}

#[cfg(not(feature = "tensorflow"))]
fn savedmodel_config(args: &Args, _: &mut ModelConfig) -> Result<(), String> {
    Err(format!(
        "{}: this build has no TensorFlow backend (cargo feature `tensorflow`)",
        args.model.display()
    ))
}

/// Completes the config from the model's tensors, with the command line's
/// batching choices.
fn complete_from(
    args: &Args,
    config: &mut ModelConfig,
    inputs: &[autocomplete::ModelTensor],
    outputs: &[autocomplete::ModelTensor],
) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", args.model.display());
    config.max_batch_size = args.max_batch_size.unwrap_or(0);
    let auto_batch = args.max_batch_size.is_none();
    autocomplete::complete(config, inputs, outputs, auto_batch).map_err(|e| fail(&e))?;
    match args.dynamic_batching {
        Some(true) => config.scheduling_choice = dynamic_batching(),
        Some(false) => config.scheduling_choice = None,
        None if !auto_batch && config.max_batch_size > 0 => {
            config.scheduling_choice = dynamic_batching()
        }
        None => {}
    }
    Ok(())
}

/// The AOTInductor package's config, from its call spec and input checks;
/// returns the comment lines that go above it.
fn pt2_config(args: &Args, config: &mut ModelConfig) -> Result<Vec<String>, String> {
    use trtis::core::backend::pytorch::pt2::{self, Dim};
    let shown = args.model.display();
    let package = pt2::read_package(&args.model, pt2::MODEL_NAME).map_err(|e| e.to_string())?;
    let (in_spec, out_spec) = package.call_spec.clone().ok_or_else(|| {
        format!(
            "{shown}: the package carries no wrapper source, so its inputs cannot be read without loading it: \
             write the config by hand (platform: \"torch_aoti\", inputs INPUT__0.., outputs OUTPUT__0..)"
        )
    })?;
    let leaves = pt2::leaves(&in_spec, &out_spec).map_err(|e| format!("{shown}: {e}"))?;
    let info = package.inputs.clone().unwrap_or_default();
    config.platform = "torch_aoti".into();
    config.backend = "pytorch".into();
    // Batching when every input's dimension 0 is dynamic.
    let bound = |i: &pt2::LeafInput| match i.dims.first() {
        Some(Dim::Range(_, hi)) => Some(*hi),
        _ => None,
    };
    let batch_bound = if !info.is_empty() && info.len() == leaves.inputs.len() {
        info.iter()
            .map(bound)
            .collect::<Option<Vec<i64>>>()
            .and_then(|b| b.into_iter().min())
    } else {
        None
    };
    config.max_batch_size = match (args.max_batch_size, batch_bound) {
        (Some(n), Some(hi)) if i64::from(n) > hi => {
            return Err(format!(
                "{shown}: --max-batch-size {n}, but the package's batch dimension goes up to {hi}"
            ))
        }
        (Some(n), None) if n > 0 => {
            return Err(format!(
                "{shown}: --max-batch-size {n}, but not every input of the package has a dynamic dimension 0"
            ))
        }
        (Some(n), _) => n,
        (None, Some(hi)) => hi.min(4) as i32,
        (None, None) => 0,
    };
    let batching = config.max_batch_size > 0;
    if batching && args.dynamic_batching != Some(false) {
        config.scheduling_choice = dynamic_batching();
    }
    let mut header = vec![
        format!("Made by `trtis gen-config` from the AOTInductor package {shown}."),
        format!("Its inputs: {}.", leaves.inputs.join(", ")),
        format!("Its outputs: {}.", leaves.outputs.join(", ")),
        "Inputs and their types and shapes are the package's own; a package does not".into(),
        "record its outputs' types or shapes: each output's data_type and dims below".into(),
        "is a placeholder (TYPE_FP32, dims: [-1]): edit them before serving the model.".into(),
    ];
    for (i, name) in leaves.inputs.iter().enumerate() {
        let leaf = info.get(i);
        let datatype = leaf
            .and_then(|l| l.datatype)
            .map(|t| t.to_config())
            .unwrap_or_else(|| {
                header.push(format!(
                    "INPUT__{i} ({name}): its type is not recorded, TYPE_FP32 is a placeholder."
                ));
                DataType::TypeFp32
            });
        let dims: Vec<i64> = leaf
            .map(|l| {
                l.dims
                    .iter()
                    .skip(usize::from(batching))
                    .map(|d| match d {
                        Dim::Fixed(v) => *v,
                        Dim::Range(..) => -1,
                    })
                    .collect()
            })
            .unwrap_or_else(|| vec![-1]);
        config.input.push(ModelInput {
            name: format!("INPUT__{i}"),
            data_type: datatype as i32,
            dims,
            ..Default::default()
        });
    }
    for i in 0..leaves.outputs.len() {
        config.output.push(ModelOutput {
            name: format!("OUTPUT__{i}"),
            data_type: DataType::TypeFp32 as i32,
            dims: vec![-1],
            ..Default::default()
        });
    }
    Ok(header)
}

/// The TorchScript module's config, from forward()'s signature; returns the
/// comment lines that go above it (what the module did not say).
fn torchscript_config(args: &Args, config: &mut ModelConfig) -> Result<Vec<String>, String> {
    let sig = torchscript::forward_signature(&args.model).map_err(|e| e.to_string())?;
    eprintln!(
        "warning: {}: TorchScript records no data types or shapes: edit the \
         placeholders (see the comments at the top)",
        args.model.display()
    );
    config.platform = "pytorch_libtorch".into();
    config.backend = "pytorch".into();
    config.max_batch_size = args.max_batch_size.unwrap_or(0);
    if config.max_batch_size > 0 {
        if args.dynamic_batching != Some(false) {
            config.scheduling_choice = dynamic_batching();
        }
    } else if args.dynamic_batching == Some(true) {
        eprintln!("note: --dynamic-batching ignored: it needs --max-batch-size above 0");
    }
    let string_or_fp32 = |ty: &str| {
        if ty == "List[str]" {
            DataType::TypeString
        } else {
            DataType::TypeFp32
        }
    };
    // A List[str] is one-dimensional counting the batch (Triton's rule): a
    // batching model declares [1], reshaped to [] for the model.
    let batching = config.max_batch_size > 0;
    let string_shape = |ty: &str| -> (Vec<i64>, Option<ModelTensorReshape>) {
        if ty == "List[str]" && batching {
            (vec![1], Some(ModelTensorReshape { shape: vec![] }))
        } else {
            (vec![-1], None)
        }
    };
    let params: Vec<String> = sig
        .args
        .iter()
        .map(|a| format!("{}: {}", a.name, a.ty))
        .collect();
    let mut header = vec![
        format!(
            "Made by `trtis gen-config` from the TorchScript module {}:",
            args.model.display()
        ),
        format!("  forward({}) -> {}", params.join(", "), sig.returns),
        "A TorchScript module does not record its tensors' data types or shapes,".into(),
        "nor whether dimension 0 is the batch. Every data_type and dims below is".into(),
        "a placeholder (TYPE_FP32 for a Tensor, TYPE_STRING for a List[str],".into(),
        "dims: [-1]): edit them before serving the model.".into(),
    ];
    if config.max_batch_size == 0 {
        header.push("max_batch_size is 0: set it if dimension 0 is the batch.".into());
    }

    let dict_input = matches!(sig.args.as_slice(), [a] if a.ty.starts_with("Dict["));
    if dict_input {
        header.push(format!(
            "forward() takes one {}: its keys are the input names,",
            sig.args[0].ty
        ));
        header.push("which the module does not record. Add one input per key.".into());
        eprintln!(
            "note: forward() takes a {}: no inputs could be named; add one per key",
            sig.args[0].ty
        );
    } else {
        for a in &sig.args {
            let tensor = matches!(a.ty.as_str(), "Tensor" | "List[str]");
            if !tensor {
                header.push(format!(
                    "Argument '{}: {}' is neither a Tensor nor a List[str].",
                    a.name, a.ty
                ));
            }
            let (dims, reshape) = string_shape(&a.ty);
            config.input.push(ModelInput {
                name: a.name.clone(),
                data_type: string_or_fp32(&a.ty) as i32,
                dims,
                reshape,
                ..Default::default()
            });
        }
    }

    let returns = sig.return_types().unwrap_or_else(|| {
        header.push(format!(
            "forward() returns {}: how many is only known when it runs.",
            sig.returns
        ));
        header.push("One output is listed; add OUTPUT__1, ... for the others.".into());
        eprintln!(
            "note: forward() returns {}: one output listed, add the others",
            sig.returns
        );
        vec!["Tensor".into()]
    });
    if returns.is_empty() {
        header.push(format!("forward() returns {}: no outputs.", sig.returns));
    }
    for (i, ty) in returns.iter().enumerate() {
        let (dims, reshape) = string_shape(ty);
        config.output.push(ModelOutput {
            name: format!("OUTPUT__{i}"),
            data_type: string_or_fp32(ty) as i32,
            dims,
            reshape,
            ..Default::default()
        });
    }
    Ok(header)
}
