// What the PyTorch backend needs of libtorch that the tch crate does not
// expose (three entry points, so hand-written rather than a crate): the
// c10::InferenceMode guard Triton's INFERENCE_MODE parameter turns on, and
// the JIT executor switch behind ENABLE_JIT_EXECUTOR. Compiled by build.rs
// against the same libtorch headers as tch, only with the `torch` feature.
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

extern "C" {

// A new InferenceMode guard (null if libtorch threw); end it with
// trtis_inference_mode_exit on the same thread.
void* trtis_inference_mode_enter(int enabled) {
  try {
    return new c10::InferenceMode(enabled != 0);
  } catch (...) {
    return nullptr;
  }
}

void trtis_inference_mode_exit(void* guard) {
  delete static_cast<c10::InferenceMode*>(guard);
}

// torch::jit::getExecutorMode() = on (process-wide, as in Triton).
void trtis_set_executor_mode(int on) {
  torch::jit::getExecutorMode() = (on != 0);
}

}
