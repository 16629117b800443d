// What the PyTorch backend needs of libtorch that the tch crate does not
// expose (hand-written rather than a crate: a handful of entry points): the
// c10::InferenceMode guard Triton's INFERENCE_MODE parameter turns on, the
// JIT executor switch behind ENABLE_JIT_EXECUTOR, and AOTInductor's package
// loader for `.pt2` models (torch::inductor::AOTIModelPackageLoader).
// Compiled by build.rs against the same libtorch headers as tch. Tensors
// cross as `at::Tensor*`, which is what tch's C_tensor points at.
#include <c10/core/InferenceMode.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/headeronly/version.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

char* copy_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) {
    std::memcpy(out, s.data(), s.size());
    out[s.size()] = '\0';
  }
  return out;
}

// The message of what a libtorch call threw, into *err (malloc'ed).
void set_error(char** err, const char* what) {
  if (err != nullptr) {
    *err = copy_string(what);
  }
}

}  // namespace

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

// The libtorch version these headers belong to, "major.minor.patch".
const char* trtis_torch_version() {
  return TORCH_VERSION;
}

// Loads model `model_name` of the AOTInductor package at `path` with
// `num_runners` copies of its compiled model (concurrent runs beyond that
// wait), on CUDA device `device_index` for a CUDA package (-1: the
// current one; a CPU package ignores it). Null with *err set on failure.
void* trtis_aoti_load(const char* path, const char* model_name, size_t num_runners,
                      int device_index, char** err) {
  try {
    return new torch::inductor::AOTIModelPackageLoader(
        path, model_name, false, num_runners, static_cast<c10::DeviceIndex>(device_index));
  } catch (const std::exception& e) {
    set_error(err, e.what());
  } catch (...) {
    set_error(err, "unknown exception");
  }
  return nullptr;
}

void trtis_aoti_free(void* loader) {
  delete static_cast<torch::inductor::AOTIModelPackageLoader*>(loader);
}

// The package's call spec: which = 0 for the inputs', 1 for the outputs'
// (pytree TreeSpec JSON), malloc'ed; null with *err set on failure.
char* trtis_aoti_call_spec(void* loader, int which, char** err) {
  try {
    auto spec = static_cast<torch::inductor::AOTIModelPackageLoader*>(loader)->get_call_spec();
    if (which < 0 || static_cast<size_t>(which) >= spec.size()) {
      set_error(err, "the package has no such call spec");
      return nullptr;
    }
    return copy_string(spec[which]);
  } catch (const std::exception& e) {
    set_error(err, e.what());
  } catch (...) {
    set_error(err, "unknown exception");
  }
  return nullptr;
}

// Runs the model on `n_inputs` tensors (the flattened call-spec leaves, in
// order). On success returns 0, *outputs is a malloc'ed array of *n_outputs
// new `at::Tensor*` (each owned by the caller); else -1 with *err set.
int trtis_aoti_run(void* loader, at::Tensor* const* inputs, size_t n_inputs,
                   at::Tensor*** outputs, size_t* n_outputs, char** err) {
  try {
    std::vector<at::Tensor> args;
    args.reserve(n_inputs);
    for (size_t i = 0; i < n_inputs; i++) {
      args.push_back(*inputs[i]);
    }
    auto results = static_cast<torch::inductor::AOTIModelPackageLoader*>(loader)->boxed_run(
        std::move(args));
    auto out = static_cast<at::Tensor**>(std::malloc(sizeof(at::Tensor*) * (results.size() + 1)));
    if (out == nullptr) {
      set_error(err, "out of memory");
      return -1;
    }
    for (size_t i = 0; i < results.size(); i++) {
      out[i] = new at::Tensor(std::move(results[i]));
    }
    *outputs = out;
    *n_outputs = results.size();
    return 0;
  } catch (const std::exception& e) {
    set_error(err, e.what());
  } catch (...) {
    set_error(err, "unknown exception");
  }
  return -1;
}

}
