//! PyTorch 2 AOTInductor packages (`model.pt2`, platform `torch_aoti`),
//! read without libtorch (so `validate-config`, `gen-config` and the load
//! apply the same rules, and they are unit-tested).
//!
//! A package is a zip (PyTorch's PT2 archive) holding, under
//! `[<archive>/]data/aotinductor/<model>/`, the compiled model (`*.so`), its
//! metadata (`*metadata.json`: the device, the CPU ISA, the user's keys) and
//! usually the generated wrapper source (`*.wrapper.cpp`). The wrapper
//! source carries the call spec (the pytree TreeSpecs of forward()'s
//! arguments and result) and, in its input checks, each input's data type,
//! fixed dimensions and the bounds of the dynamic ones: what the exported
//! program declared. trtis reads them to check a config at load and to
//! check every request's inputs (the compiled code checks nothing unless
//! `AOTI_RUNTIME_CHECK_INPUTS` is set: a wrong shape would be undefined
//! behaviour), and `gen-config` writes a config from them.
//!
//! Names (Triton's pytorch backend): each flattened input answers to its
//! ordinal `<name>__<i>` (`INPUT__0`, ...) and to its place in forward()'s
//! arguments (`ARGS[0]`, `ARGS[0][1]`, `KWARGS[scale]`); each output to
//! `OUTPUT__<i>` and `RESULT` (a single tensor), `RESULT[0]`,
//! `RESULT[sum]`, ...
//!
//! The package's version: AOTInductor ties a package to the torch
//! major.minor that compiled it. trtis's export script records it as the
//! metadata key `torch_version`, which the load checks; a package without
//! it is tried, and a symbol its code needs and libtorch lacks is reported
//! as a version mismatch.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use crate::core::config::ModelConfig;
use crate::core::error::{Error, Result};
use crate::core::types::DataType;

mod bind;
mod spec;

pub use bind::*;
pub use spec::*;

/// The model name Triton's backend loads from a package.
pub const MODEL_NAME: &str = "model";

/// The metadata key trtis's export script records the exporting torch in.
pub const TORCH_VERSION_KEY: &str = "torch_version";

/// One dimension of an input, as the compiled code expects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    Fixed(i64),
    /// Dynamic, within these bounds (inclusive).
    Range(i64, i64),
}

impl Dim {
    /// Whether `n` fits. A dynamic dimension exported with a lower bound of
    /// 1 is compiled with the bound 2 (torch.export's 0/1 specialization);
    /// the code serves 1 (PyTorch's own runner and Triton pass 1 through),
    /// so 1 is accepted.
    pub fn admits(self, n: i64) -> bool {
        match self {
            Dim::Fixed(v) => n == v,
            Dim::Range(lo, hi) => n <= hi && (n >= lo || (n == 1 && lo == 2)),
        }
    }
}

/// What the compiled code expects of one flattened input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafInput {
    pub datatype: Option<DataType>,
    pub dims: Vec<Dim>,
}

/// A package's model, as read from the zip.
#[derive(Debug, Clone, Default)]
pub struct Package {
    /// The models the package holds.
    pub models: Vec<String>,
    pub metadata: BTreeMap<String, String>,
    /// The call spec (inputs', outputs'), from the wrapper source.
    pub call_spec: Option<(String, String)>,
    /// Each flattened input, from the wrapper source's checks.
    pub inputs: Option<Vec<LeafInput>>,
}

fn package_error(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::invalid_arg(format!(
        "PyTorch inductor model file \"{}\" is not a usable AOTInductor package: {why}",
        path.display()
    ))
}

