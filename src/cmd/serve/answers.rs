//! What the server answers of its command line (`flags::Args`): the flags
//! it refuses (`check`, Triton's words where Triton has them), the notes it
//! logs for those it accepts with nothing to do (`notes`), and the trace
//! settings in the order Triton applies them.

use super::flags::{Args, Compression};

impl Args {
    /// Every trace setting given, the deprecated flags first (as
    /// `--trace-config` values), so `--trace-config` wins.
    pub fn trace_settings(&self) -> Vec<String> {
        let mut values: Vec<String> = Vec::new();
        values.extend(self.trace_file.iter().map(|v| format!("file={v}")));
        values.extend(self.trace_level.iter().map(|v| format!("level={v}")));
        values.extend(self.trace_rate.iter().map(|v| format!("rate={v}")));
        values.extend(self.trace_count.iter().map(|v| format!("count={v}")));
        values.extend(
            self.trace_log_frequency
                .iter()
                .map(|v| format!("log-frequency={v}")),
        );
        values.extend(self.trace_config.iter().cloned());
        values
    }

    /// The checks Triton makes after parsing, and the refusals of what
    /// trtis does not do: the first problem, in Triton's words where it has
    /// them.
    pub fn check(&self) -> Result<(), String> {
        if self.http_max_input_size <= 0 {
            return Err("--http-max-input-size must be greater than 0.".into());
        }
        if self.model_config_name.as_deref() == Some("") {
            return Err("empty argument for --model-config-name".into());
        }
        if self.response_cache_byte_size.is_some() && !self.cache_config.is_empty() {
            return Err("Incompatible flags --response-cache-byte-size and --cache-config both provided. Please provide one or the other.".into());
        }
        if self.openai_port.is_some() && !self.allow_http {
            return Err(
                "--openai-port needs the HTTP service, which --allow-http=false turns off".into(),
            );
        }
        if self.allow_sagemaker {
            return Err("--allow-sagemaker=true: trtis has no SageMaker endpoint (/ping, /invocations); serve the KServe v2 API (--allow-http) behind SageMaker's container contract instead".into());
        }
        if self.allow_vertex_ai {
            return Err("--allow-vertex-ai=true: trtis has no Vertex AI endpoint; serve the KServe v2 API (--allow-http) instead".into());
        }
        if let Some(range) = &self.sagemaker_safe_port_range {
            port_range(range)?;
        }
        for (flag, values) in [
            (
                "--cuda-memory-pool-byte-size",
                &self.cuda_memory_pool_byte_size,
            ),
            (
                "--cuda-virtual-address-size",
                &self.cuda_virtual_address_size,
            ),
        ] {
            for v in values {
                gpu_pair::<u64>(flag, v)?;
            }
        }
        for v in &self.model_load_gpu_limit {
            let (_, fraction) = gpu_pair::<f64>("--model-load-gpu-limit", v)?;
            if !(0.0..=1.0).contains(&fraction) {
                return Err(format!(
                    "--model-load-gpu-limit={v}: the fraction must be between 0 and 1"
                ));
            }
        }
        if let Some(cc) = self.min_supported_compute_capability {
            if !(cc.is_finite() && cc >= 0.0) {
                return Err(format!(
                    "--min-supported-compute-capability={cc}: expected a capability such as 6.0"
                ));
            }
        }
        if let Some(policy) = self.host_policy.first() {
            host_policy(policy)?;
            return Err(format!(
                "--host-policy={policy}: trtis does not pin model instances to NUMA nodes or cores (instances run on the cores this process may use; use taskset or the container's cpuset)"
            ));
        }
        Ok(())
    }

