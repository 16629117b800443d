//! Loading and checking model configurations from a repository without
//! loading any model: parse, normalize, validate, and the checks that need
//! the file system or other models (version directories, model, label and
//! data files, ensemble steps, circular ensembles).
//!
//! `trtis validate-config` prints what this finds; the server will use the
//! same path to load configs, so the two never disagree.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::core::config::catalog;
use crate::core::config::normalize::{normalize, NormalizeContext, ENSEMBLE_PLATFORM};
use crate::core::config::pb::{
    model_config::SchedulingChoice, model_sequence_batching::initial_state::StateData,
    model_warmup::input::InputDataType, DataType, ModelConfig,
};
use crate::core::config::validate::{is_contained_path, validate, ValidateContext};
use crate::core::config::{parse_config, support, Issue, Severity, SourceMap};

use super::layout::{self, ModelDir};

mod ensemble;
use ensemble::check_ensemble;

/// A located finding: what `validate-config` prints, one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub file: PathBuf,
    /// 1-based; 0 when the finding is about a directory, not a place in a file.
    pub line: u32,
    pub col: u32,
    pub severity: Severity,
    /// The config field path, empty when not about one field.
    pub field: String,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.col)?;
        }
        write!(f, ": {}: ", self.severity)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Options for checking.
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions<'a> {
    /// The GPU ids this server may use.
    pub gpus: &'static [i32],
    /// The least compute capability of a GPU models may use
    /// (`--min-supported-compute-capability`), for validation's words.
    pub min_compute_capability: (i32, i32),
    /// `--model-config-name`: a model's `configs/<NAME>.pbtxt` is checked
    /// where it has one.
    pub config_name: Option<&'a str>,
    /// The backends that run KIND_GPU instances in this installation (set
    /// only when there is a GPU): KIND_AUTO resolves to KIND_GPU for them.
    pub gpu_backends: &'static [&'static str],
    /// Severity of a KIND_GPU group on a machine without that GPU.
    pub missing_gpu: Severity,
    /// Also report what this server refuses of a config (`config::support`):
    /// on for `validate-config` and `serve`; off to check Triton's own rules
    /// alone (the `config_cases` corpus).
    pub server_support: bool,
    /// Also open the model files to check the config against them where
    /// loading does so (an ONNX model's scalar tensors): on for
    /// `validate-config`; off for `serve`, whose loading checks them.
    pub model_files: bool,
}

/// One checked model.
#[derive(Debug, Clone)]
pub struct CheckedModel {
    pub dir: ModelDir,
    /// The normalized config, when it parsed and normalized.
    pub config: Option<ModelConfig>,
    /// Versions the policy selects (that exist).
    pub versions: Vec<i64>,
    pub findings: Vec<Finding>,
    source_map: SourceMap,
}

impl CheckedModel {
    pub fn name(&self) -> &str {
        &self.dir.name
    }

    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }

    fn first_error(&self) -> Option<&Finding> {
        self.findings.iter().find(|f| f.severity == Severity::Error)
    }

    /// Records an issue, located through the config's source map.
    fn push(&mut self, issue: Issue) {
        let file = self.dir.config_path();
        let (line, col) = self.source_map.locate(&issue.field);
        self.findings.push(Finding {
            file,
            line,
            col,
            severity: issue.severity,
            field: issue.field,
            message: issue.message,
        });
    }

    /// Records a finding about the directory rather than a config field.
    fn push_dir(&mut self, severity: Severity, message: String) {
        self.findings.push(Finding {
            file: self.dir.path.clone(),
            line: 0,
            col: 0,
            severity,
            field: String::new(),
            message,
        });
    }
}

/// Checks the models `names` of the repository at `root` (all of them when
/// `names` is None), resolving the models their ensembles use from the same
/// repository. Returns the requested models, in order.
pub fn check_repository(
    root: &Path,
    names: Option<&[String]>,
    opts: &CheckOptions,
) -> std::io::Result<Vec<CheckedModel>> {
    check_repositories(&[root.to_path_buf()], names, opts)
}

/// As `check_repository`, over several repositories served together
/// (Triton's repeated `--model-repository`): a model is found in whichever
/// holds it, and one in more than one is an error.
pub fn check_repositories(
    roots: &[PathBuf],
    names: Option<&[String]>,
    opts: &CheckOptions,
) -> std::io::Result<Vec<CheckedModel>> {
    check_in(
        Roots {
            all: roots,
            home: None,
        },
        names,
        opts,
    )
}