/// Reads model `model` of the package at `path`.
pub fn read_package(path: &Path, model: &str) -> Result<Package> {
    let file = std::fs::File::open(path).map_err(|e| {
        Error::unavailable(format!(
            "PyTorch inductor model file \"{}\" is unreachable or inaccessible: {e}",
            path.display()
        ))
    })?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| package_error(path, format!("not a PT2 archive (zip): {e}")))?;
    // `[<archive>/]data/aotinductor/<model>/<file>`.
    let mut models: Vec<String> = Vec::new();
    let mut ours: Vec<(usize, String)> = Vec::new();
    for i in 0..zip.len() {
        let Ok(entry) = zip.by_index_raw(i) else {
            continue;
        };
        let name = entry.name().to_string();
        let Some(at) = name.find("data/aotinductor/") else {
            continue;
        };
        if at > 0 && (name[..at].matches('/').count() != 1 || !name[..at].ends_with('/')) {
            continue;
        }
        let rest = &name[at + "data/aotinductor/".len()..];
        let Some((m, file)) = rest.split_once('/') else {
            continue;
        };
        if !models.iter().any(|x| x == m) {
            models.push(m.to_string());
        }
        if m == model && !file.is_empty() {
            ours.push((i, file.to_string()));
        }
    }
    if models.is_empty() {
        return Err(package_error(
            path,
            "it holds no data/aotinductor/ folder (make it with torch._inductor.aoti_compile_and_package)",
        ));
    }
    if ours.is_empty() {
        return Err(package_error(
            path,
            format!(
                "it holds no model '{model}' (it holds {}); Triton's backend loads the model named '{MODEL_NAME}', \
                 the name aoti_compile_and_package gives",
                models
                    .iter()
                    .map(|m| format!("'{m}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if !ours
        .iter()
        .any(|(_, f)| f.ends_with(".so") || f.ends_with(".cpp"))
    {
        return Err(package_error(
            path,
            format!("model '{model}' has no compiled library (.so) or source (.cpp)"),
        ));
    }
    let mut read = |index: usize, limit: u64| -> Result<String> {
        let entry = zip
            .by_index(index)
            .map_err(|e| package_error(path, e.to_string()))?;
        let mut text = String::new();
        entry
            .take(limit)
            .read_to_string(&mut text)
            .map_err(|e| package_error(path, e.to_string()))?;
        Ok(text)
    };
    let mut package = Package {
        models,
        ..Default::default()
    };
    // The wrapper's metadata (`<hash>.wrapper_metadata.json`; older
    // releases `<hash>_metadata.json`), not a kernel's.
    let metadata = ours
        .iter()
        .filter(|(_, f)| f.ends_with("metadata.json") && !f.contains("kernel"))
        .min_by_key(|(_, f)| !f.contains("wrapper"));
    if let Some((index, _)) = metadata {
        let text = read(*index, 1 << 20)?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| package_error(path, format!("its metadata is not JSON: {e}")))?;
        if let Some(map) = value.as_object() {
            for (k, v) in map {
                let v = v
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string());
                package.metadata.insert(k.clone(), v);
            }
        }
    }
    let wrapper = ours
        .iter()
        .filter(|(_, f)| f.ends_with(".cpp") && !f.ends_with(".kernel.cpp"))
        .min_by_key(|(_, f)| !f.ends_with(".wrapper.cpp"));
    if let Some((index, _)) = wrapper {
        let source = read(*index, 256 << 20)?;
        package.call_spec = call_spec_of(&source);
        package.inputs = input_checks(&source);
    }
    Ok(package)
}

/// The `in_spec_ = R"(...)";` and `out_spec_` strings of a wrapper source.
fn call_spec_of(source: &str) -> Option<(String, String)> {
    let raw = |key: &str| -> Option<String> {
        let open = format!("{key} = R\"(");
        let at = source.find(&open)?;
        let rest = &source[at + open.len()..];
        let end = rest.find(")\";")?;
        Some(rest[..end].to_string())
    };
    Some((raw("in_spec_")?, raw("out_spec_")?))
}

fn datatype_of_aoti(name: &str) -> Option<DataType> {
    Some(match name {
        "bool" => DataType::Bool,
        "uint8" => DataType::Uint8,
        "int8" => DataType::Int8,
        "int16" => DataType::Int16,
        "int32" => DataType::Int32,
        "int64" => DataType::Int64,
        "float16" => DataType::Fp16,
        "bfloat16" => DataType::Bf16,
        "float32" => DataType::Fp32,
        "float64" => DataType::Fp64,
        "uint16" => DataType::Uint16,
        "uint32" => DataType::Uint32,
        "uint64" => DataType::Uint64,
        _ => return None,
    })
}

/// Each input's type and dimensions, from the wrapper's `check_input_<i>`
/// functions (generated for every input: the dtype, each fixed size and
/// the bounds of each dynamic one, each fixed stride). `None` when the
/// source has none (an input-less model or another generator).
fn input_checks(source: &str) -> Option<Vec<LeafInput>> {
    use regex::Regex;
    let header = Regex::new(r"static void check_input_(\d+)\(").ok()?;
    let dtype = Regex::new(r"_expected_dtype = aoti_torch_dtype_(\w+)\(\)").ok()?;
    let fixed = Regex::new(r"if \((\d+) != \w+_size\[(\d+)\]\)").ok()?;
    let low = Regex::new(r"if \(\w+_size\[(\d+)\] < (\d+)\)").ok()?;
    let high = Regex::new(r"if \(\w+_size\[(\d+)\] > (\d+)\)").ok()?;
    let dim_at = Regex::new(r"\w+_(?:size|stride)\[(\d+)\]").ok()?;
    let starts: Vec<(usize, usize)> = header
        .captures_iter(source)
        .filter_map(|c| Some((c.get(0)?.start(), c[1].parse().ok()?)))
        .collect();
    if starts.is_empty() {
        return None;
    }
    let mut out: Vec<Option<LeafInput>> = vec![None; starts.len()];
    for (k, (start, index)) in starts.iter().enumerate() {
        let end = starts.get(k + 1).map_or(source.len(), |s| s.0);
        let body = &source[*start..end];
        // The function ends at the first line that closes it.
        let body = body.find("\n}\n").map_or(body, |e| &body[..e]);
        let rank = dim_at
            .captures_iter(body)
            .filter_map(|c| c[1].parse::<usize>().ok())
            .max()
            .map_or(0, |m| m + 1);
        let mut dims = vec![Dim::Range(0, i64::MAX); rank];
        for c in fixed.captures_iter(body) {
            if let (Ok(v), Ok(d)) = (c[1].parse(), c[2].parse::<usize>()) {
                if d < rank {
                    dims[d] = Dim::Fixed(v);
                }
            }
        }
        for c in low.captures_iter(body) {
            if let (Ok(d), Ok(v)) = (c[1].parse::<usize>(), c[2].parse()) {
                if let Some(Dim::Range(lo, _)) = dims.get_mut(d) {
                    *lo = v;
                }
            }
        }
        for c in high.captures_iter(body) {
            if let (Ok(d), Ok(v)) = (c[1].parse::<usize>(), c[2].parse()) {
                if let Some(Dim::Range(_, hi)) = dims.get_mut(d) {
                    *hi = v;
                }
            }
        }
        let datatype = dtype.captures(body).and_then(|c| datatype_of_aoti(&c[1]));
        *out.get_mut(*index)? = Some(LeafInput { datatype, dims });
    }
    out.into_iter().collect()
}

/// The major.minor of a version string (`2.13.0+cu130` → `2.13`).
pub fn major_minor(version: &str) -> &str {
    let end = version
        .match_indices('.')
        .nth(1)
        .map_or(version.len(), |(i, _)| i);
    let end = version[..end].find('+').unwrap_or(end);
    &version[..end]
}

/// Whether the package can run here: compiled for the device the
/// instance is on (`gpu`), for an ISA this CPU has, and (when it records
/// it, and `libtorch` is known) by the torch major.minor of `libtorch`.
pub fn check_runnable(
    package: &Package,
    path: &Path,
    gpu: bool,
    libtorch: Option<&str>,
) -> Result<()> {
    let meta = |k: &str| package.metadata.get(k).map(String::as_str);
    if let (Some(version), Some(libtorch)) = (meta(TORCH_VERSION_KEY), libtorch) {
        if major_minor(version) != major_minor(libtorch) {
            return Err(Error::invalid_arg(format!(
                "PyTorch inductor model file \"{}\" was compiled by torch {version}, but this PyTorch backend's \
                 libtorch is {libtorch}: an AOTInductor package runs only on the torch major.minor that \
                 compiled it; export it again with torch=={libtorch}",
                path.display()
            )));
        }
    }
    match (meta("AOTI_DEVICE_KEY"), gpu) {
        (Some("cpu"), true) => {
            return Err(Error::invalid_arg(format!(
                "PyTorch inductor model file \"{}\" was compiled for the CPU, but the instance is KIND_GPU: \
                 use KIND_CPU, or export the model and its sample inputs on a CUDA device",
                path.display()
            )))
        }
        (Some("cuda"), false) => {
            return Err(Error::invalid_arg(format!(
                "PyTorch inductor model file \"{}\" was compiled for CUDA, but the instance is KIND_CPU: \
                 use KIND_GPU on a machine with a GPU, or export the model on the CPU",
                path.display()
            )))
        }
        (Some(other), _) if other != "cpu" && other != "cuda" => {
            return Err(Error::invalid_arg(format!(
                "PyTorch inductor model file \"{}\" was compiled for device '{other}', which this backend does not run",
                path.display()
            )))
        }
        _ => {}
    }
    if !gpu {
        if let Some(isa) = meta("AOTI_CPU_ISA").filter(|s| !s.is_empty()) {
            if let Some(missing) = missing_cpu_features(isa) {
                return Err(Error::invalid_arg(format!(
                    "PyTorch inductor model file \"{}\" was compiled for CPUs with {isa}, and this CPU lacks {missing}: \
                     export it on (or for) this machine's CPU, e.g. with inductor_configs {{\"cpp.march\": \"x86-64-v3\", \
                     \"cpp.simdlen\": 256}} for any AVX2 CPU",
                    path.display()
                )));
            }
        }
    }
    Ok(())
}

/// The CPU features an ISA name in AOTI_CPU_ISA needs and this CPU lacks
/// (`None`: all there, or a name this check does not know).
fn missing_cpu_features(isa: &str) -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut missing = Vec::new();
        for word in isa.split_whitespace() {
            let need: &[(&str, bool)] = match word.to_ascii_uppercase().as_str() {
                "AVX2" => &[
                    ("avx2", std::arch::is_x86_feature_detected!("avx2")),
                    ("fma", std::arch::is_x86_feature_detected!("fma")),
                ],
                "AVX512" => &[
                    ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
                    ("avx512bw", std::arch::is_x86_feature_detected!("avx512bw")),
                    ("avx512vl", std::arch::is_x86_feature_detected!("avx512vl")),
                    ("avx512dq", std::arch::is_x86_feature_detected!("avx512dq")),
                ],
                "AVX512_VNNI" => &[(
                    "avx512vnni",
                    std::arch::is_x86_feature_detected!("avx512vnni"),
                )],
                "AMX_TILE" | "AMX" => &[("amx-tile", amx())],
                _ => &[],
            };
            missing.extend(need.iter().filter(|(_, has)| !has).map(|(n, _)| *n));
        }
        if missing.is_empty() {
            None
        } else {
            Some(missing.join(", "))
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        None
    }
}

#[cfg(target_arch = "x86_64")]
fn amx() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" amx_tile"))
}