    /// One line for each flag given that has nothing to tune here.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let mut note = |given: bool, flag: &str, why: &str| {
            if given {
                notes.push(format!("{flag}: {why}"));
            }
        };
        note(
            self.enable_peer_access.is_some(),
            "--enable-peer-access",
            "trtis makes no copies between GPUs (each instance's tensors stay on its own GPU), so there is no peer access to set up",
        );
        note(
            self.grpc_infer_thread_count.is_some(),
            "--grpc-infer-thread-count",
            "gRPC is served on the async runtime's threads (--http-thread-count), not a handler pool of its own",
        );
        note(
            self.grpc_infer_allocation_pool_size.is_some(),
            "--grpc-infer-allocation-pool-size",
            "trtis keeps no pool of gRPC request objects to size",
        );
        note(
            self.grpc_max_response_pool_size.is_some(),
            "--grpc-max-response-pool-size",
            "trtis writes a stream's responses as they come and keeps no pool of response objects to cap",
        );
        note(
            self.grpc_keepalive_permit_without_calls.is_some(),
            "--grpc-keepalive-permit-without-calls",
            "trtis answers every client keepalive ping, with or without calls in flight, and never closes a connection for pinging",
        );
        note(
            self.grpc_http2_max_pings_without_data.is_some(),
            "--grpc-http2-max-pings-without-data",
            "trtis's keepalive pings (--grpc-keepalive-time) go out whether or not data was sent: there is no cap to set",
        );
        note(
            self.grpc_http2_min_recv_ping_interval_without_data
                .is_some(),
            "--grpc-http2-min-recv-ping-interval-without-data",
            "trtis counts no ping strikes: a client may ping as often as it likes",
        );
        note(
            self.grpc_http2_max_ping_strikes.is_some(),
            "--grpc-http2-max-ping-strikes",
            "trtis counts no ping strikes: a client may ping as often as it likes",
        );
        note(
            matches!(
                self.grpc_infer_response_compression_level,
                Compression::Low | Compression::High
            ),
            "--grpc-infer-response-compression-level",
            "responses are compressed with gzip at its default level (6), the only one tonic offers",
        );
        note(
            self.grpc_max_connection_age_grace > 0 && self.grpc_max_connection_age == 0,
            "--grpc-max-connection-age-grace",
            "it applies to connections past --grpc-max-connection-age, which is not set",
        );
        let sagemaker = self.sagemaker_port.is_some()
            || self.sagemaker_safe_port_range.is_some()
            || self.sagemaker_thread_count.is_some();
        note(
            sagemaker,
            "--sagemaker-*",
            "SageMaker's endpoint is off (--allow-sagemaker=false), so its settings have nothing to apply to",
        );
        let vertex = self.vertex_ai_port.is_some()
            || self.vertex_ai_thread_count.is_some()
            || self.vertex_ai_default_model.is_some();
        note(
            vertex,
            "--vertex-ai-*",
            "Vertex AI's endpoint is off (--allow-vertex-ai=false), so its settings have nothing to apply to",
        );
        note(
            self.backend_directory.is_some(),
            "--backend-directory",
            "trtis's backends (onnxruntime, pytorch, python, custom) are built in; a custom library is named by the model's default_model_filename, as in TRTIS",
        );
        note(
            self.repoagent_directory.is_some(),
            "--repoagent-directory",
            "trtis has no repository agents: a model config with model_repository_agents is refused at load",
        );
        note(
            self.cache_directory.is_some(),
            "--cache-directory",
            "trtis's local response cache is built in (--cache-config local,size=BYTES)",
        );
        let gpus = !trtis::core::device::visible_gpus().is_empty();
        let memory = if gpus {
            "trtis allocates GPU memory through the backends' own allocators (ONNX Runtime's and libtorch's arenas), not a pool of its own"
        } else {
            "this server uses no GPU, so there is no GPU memory to pool"
        };
        note(
            !self.cuda_memory_pool_byte_size.is_empty(),
            "--cuda-memory-pool-byte-size",
            memory,
        );
        note(
            !self.cuda_virtual_address_size.is_empty(),
            "--cuda-virtual-address-size",
            "implicit sequence state lives in host memory in trtis, growing as it needs: there is no GPU address space to reserve",
        );
        note(
            self.pinned_memory_pool_byte_size.is_some(),
            "--pinned-memory-pool-byte-size",
            if gpus {
                "trtis hands the backends the request's own buffers; their GPU copies stage through the backends' allocators, not a pinned pool"
            } else {
                "this server uses no GPU, so there is nothing to pin"
            },
        );
        note(
            self.buffer_manager_thread_count.is_some(),
            "--buffer-manager-thread-count",
            "trtis copies inputs on the instance's own thread; there is no buffer manager pool (unused in Triton too since its backend split)",
        );
        note(
            !self.model_load_gpu_limit.is_empty() && !gpus,
            "--model-load-gpu-limit",
            "this server uses no GPU, so no load is held to a GPU memory limit",
        );
        notes
    }
}

/// `LOW-HIGH`, Triton's `--sagemaker-safe-port-range`.
fn port_range(range: &str) -> Result<(u16, u16), String> {
    let parsed = range
        .split_once('-')
        .and_then(|(lo, hi)| Some((lo.parse::<u16>().ok()?, hi.parse::<u16>().ok()?)));
    match parsed {
        Some((lo, hi)) if lo <= hi => Ok((lo, hi)),
        _ => Err(format!(
            "--sagemaker-safe-port-range={range}: expected <low>-<high>, two ports"
        )),
    }
}

/// `<gpu>:<value>`, as Triton's per-GPU flags take.
fn gpu_pair<T: std::str::FromStr>(flag: &str, value: &str) -> Result<(i32, T), String> {
    value
        .split_once(':')
        .and_then(|(gpu, v)| Some((gpu.parse::<i32>().ok()?, v.parse::<T>().ok()?)))
        .ok_or_else(|| format!("{flag}={value}: expected <integer>:<value>"))
}

/// `<name>,<setting>=<value>`, Triton's `--host-policy`, with its checks.
fn host_policy(policy: &str) -> Result<(), String> {
    let shape = || {
        format!("--host-policy option format is '<policy name>,<setting>=<value>'. Got {policy}")
    };
    let (name, rest) = policy.split_once(',').ok_or_else(shape)?;
    let (key, value) = rest.split_once('=').ok_or_else(shape)?;
    if name.is_empty() || value.is_empty() {
        return Err(shape());
    }
    if key != "numa-node" && key != "cpu-cores" {
        return Err(format!(
            "Unsupported host policy setting '{key}' is specified, supported settings are 'numa-node', 'cpu-cores'"
        ));
    }
    Ok(())
}
