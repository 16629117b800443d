/* custom.h: the custom backend C API of TRTIS, written for trtis's example
 * backends from the API reference of the TRTIS 0.12 documentation (the
 * seed): a model is a shared library exporting CustomInitialize,
 * CustomFinalize, CustomErrorString and CustomExecute.
 *
 * Compiled with TRTIS_CUSTOM_1X defined, it is the TRTIS 1.x form instead:
 * CustomInitialize takes a CustomInitializeData, and a library whose
 * CustomVersion() returns 2 exports CustomExecuteV2 with memory-type-aware
 * callbacks. trtis runs that form only for a model whose config says so:
 *   parameters { key: "custom_api_version" value { string_value: "1" } }
 */
#ifndef TRTIS_EXAMPLE_CUSTOM_H
#define TRTIS_EXAMPLE_CUSTOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The gpu_device_id of an instance that runs on the CPU. */
#define CUSTOM_NO_GPU_DEVICE -1

/* One request of the batch handed to CustomExecute. Input shapes leave out
 * the batch dimension. error_code is the library's answer for the request
 * (0: success; else CustomErrorString's code). */
typedef struct custom_payload_struct {
  uint32_t batch_size;
  uint32_t input_cnt;
  const char** input_names;
  const size_t* input_shape_dim_cnts;
  const int64_t** input_shape_dims;
  uint32_t output_cnt;
  const char** required_output_names;
  void* input_context;
  void* output_context;
  int error_code;
} CustomPayload;

/* The next contiguous block of input `name`: call until *content is NULL.
 * *content_byte_size is the most the caller takes in; it returns the
 * block's size. Returns false on error. */
typedef bool (*CustomGetNextInputFn_t)(
    void* input_context, const char* name, const void** content,
    uint64_t* content_byte_size);

/* A buffer of content_byte_size bytes for output `name` of the given shape
 * (with the batch dimension when the model batches). true with a NULL
 * *content: the request does not want this output. Returns false on error. */
typedef bool (*CustomGetOutputFn_t)(
    void* output_context, const char* name, size_t shape_dim_cnt,
    int64_t* shape_dims, uint64_t content_byte_size, void** content);

#ifdef TRTIS_CUSTOM_1X

typedef enum custom_memorytype_enum {
  CUSTOM_MEMORY_CPU = 0,
  CUSTOM_MEMORY_GPU = 1,
  CUSTOM_MEMORY_CPU_PINNED = 2
} CustomMemoryType;

/* Indexes of CustomInitializeData's server_parameters. */
typedef enum custom_serverparamkind_enum {
  INFERENCE_SERVER_VERSION = 0,
  MODEL_REPOSITORY_PATH = 1,
  SERVER_PARAMETER_CNT
} CustomServerParameter;

typedef struct custom_initdata_struct {
  const char* instance_name;
  const char* serialized_model_config;
  size_t serialized_model_config_size;
  int gpu_device_id;
  size_t server_parameter_cnt;
  const char** server_parameters;
} CustomInitializeData;

typedef bool (*CustomGetNextInputV2Fn_t)(
    void* input_context, const char* name, const void** content,
    uint64_t* content_byte_size, CustomMemoryType* memory_type,
    int64_t* memory_type_id);

typedef bool (*CustomGetOutputV2Fn_t)(
    void* output_context, const char* name, size_t shape_dim_cnt,
    int64_t* shape_dims, uint64_t content_byte_size, void** content,
    CustomMemoryType* memory_type, int64_t* memory_type_id);

uint32_t CustomVersion(void);
int CustomInitialize(const CustomInitializeData* data, void** custom_context);
int CustomExecuteV2(
    void* custom_context, uint32_t payload_cnt, CustomPayload* payloads,
    CustomGetNextInputV2Fn_t input_fn, CustomGetOutputV2Fn_t output_fn);

#else

int CustomInitialize(
    const char* serialized_model_config, size_t serialized_model_config_size,
    int gpu_device_id, void** custom_context);

#endif

int CustomFinalize(void* custom_context);
const char* CustomErrorString(void* custom_context, int errcode);
int CustomExecute(
    void* custom_context, uint32_t payload_cnt, CustomPayload* payloads,
    CustomGetNextInputFn_t input_fn, CustomGetOutputFn_t output_fn);

#ifdef __cplusplus
}
#endif

#endif