/// Where a check finds models by name: in every repository, or, for a
/// model of one namespace (`--model-namespacing`), in its own repository
/// first.
#[derive(Debug, Clone, Copy)]
pub struct Roots<'a> {
    pub all: &'a [PathBuf],
    /// The repository of the model being checked, with namespacing: a name
    /// there is that repository's model; a name not there is the one other
    /// repository's that has it, and none when several have it (an
    /// ensemble step that is ambiguous, as in Triton).
    pub home: Option<&'a Path>,
}

impl Roots<'_> {
    fn dirs(&self, name: &str) -> Vec<PathBuf> {
        let all = model_dirs(self.all, name);
        match self.home {
            None => all,
            Some(home) => {
                let own = home.join(name);
                if all.contains(&own) {
                    vec![own]
                } else if all.len() == 1 {
                    all
                } else {
                    Vec::new()
                }
            }
        }
    }
}

/// As `check_repositories`, models found through `roots`.
pub fn check_in(
    roots: Roots,
    names: Option<&[String]>,
    opts: &CheckOptions,
) -> std::io::Result<Vec<CheckedModel>> {
    let requested: Vec<String> = match names {
        Some(n) => n.to_vec(),
        None => {
            let mut all = std::collections::BTreeSet::new();
            for root in roots.all {
                for p in layout::list_model_dirs(root)? {
                    if let Some(n) = p.file_name() {
                        all.insert(n.to_string_lossy().into_owned());
                    }
                }
            }
            all.into_iter().collect()
        }
    };
    let mut cache: BTreeMap<String, Option<CheckedModel>> = BTreeMap::new();
    for name in &requested {
        load_into(roots, name, opts, &mut cache)?;
    }
    // Ensembles: resolve their steps (checking the step models on demand).
    for name in &requested {
        let is_ensemble = cache
            .get(name)
            .and_then(|m| m.as_ref())
            .and_then(|m| m.config.as_ref())
            .is_some_and(|c| c.platform == ENSEMBLE_PLATFORM);
        if is_ensemble {
            check_ensemble(roots, name, opts, &mut cache)?;
        }
    }
    Ok(requested
        .iter()
        .filter_map(|n| cache.get(n).cloned().flatten())
        .collect())
}

/// The directories of model `name` in the repositories (more than one is
/// an error for the caller to report).
pub fn model_dirs(roots: &[PathBuf], name: &str) -> Vec<PathBuf> {
    if !layout::is_contained_name(name) {
        return Vec::new();
    }
    roots
        .iter()
        .map(|r| r.join(name))
        .filter(|p| p.is_dir())
        .collect()
}