/// Reads the package at `path` and binds `config` to it as a load does
/// before it loads the compiled code: the binding is `None` when the
/// package carries no wrapper source (its call spec is then known only
/// once libtorch loads it).
pub fn bind_package(
    config: &ModelConfig,
    path: &Path,
    instance: &str,
    gpu: bool,
    libtorch: Option<&str>,
) -> Result<(Package, Option<Pt2Binding>)> {
    let package = read_package(path, MODEL_NAME)?;
    check_runnable(&package, path, gpu, libtorch)?;
    let binding = match &package.call_spec {
        Some((input, output)) => Some(bind(
            config,
            &leaves(input, output)?,
            package.inputs.as_deref(),
            instance,
        )?),
        None => None,
    };
    Ok((package, binding))
}

/// Turns the loader's failure into what went wrong, for the user.
pub fn explain_load_error(path: &Path, message: &str, libtorch: &str) -> String {
    let file = path.display();
    if message.contains("undefined symbol") {
        format!(
            "PyTorch inductor model file \"{file}\" needs a libtorch symbol this PyTorch backend's libtorch \
             {libtorch} lacks ({}): it was compiled by another torch version; export it again with torch=={libtorch}",
            first_line(message)
        )
    } else if message.contains("version `GLIBC") {
        format!(
            "PyTorch inductor model file \"{file}\": its compiled library needs a newer C or C++ runtime (glibc, \
             libstdc++) than this machine has ({}): compile it on a machine no newer than this one",
            first_line(message)
        )
    } else if message.contains("cannot open shared object file") {
        format!(
            "PyTorch inductor model file \"{file}\": its compiled library needs a shared library that is not \
             installed here ({}); install it (a C++ runtime such as libgomp or libstdc++) or make it findable \
             with LD_LIBRARY_PATH",
            first_line(message)
        )
    } else {
        format!(
            "failed to load PyTorch inductor model file \"{file}\": {}",
            first_line(message)
        )
    }
}

fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or(message).trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::parse_config;

    const IN_SPEC: &str = r#"[1, {"type": "builtins.tuple", "context": "null", "children_spec": [{"type": "builtins.tuple", "context": "null", "children_spec": [{"type": "builtins.tuple", "context": "null", "children_spec": [{"type": null, "context": null, "children_spec": []}, {"type": null, "context": null, "children_spec": []}]}]}, {"type": "builtins.dict", "context": "[\"scale\"]", "children_spec": [{"type": null, "context": null, "children_spec": []}]}]}]"#;
    const OUT_SPEC: &str = r#"[1, {"type": "builtins.dict", "context": "[\"sum\", \"prod\"]", "children_spec": [{"type": null, "context": null, "children_spec": []}, {"type": null, "context": null, "children_spec": []}]}]"#;
    const LEAF: &str = r#"{"type": null, "context": null, "children_spec": []}"#;

    #[test]
    fn call_specs_name_every_leaf_as_triton_does() {
        let l = leaves(IN_SPEC, OUT_SPEC).unwrap();
        assert_eq!(l.inputs, ["ARGS[0][0]", "ARGS[0][1]", "KWARGS[scale]"]);
        assert_eq!(l.outputs, ["RESULT[sum]", "RESULT[prod]"]);
        let single = format!("[1, {LEAF}]");
        let two_args = format!(
            r#"[1, {{"type": "builtins.tuple", "context": "null", "children_spec": [{{"type": "builtins.tuple", "context": "null", "children_spec": [{LEAF}, {LEAF}]}}, {{"type": "builtins.dict", "context": "[]", "children_spec": []}}]}}]"#
        );
        let l = leaves(&two_args, &single).unwrap();
        assert_eq!(l.inputs, ["ARGS[0]", "ARGS[1]"]);
        assert_eq!(l.outputs, ["RESULT"]);
        // Not (args, kwargs); a node kind Triton refuses; a key unusable in a name.
        assert!(leaves(&single, &single).is_err());
        let named = OUT_SPEC.replace("builtins.dict", "collections.namedtuple");
        assert!(leaves(IN_SPEC, &named)
            .unwrap_err()
            .message
            .contains("namedtuple"));
        let spaced = OUT_SPEC.replace("\\\"sum\\\"", "\\\"a b\\\"");
        assert!(leaves(IN_SPEC, &spaced)
            .unwrap_err()
            .message
            .contains("a b"));
    }

    const WRAPPER: &str = r#"
