//! Links the PyTorch backend library against libtorch with an rpath to it
//! (torch-sys passes the rpath only to its own C++ shim), so the server
//! loads it without `LD_LIBRARY_PATH`, and compiles `src/shim.cpp` (what tch
//! does not expose: `c10::InferenceMode`, the JIT executor switch, the
//! AOTInductor package loader) against
//! the same headers. libtorch's folder comes from torch-sys (a direct
//! dependency for this reason) as `DEP_TCH_LIBTORCH_LIB`. libtorch_cuda is
//! linked (past `--as-needed`, which would drop it) only when asked with
//! `TRTIS_TORCH_CUDA=1`: it needs cuDNN and cuBLAS, which the minimal CPU
//! install of scripts/setup.sh leaves out.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=TRTIS_TORCH_CUDA");
    println!("cargo:rerun-if-changed=src/shim.cpp");
    let dir = env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys reports libtorch's folder");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    // An AOTInductor package's compiled model needs libtorch.so (besides
    // libtorch_cpu, which tch links): linked (past `--as-needed`) so that
    // it is in the process when the loader dlopens the package's library,
    // which finds its dependencies by name among the loaded ones.
    // A stand-in for libtorch.so, which an AOTInductor package's compiled
    // model names as a dependency: the wheel's libtorch.so is only an
    // umbrella that pulls in libtorch_cuda (and through it cuDNN, cuBLAS,
    // ...), which the minimal CPU install lacks, while the model uses only
    // libtorch_cpu. An empty library with the soname `libtorch.so`, loaded
    // before a package when the real one cannot be (aoti.rs), satisfies the
    // dependency by name. Embedded in the backend library (no extra file).
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let stub_c = out.join("libtorch_stub.c");
    std::fs::write(&stub_c, "int trtis_libtorch_stub;\n").expect("write the stub's source");
    let compiler = cc::Build::new().get_compiler();
    let status = compiler
        .to_command()
        .args([
            "-shared",
            "-fPIC",
            "-nostdlib",
            "-Wl,-soname,libtorch.so",
            "-o",
        ])
        .arg(out.join("libtorch_stub.so"))
        .arg(&stub_c)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "building the libtorch.so stand-in failed");
    if env::var("TRTIS_TORCH_CUDA").as_deref() == Ok("1") {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
    let include = PathBuf::from(&dir).join("../include");
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define(
            "_GLIBCXX_USE_CXX11_ABI",
            env::var("LIBTORCH_CXX11_ABI").as_deref().unwrap_or("1"),
        )
        .file("src/shim.cpp")
        .compile("trtis_torch_shim");
    // The benchmark's reference (examples/torch_direct.rs) uses the shim too.
    println!(
        "cargo:rustc-link-arg-examples={}/libtrtis_torch_shim.a",
        out.display()
    );
}
