//! `trtis gen-config` for PyTorch models: a TorchScript module's config
//! from forward()'s signature (`torchscript` reads it without libtorch),
//! placeholders for what a module does not record; an AOTInductor
//! package's from its call spec and the checks its wrapper source makes
//! (`pt2`).

use std::path::Path;

use super::pt2::{self, Dim};
use super::torchscript;
use crate::core::backend::generate::{dynamic_batching, GenRequest, Generated};
use crate::core::config::pb::{DataType, ModelInput, ModelOutput, ModelTensorReshape};
use crate::core::config::ModelConfig;

/// The config of the TorchScript module or AOTInductor package `file`.
pub fn gen_config(
    file: &Path,
    req: &GenRequest,
    config: &mut ModelConfig,
) -> Result<Generated, String> {
    if file.extension().is_some_and(|e| e == "pt2") {
        pt2(file, req, config)
    } else {
        torchscript(file, req, config)
    }
}

/// The AOTInductor package's config, from its call spec and input checks;
/// returns the comment lines that go above it.
fn pt2(file: &Path, req: &GenRequest, config: &mut ModelConfig) -> Result<Generated, String> {
    let shown = file.display();
    let package = pt2::read_package(file, pt2::MODEL_NAME).map_err(|e| e.to_string())?;
    let (in_spec, out_spec) = package.call_spec.clone().ok_or_else(|| {
        format!(
            "{shown}: the package carries no wrapper source, so its inputs cannot be read without loading it: \
             write the config by hand (platform: \"torch_aoti\", inputs INPUT__0.., outputs OUTPUT__0..)"
        )
    })?;
    let leaves = pt2::leaves(&in_spec, &out_spec).map_err(|e| format!("{shown}: {e}"))?;
    let info = package.inputs.clone().unwrap_or_default();
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
    config.max_batch_size = match (req.max_batch_size, batch_bound) {
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
    if batching && req.dynamic_batching != Some(false) {
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
    Ok(Generated {
        header,
        notes: Vec::new(),
    })
}

/// The TorchScript module's config, from forward()'s signature; returns the
/// comment lines that go above it (what the module did not say).
fn torchscript(
    file: &Path,
    req: &GenRequest,
    config: &mut ModelConfig,
) -> Result<Generated, String> {
    let sig = torchscript::forward_signature(file).map_err(|e| e.to_string())?;
    let mut notes = vec![format!(
        "warning: {}: TorchScript records no data types or shapes: edit the \
         placeholders (see the comments at the top)",
        file.display()
    )];
    config.max_batch_size = req.max_batch_size.unwrap_or(0);
    if config.max_batch_size > 0 {
        if req.dynamic_batching != Some(false) {
            config.scheduling_choice = dynamic_batching();
        }
    } else if req.dynamic_batching == Some(true) {
        notes.push("note: --dynamic-batching ignored: it needs --max-batch-size above 0".into());
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
            file.display()
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
        notes.push(format!(
            "note: forward() takes a {}: no inputs could be named; add one per key",
            sig.args[0].ty
        ));
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
        notes.push(format!(
            "note: forward() returns {}: one output listed, add the others",
            sig.returns
        ));
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
    Ok(Generated { header, notes })
}
