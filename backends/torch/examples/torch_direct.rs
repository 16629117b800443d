//! The in-process reference for the PyTorch backend's benchmark
//! (`scripts/bench.sh pytorch`): a TorchScript module called directly
//! through tch, or an AOTInductor package (`.pt2`) through the backend's
//! own loader (src/loader.rs and the C++ shim), as the backend calls them
//! (CPU, eval mode, no-grad and, by
//! default as in the backend, InferenceMode), without a server. Prints one JSON line: inferences per second and process CPU
//! microseconds per inference.
//!
//!   torch_direct run MODEL.pt|MODEL.pt2 --shape 3,224,224 --batch 1 --threads 1 --seconds 5
//!                    [--inference-mode 0|1] [--data uniform|zero|normal]
//!   torch_direct make-mlp OUT.pt     (8 x Linear 1024 + ReLU, traced, fixed seed)
//!
//! `cargo run --release -p trtis-torch --example torch_direct -- ...`.

use std::time::Instant;

use tch::{CModule, Device, Kind, Tensor};

// The backend's package loader, the same code (it needs the shim, linked by
// build.rs, and the libtorch.so stand-in from OUT_DIR).
#[allow(dead_code)]
#[path = "../src/loader.rs"]
mod loader;

// The backend's own shim (src/shim.cpp, linked by this package's build.rs):
// the reference runs under c10::InferenceMode as the backend does by default.
extern "C" {
    fn trtis_inference_mode_enter(enabled: i32) -> *mut std::ffi::c_void;
    fn trtis_inference_mode_exit(guard: *mut std::ffi::c_void);
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

fn arg<'a>(args: &'a [String], flag: &str, default: &'a str) -> &'a str {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .unwrap_or(default)
}

fn make_mlp(out: &str) {
    tch::manual_seed(0);
    let weights: Vec<(Tensor, Tensor)> = (0..8)
        .map(|_| {
            (
                Tensor::randn([1024, 1024], (Kind::Float, Device::Cpu)) / 32.0,
                Tensor::zeros([1024], (Kind::Float, Device::Cpu)),
            )
        })
        .collect();
    let example = Tensor::zeros([1, 1024], (Kind::Float, Device::Cpu));
    let mut forward = |inputs: &[Tensor]| {
        let mut x = inputs[0].shallow_clone();
        for (w, b) in &weights {
            x = x.linear(w, Some(b)).relu();
        }
        vec![x]
    };
    let module = CModule::create_by_tracing("MLP", "forward", &[example], &mut forward)
        .expect("trace the MLP");
    module.save(out).expect("save the MLP");
}

fn run(args: &[String]) {
    let model = &args[0];
    let shape: Vec<i64> = arg(args, "--shape", "1024")
        .split(',')
        .map(|d| d.parse().expect("--shape: numbers"))
        .collect();
    let batch: i64 = arg(args, "--batch", "1").parse().expect("--batch");
    let threads: i32 = arg(args, "--threads", "1").parse().expect("--threads");
    let seconds: f64 = arg(args, "--seconds", "5").parse().expect("--seconds");
    let _ = tch::get_num_threads();
    tch::set_num_threads(threads);
    // A TorchScript module, or an AOTInductor package.
    enum Model {
        Script(CModule),
        Package(loader::Loader),
    }
    let module = if model.ends_with(".pt2") {
        let version = loader::libtorch_version();
        Model::Package(
            loader::Loader::load(std::path::Path::new(model), 1, -1, &version)
                .expect("load the package"),
        )
    } else {
        let mut m = CModule::load_on_device(model, Device::Cpu).expect("load the module");
        m.set_eval();
        Model::Script(m)
    };
    let forward = |x: &Tensor| -> Tensor {
        match &module {
            Model::Script(m) => m.forward_ts(&[x]).expect("forward"),
            Model::Package(p) => p
                .run(std::slice::from_ref(x))
                .expect("run")
                .into_iter()
                .next()
                .expect("an output"),
        }
    };
    let mut dims = vec![batch];
    dims.extend(&shape);
    // The data perf_analyzer sends by default (--input-data random: uniform
    // values), or zeros or a normal distribution.
    let x = match arg(args, "--data", "uniform") {
        "zero" => Tensor::zeros(&dims, (Kind::Float, Device::Cpu)),
        "normal" => Tensor::randn(&dims, (Kind::Float, Device::Cpu)),
        _ => Tensor::rand(&dims, (Kind::Float, Device::Cpu)),
    };
    let _guard = tch::no_grad_guard();
    let inference_mode = arg(args, "--inference-mode", "1") == "1";
    // SAFETY: entered and left on this thread, around the runs.
    let mode = unsafe { trtis_inference_mode_enter(i32::from(inference_mode)) };
    for _ in 0..3 {
        let _ = forward(&x);
    }
    let (start, cpu0) = (Instant::now(), cpu_seconds());
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        let y = forward(&x);
        // Read the result as the server does (one copy out).
        let mut out = vec![0f32; y.numel()];
        y.copy_data(&mut out, y.numel());
        n += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    // SAFETY: made above on this thread.
    unsafe { trtis_inference_mode_exit(mode) };
    let inferences = (n * batch as u64) as f64;
    println!(
        "{{\"infer_per_s\": {:.2}, \"cpu_us\": {:.1}, \"batch\": {batch}, \"threads\": {threads}}}",
        inferences / elapsed,
        (cpu_seconds() - cpu0) / inferences * 1e6
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("make-mlp") if args.len() == 2 => make_mlp(&args[1]),
        Some("run") if args.len() >= 2 => run(&args[1..]),
        _ => {
            eprintln!("usage: torch_direct run MODEL.pt [--shape D,..] [--batch N] [--threads N] [--seconds S]\n       torch_direct make-mlp OUT.pt");
            std::process::exit(2);
        }
    }
}