/// Triton's error for a model name in more than one repository.
pub fn duplicate_message(name: &str, dirs: &[PathBuf]) -> String {
    format!(
        "failed to load '{name}': the model is in more than one model repository ({})",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Checks `<root>/name` into the cache (None when no repository has it).
fn load_into(
    roots: Roots,
    name: &str,
    opts: &CheckOptions,
    cache: &mut BTreeMap<String, Option<CheckedModel>>,
) -> std::io::Result<()> {
    if cache.contains_key(name) {
        return Ok(());
    }
    let dirs = roots.dirs(name);
    let model = match dirs.first() {
        None => None,
        Some(path) => {
            let mut m = check_model(layout::scan_model_dir(path, opts.config_name)?, opts);
            if dirs.len() > 1 {
                m.push_dir(Severity::Error, duplicate_message(name, &dirs));
            }
            Some(m)
        }
    };
    cache.insert(name.to_string(), model);
    Ok(())
}

/// Parses, normalizes and validates one model, and checks its files.
fn check_model(dir: ModelDir, opts: &CheckOptions) -> CheckedModel {
    let mut m = CheckedModel {
        dir,
        config: None,
        versions: Vec::new(),
        findings: Vec::new(),
        source_map: SourceMap::default(),
    };
    for warning in m.dir.ignored.clone() {
        m.push_dir(Severity::Warning, warning);
    }
    let config_path = m.dir.config_path();
    // A regular file only: a FIFO would block the load (and the server's
    // start) until a writer came.
    let config = match crate::core::fsutil::read_regular(&config_path) {
        Ok(bytes) => match parse_config(&bytes) {
            Ok(parsed) => {
                m.source_map = parsed.source_map;
                parsed.config
            }
            Err(e) => {
                m.findings.push(Finding {
                    file: config_path,
                    line: e.line,
                    col: e.col,
                    severity: Severity::Error,
                    field: String::new(),
                    message: e.message,
                });
                return m;
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            missing_config(&mut m);
            return m;
        }
        Err(e) => {
            m.push_dir(
                Severity::Error,
                format!(
                    "failed to open text file for read {}: {e}",
                    config_path.display()
                ),
            );
            return m;
        }
    };
    check_config(m, config, opts)
}

/// Checks a config that did not come from the model's `config.pbtxt` (an
/// auto-completed one): normalize, validate, files.
pub fn check_completed(dir: ModelDir, config: ModelConfig, opts: &CheckOptions) -> CheckedModel {
    let m = CheckedModel {
        dir,
        config: None,
        versions: Vec::new(),
        findings: Vec::new(),
        source_map: SourceMap::default(),
    };
    check_config(m, config, opts)
}

/// Checks a config given in place of a model's file (a load request's
/// `config`), with its directory `dir`: the same checks as a file, an
/// ensemble's steps resolved through `roots`.
pub fn check_given(
    roots: Roots,
    dir: ModelDir,
    config: ModelConfig,
    opts: &CheckOptions,
) -> std::io::Result<CheckedModel> {
    let name = dir.name.clone();
    let model = check_completed(dir, config, opts);
    let mut cache = BTreeMap::new();
    cache.insert(name.clone(), Some(model));
    check_ensemble(roots, &name, opts, &mut cache)?;
    Ok(cache
        .remove(&name)
        .flatten()
        .expect("the given model stays in the cache"))
}

/// Normalize, validate and check the files of a parsed config.
fn check_config(mut m: CheckedModel, mut config: ModelConfig, opts: &CheckOptions) -> CheckedModel {
    let given_name = config.name.clone();
    let ctx = NormalizeContext {
        model_name: m.dir.name.clone(),
        first_version_entries: m.dir.first_version_entries(),
        gpus: opts.gpus,
        gpu_backends: opts.gpu_backends,
    };
    if let Err(issue) = normalize(&mut config, &ctx) {
        m.push(issue);
        return m;
    }
    if !given_name.is_empty() && given_name != m.dir.name {
        let message = if layout::is_contained_name(&given_name) {
            format!(
                "unexpected directory name '{}' for model '{given_name}', directory name must equal model name",
                m.dir.name
            )
        } else {
            format!("invalid model name '{given_name}', model name must not contain path traversal characters")
        };
        m.push(Issue::error("name", message));
    }
    let vctx = ValidateContext {
        gpus: opts.gpus,
        missing_gpu: opts.missing_gpu,
        min_compute_capability: crate::core::device::capability_value(opts.min_compute_capability),
    };
    for issue in validate(&config, &vctx) {
        m.push(issue);
    }
    if opts.server_support {
        for issue in support::check(&config) {
            m.push(issue);
        }
    }
    check_files(&mut m, &config);
    if opts.server_support {
        let dirs: Vec<PathBuf> = m
            .versions
            .iter()
            .filter_map(|v| m.dir.versions.get(v).cloned())
            .collect();
        for issue in crate::core::backend::check_config(&config, &dirs, opts.model_files) {
            m.push(issue);
        }
    }
    m.config = Some(config);
    m
}

/// No `config.pbtxt`: fine when the server can complete one from the model
/// file (as Triton's auto-complete does), otherwise an error.
fn missing_config(m: &mut CheckedModel) {
    let entries = m.dir.first_version_entries();
    let completable = [
        "model.onnx",
        "model.plan",
        "model.savedmodel",
        "model.py",
        "model.xml",
    ];
    match completable.iter().find(|f| entries.iter().any(|e| e == *f)) {
        Some(file) => m.push_dir(
            Severity::Warning,
            format!(
                "no {}: the server will complete the configuration from '{file}' (auto-complete); \
                 `trtis gen-config` prints it",
                layout::CONFIG_FILE
            ),
        ),
        None => m.push_dir(
            Severity::Error,
            format!(
                "model configuration is not provided for model '{}'",
                m.dir.name
            ),
        ),
    }
}

/// Version directories, model files, label files, warmup and initial-state
/// data files.
fn check_files(m: &mut CheckedModel, config: &ModelConfig) {
    let name = m.dir.name.clone();
    let (versions, missing) =
        layout::versions_to_load(config.version_policy.as_ref(), &m.dir.versions);
    for v in missing {
        m.push(Issue::error(
            "version_policy",
            format!("version {v} is specified for model '{name}', but the version directory is not present"),
        ));
    }
    if versions.is_empty() {
        m.push(Issue::error(
            "version_policy",
            format!(
                "at least one version must be available under the version policy of model '{name}'"
            ),
        ));
    }
    let needs_file = config.platform != ENSEMBLE_PLATFORM
        && catalog::spec(&config.backend).is_some_and(|s| !s.formats.is_empty());
    let file_name = &config.default_model_filename;
    if needs_file && !file_name.is_empty() && is_contained_path(file_name) {
        for v in &versions {
            let file = m.dir.versions[v].join(&config.default_model_filename);
            let kind = std::fs::metadata(&file).map(|meta| meta.file_type());
            if kind.as_ref().is_ok_and(|k| !k.is_file() && !k.is_dir()) {
                // A FIFO (or device) would block the backend reading it.
                m.push(Issue::error(
                    "default_model_filename",
                    format!("{} is not a regular file", file.display()),
                ));
            } else if kind.is_err() {
                m.push(Issue::error(
                    "default_model_filename",
                    format!(
                        "unable to find '{}' in version directory {v} of model '{name}'",
                        config.default_model_filename
                    ),
                ));
            }
        }
    }
    m.versions = versions;
    for (i, output) in config.output.iter().enumerate() {
        let label = &output.label_filename;
        if !label.is_empty() && !m.dir.path.join(label).is_file() {
            m.push(Issue::error(
                format!("output[{i}].label_filename"),
                format!(
                    "label file '{label}' of output '{}' not found in the model directory",
                    output.name
                ),
            ));
        }
    }
    if let Err(e) = crate::core::openai::OpenAiModel::from_config(config, &m.dir.path) {
        m.push(Issue::error(format!("parameters[{:?}]", e.key), e.message));
    }
    for (i, warmup) in config.model_warmup.iter().enumerate() {
        for (input, spec) in &warmup.inputs {
            if let Some(InputDataType::InputDataFile(file)) = &spec.input_data_type {
                let path = m.dir.path.join("warmup").join(file);
                if !path.is_file() {
                    // Triton's words when the instance reads the file.
                    m.push(Issue::error(
                        format!("model_warmup[{i}].inputs[{input:?}]"),
                        format!(
                            "failed to open text file for read {}: No such file or directory",
                            path.display()
                        ),
                    ));
                }
            }
        }
    }
    if let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice {
        for (i, state) in sb.state.iter().enumerate() {
            let Some(init) = state.initial_state.first() else {
                continue;
            };
            let Some(StateData::DataFile(file)) = &init.state_data else {
                continue;
            };
            let field = format!("sequence_batching.state[{i}].initial_state[0].data_file");
            let relative = Path::new("initial_state").join(file);
            let path = m.dir.path.join(&relative);
            // A regular file only: the scheduler reads it whole.
            match crate::core::fsutil::open_regular(&path).and_then(|f| f.metadata()) {
                Err(e) => m.push(Issue::error(
                    field,
                    format!(
                        "failed to open text file for read {}: {e}",
                        relative.display()
                    ),
                )),
                Ok(meta) => {
                    let expected = byte_size(init.data_type, &init.dims);
                    if let Some(expected) = expected.filter(|&n| n > meta.len()) {
                        m.push(Issue::error(
                            field,
                            format!(
                                "initial_state setting expects {expected} bytes, but the data provided from {file}only has {} bytes.",
                                meta.len()
                            ),
                        ));
                    }
                }
            }
        }
    }
}

/// Bytes of a fixed-size tensor (None for STRING or variable dims).
fn byte_size(data_type: i32, dims: &[i64]) -> Option<u64> {
    let element = match DataType::try_from(data_type).ok()? {
        DataType::TypeBool | DataType::TypeUint8 | DataType::TypeInt8 => 1,
        DataType::TypeUint16 | DataType::TypeInt16 | DataType::TypeFp16 | DataType::TypeBf16 => 2,
        DataType::TypeUint32 | DataType::TypeInt32 | DataType::TypeFp32 => 4,
        DataType::TypeUint64 | DataType::TypeInt64 | DataType::TypeFp64 => 8,
        DataType::TypeString | DataType::TypeInvalid => return None,
    };
    dims.iter().try_fold(element, |acc: u64, &d| {
        u64::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    })
}