AOTI_NOINLINE static void check_input_0(
    AtenTensorHandle* input_handles
) {
    int32_t arg0_1_expected_dtype = aoti_torch_dtype_float32();
    auto arg0_1_size = arg0_1.sizes();
    if (arg0_1_size[0] < 2) {
    if (arg0_1_size[0] > 64) {
    if (4 != arg0_1_size[1]) {
    auto arg0_1_stride = arg0_1.strides();
    if (4 != arg0_1_stride[0]) {
    if (1 != arg0_1_stride[1]) {
}

AOTI_NOINLINE static void check_input_1(
    AtenTensorHandle* input_handles
) {
    int32_t arg1_1_expected_dtype = aoti_torch_dtype_int64();
    if (3 != arg1_1_size[0]) {
    if (1 != arg1_1_stride[0]) {
}

static bool _check_aoti_runtime_check_inputs_env() {
    in_spec_ = R"([1, {}])";
    out_spec_ = R"([1, {}])";
"#;

    #[test]
    fn the_wrapper_source_gives_each_inputs_type_and_shape() {
        let info = input_checks(WRAPPER).unwrap();
        assert_eq!(
            info,
            [
                LeafInput {
                    datatype: Some(DataType::Fp32),
                    dims: vec![Dim::Range(2, 64), Dim::Fixed(4)]
                },
                LeafInput {
                    datatype: Some(DataType::Int64),
                    dims: vec![Dim::Fixed(3)]
                }
            ]
        );
        assert_eq!(call_spec_of(WRAPPER).unwrap().0, "[1, {}]");
        // The batch of 1 export specialised away is served.
        assert!(Dim::Range(2, 64).admits(1) && Dim::Range(2, 64).admits(64));
        assert!(!Dim::Range(2, 64).admits(65) && !Dim::Range(2, 64).admits(0));
        assert!(!Dim::Range(3, 9).admits(1) && Dim::Range(3, 9).admits(3));
        assert!(check_shape("x", &[1, 4], &info[0]).is_ok());
        let e = check_shape("x", &[2, 5], &info[0]).unwrap_err();
        assert!(e.message.contains("[1..64, 4]"), "{}", e.message);
        assert!(check_shape("x", &[4], &info[0]).is_err());
    }

    fn config(text: &str) -> ModelConfig {
        parse_config(text.as_bytes()).unwrap().config
    }

    #[test]
    fn configs_bind_by_ordinal_or_forward_names_and_are_checked() {
        let l = Leaves {
            inputs: vec!["ARGS[0]".into(), "ARGS[1]".into()],
            outputs: vec!["RESULT[0]".into(), "RESULT[1]".into()],
        };
        let info = input_checks(WRAPPER).unwrap();
        let good = config(
            r#"name: "m" platform: "torch_aoti" max_batch_size: 8
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
                    { name: "ARGS[1]" data_type: TYPE_INT64 dims: [ 2 ] } ]
            output [ { name: "RESULT[1]" data_type: TYPE_FP32 dims: [ 4 ] } ]"#,
        );
        // ARGS[1] is fixed at [3] with no batch dimension: refused.
        let e = bind(&good, &l, Some(&info), "m_0").unwrap_err();
        assert!(e.message.contains("ARGS[1]"), "{}", e.message);
        let b = bind(&good, &l, None, "m_0").unwrap();
        assert_eq!(
            b.inputs,
            [("INPUT__0".to_string(), 0), ("ARGS[1]".to_string(), 1)]
        );
        assert_eq!(b.outputs[0].index, 1);
        let cases = [
            ("dims: [ 5 ]", "dimension 1 is 5"),
            ("data_type: TYPE_INT32", "takes TYPE_INT64"),
        ];
        for (change, want) in cases {
            let text = r#"name: "m" platform: "torch_aoti" max_batch_size: 0
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2, 4 ] },
                    { name: "INPUT__1" data_type: TYPE_INT64 dims: [ 3 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]"#;
            assert!(bind(&config(text), &l, Some(&info), "m_0").is_ok());
            let changed = match change {
                c if c.starts_with("dims") => text.replacen("dims: [ 2, 4 ]", "dims: [ 2, 5 ]", 1),
                _ => text.replacen("TYPE_INT64", "TYPE_INT32", 1),
            };
            let e = bind(&config(&changed), &l, Some(&info), "m_0").unwrap_err();
            assert!(e.message.contains(want), "{change}: {}", e.message);
        }
        let too_big = config(
            r#"name: "m" platform: "torch_aoti" max_batch_size: 128
            input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]"#,
        );
        let one = Leaves {
            inputs: vec!["ARGS[0]".into()],
            outputs: vec!["RESULT".into()],
        };
        let e = bind(&too_big, &one, Some(&info[..1]), "m_0").unwrap_err();
        assert!(e.message.contains("goes up to 64"), "{}", e.message);
        let missing = config(
            r#"name: "m" platform: "torch_aoti"
            input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]"#,
        );
        let e = bind(&missing, &one, None, "m_0").unwrap_err();
        assert!(
            e.message.contains("not found in model input map"),
            "{}",
            e.message
        );
        let count = bind(&good, &one, None, "m_0").unwrap_err();
        assert!(count
            .message
            .contains("expects 2 inputs, but model expects 1"));
        let strings = config(
            r#"name: "m" platform: "torch_aoti"
            input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ 4 ] } ]
            output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]"#,
        );
        let e = bind(&strings, &one, None, "m_0").unwrap_err();
        assert!(
            e.message.contains("Unsupported datatype TYPE_STRING"),
            "{}",
            e.message
        );
    }

    #[test]
    fn versions_devices_and_isas_are_checked_before_loading() {
        let path = Path::new("m/1/model.pt2");
        let mut p = Package::default();
        p.metadata.insert("AOTI_DEVICE_KEY".into(), "cpu".into());
        p.metadata
            .insert(TORCH_VERSION_KEY.into(), "2.13.0+cu130".into());
        assert!(check_runnable(&p, path, false, Some("2.13.0")).is_ok());
        let e = check_runnable(&p, path, false, Some("2.12.1")).unwrap_err();
        assert!(e.message.contains("torch==2.12.1"), "{}", e.message);
        let e = check_runnable(&p, path, true, Some("2.13.0")).unwrap_err();
        assert!(e.message.contains("KIND_GPU"), "{}", e.message);
        p.metadata.insert("AOTI_DEVICE_KEY".into(), "cuda".into());
        let e = check_runnable(&p, path, false, Some("2.13.0")).unwrap_err();
        assert!(e.message.contains("KIND_CPU"), "{}", e.message);
        assert_eq!(major_minor("2.13.0+cu130"), "2.13");
        assert_eq!(major_minor("2.13"), "2.13");
        assert_eq!(major_minor("3"), "3");
        let m = explain_load_error(
            path,
            "Error in dlopen: x.so: undefined symbol: aoti_torch_new",
            "2.13.0",
        );
        assert!(m.contains("another torch version"), "{m}");
        let m = explain_load_error(
            path,
            "Error in dlopen: libgone.so.1: cannot open shared object file: No such file",
            "2.13.0",
        );
        assert!(m.contains("libgone.so.1"), "{m}");
    }

    /// The committed packages read as their export made them.
    #[test]
    fn the_fixture_packages_are_read() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pt2");
        let p = read_package(&dir.join("add_sub.pt2"), MODEL_NAME).unwrap();
        assert_eq!(p.models, ["model"]);
        assert_eq!(p.metadata["AOTI_DEVICE_KEY"], "cpu");
        assert_eq!(p.metadata["AOTI_CPU_ISA"], "AVX2");
        assert!(p.metadata[TORCH_VERSION_KEY].starts_with("2.13."));
        let (i, o) = p.call_spec.clone().unwrap();
        let l = leaves(&i, &o).unwrap();
        assert_eq!((l.inputs.len(), l.outputs.len()), (2, 2));
        let info = p.inputs.unwrap();
        assert_eq!(info[1].datatype, Some(DataType::Fp32));
        assert_eq!(info[1].dims, [Dim::Range(2, 64), Dim::Fixed(4)]);
        let p = read_package(&dir.join("nested.pt2"), MODEL_NAME).unwrap();
        let (i, o) = p.call_spec.clone().unwrap();
        let l = leaves(&i, &o).unwrap();
        assert_eq!(l.inputs, ["ARGS[0][0]", "ARGS[0][1]", "KWARGS[scale]"]);
        assert_eq!(l.outputs, ["RESULT[sum]", "RESULT[prod]"]);
        assert_eq!(p.inputs.unwrap()[2].dims, [Dim::Fixed(3)]);
        let p = read_package(&dir.join("all_types.pt2"), MODEL_NAME).unwrap();
        let types: Vec<_> = p
            .inputs
            .unwrap()
            .iter()
            .map(|i| i.datatype.unwrap())
            .collect();
        use DataType::*;
        assert_eq!(
            types,
            [Bool, Uint8, Int8, Int16, Int32, Int64, Fp16, Bf16, Fp32, Fp64]
        );
        let e = read_package(&dir.join("add_sub.pt2"), "other").unwrap_err();
        assert!(
            e.message
                .contains("holds no model 'other' (it holds 'model')"),
            "{}",
            e.message
        );
        let e = read_package(&dir.join("README.md"), MODEL_NAME).unwrap_err();
        assert!(e.message.contains("not a PT2 archive"), "{}", e.message);
    }
}
