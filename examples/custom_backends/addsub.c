/* addsub: the seed's example custom backend. Two inputs, INPUT0 and INPUT1,
 * both INT32 or both FP32 and of the same shape; OUTPUT0 = INPUT0 + INPUT1,
 * OUTPUT1 = INPUT0 - INPUT1. The data type comes from the serialized model
 * config CustomInitialize receives.
 *
 * With ADDSUB_TRACE set to a file path, each CustomExecute appends
 * "payloads=<n> batch=<sum of the payloads' batch sizes>" to it (the tests
 * read it to see the batches the server formed), and CustomInitialize
 * "init <instance> <repository>" (the 1.x form's CustomInitializeData).
 *
 * Built twice by scripts/build-custom-backends.sh: as the seed's form, and
 * with -DTRTIS_CUSTOM_1X as TRTIS 1.x's (CustomVersion 2, CustomExecuteV2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "custom.h"
#include "model_config.h"

enum {
  ADDSUB_OK = 0,
  ADDSUB_BAD_CONFIG,
  ADDSUB_BAD_TYPE,
  ADDSUB_NO_INPUT,
  ADDSUB_BAD_SHAPE,
  ADDSUB_INPUT_READ,
  ADDSUB_OUTPUT_BUFFER,
  ADDSUB_NO_MEMORY,
  ADDSUB_GPU,
  ADDSUB_CODES
};

static const char* const kMessages[ADDSUB_CODES] = {
    "success",
    "addsub: the model config must have two inputs and two outputs",
    "addsub: inputs and outputs must all be TYPE_INT32 or all TYPE_FP32",
    "addsub: a request lacks INPUT0 or INPUT1",
    "addsub: INPUT0 and INPUT1 must have the same shape",
    "addsub: the server could not hand over an input",
    "addsub: the server refused an output buffer",
    "addsub: out of memory",
    "addsub: runs on the CPU only",
};

typedef struct {
  int datatype;
  int batching;
} Context;

typedef struct {
  CustomGetNextInputFn_t input;
  CustomGetOutputFn_t output;
#ifdef TRTIS_CUSTOM_1X
  CustomGetNextInputV2Fn_t input_v2;
  CustomGetOutputV2Fn_t output_v2;
#endif
} Callbacks;

static void trace(const char* format, const char* a, const char* b, unsigned x, unsigned y) {
  const char* path = getenv("ADDSUB_TRACE");
  if (path == NULL || *path == '\0') return;
  FILE* f = fopen(path, "a");
  if (f == NULL) return;
  if (a != NULL) fprintf(f, format, a, b); else fprintf(f, format, x, y);
  fclose(f);
}

static int initialize(const char* config_bytes, size_t size, int gpu_device_id, void** custom_context) {
  *custom_context = NULL;
  if (gpu_device_id != CUSTOM_NO_GPU_DEVICE) return ADDSUB_GPU;
  ExampleConfig config;
  if (example_read_config(config_bytes, size, &config) || config.input_cnt != 2 || config.output_cnt != 2)
    return ADDSUB_BAD_CONFIG;
  int type = config.input_types[0];
  if ((type != TYPE_INT32 && type != TYPE_FP32) || config.input_types[1] != type ||
      config.output_types[0] != type || config.output_types[1] != type)
    return ADDSUB_BAD_TYPE;
  Context* context = malloc(sizeof(Context));
  if (context == NULL) return ADDSUB_NO_MEMORY;
  context->datatype = type;
  context->batching = config.max_batch_size > 0;
  *custom_context = context;
  return ADDSUB_OK;
}

#ifdef TRTIS_CUSTOM_1X
uint32_t CustomVersion(void) { return 2; }

int CustomInitialize(const CustomInitializeData* data, void** custom_context) {
  if (data->server_parameter_cnt >= SERVER_PARAMETER_CNT)
    trace("init %s %s\n", data->instance_name, data->server_parameters[MODEL_REPOSITORY_PATH], 0, 0);
  return initialize(data->serialized_model_config, data->serialized_model_config_size,
                    data->gpu_device_id, custom_context);
}
#else
int CustomInitialize(const char* serialized_model_config, size_t serialized_model_config_size,
                     int gpu_device_id, void** custom_context) {
  return initialize(serialized_model_config, serialized_model_config_size, gpu_device_id, custom_context);
}
#endif

int CustomFinalize(void* custom_context) {
  free(custom_context);
  return ADDSUB_OK;
}

const char* CustomErrorString(void* custom_context, int errcode) {
  (void)custom_context;
  return errcode >= 0 && errcode < ADDSUB_CODES ? kMessages[errcode] : NULL;
}

static bool next_input(const Callbacks* cb, void* ctx, const char* name, const void** content, uint64_t* size) {
#ifdef TRTIS_CUSTOM_1X
  if (cb->input_v2 != NULL) {
    CustomMemoryType type = CUSTOM_MEMORY_CPU;
    int64_t id = 0;
    return cb->input_v2(ctx, name, content, size, &type, &id) && (*content == NULL || type != CUSTOM_MEMORY_GPU);
  }
#endif
  return cb->input(ctx, name, content, size);
}

static bool get_output(const Callbacks* cb, void* ctx, const char* name, size_t dims, int64_t* shape,
                       uint64_t size, void** content) {
#ifdef TRTIS_CUSTOM_1X
  if (cb->output_v2 != NULL) {
    CustomMemoryType type = CUSTOM_MEMORY_CPU;
    int64_t id = 0;
    return cb->output_v2(ctx, name, dims, shape, size, content, &type, &id) &&
           (*content == NULL || type != CUSTOM_MEMORY_GPU);
  }
#endif
  return cb->output(ctx, name, dims, shape, size, content);
}

/* The whole of input `name` (`size` bytes) into `out`, block by block. */
static int read_input(const Callbacks* cb, void* ctx, const char* name, char* out, uint64_t size) {
  uint64_t got = 0;
  while (got < size) {
    const void* block = NULL;
    uint64_t block_size = size - got;
    if (!next_input(cb, ctx, name, &block, &block_size)) return ADDSUB_INPUT_READ;
    if (block == NULL || block_size > size - got) return ADDSUB_INPUT_READ;
    memcpy(out + got, block, block_size);
    got += block_size;
  }
  return ADDSUB_OK;
}

static int find_input(const CustomPayload* payload, const char* name) {
  for (uint32_t i = 0; i < payload->input_cnt; i++)
    if (strcmp(payload->input_names[i], name) == 0) return (int)i;
  return -1;
}

static int run_payload(const Context* context, const Callbacks* cb, CustomPayload* payload) {
  int in0 = find_input(payload, "INPUT0"), in1 = find_input(payload, "INPUT1");
  if (in0 < 0 || in1 < 0) return ADDSUB_NO_INPUT;
  size_t dims = payload->input_shape_dim_cnts[in0];
  if (dims != payload->input_shape_dim_cnts[in1] || dims > 16) return ADDSUB_BAD_SHAPE;
  uint64_t elements = payload->batch_size;
  int64_t shape[17];
  size_t shape_cnt = 0;
  if (context->batching) shape[shape_cnt++] = payload->batch_size;
  for (size_t d = 0; d < dims; d++) {
    int64_t dim = payload->input_shape_dims[in0][d];
    if (dim != payload->input_shape_dims[in1][d] || dim < 0) return ADDSUB_BAD_SHAPE;
    if (dim != 0 && elements > UINT64_MAX / 4 / (uint64_t)dim) return ADDSUB_BAD_SHAPE;
    elements *= (uint64_t)dim;
    shape[shape_cnt++] = dim;
  }
  uint64_t bytes = elements * 4;
  char* a = malloc(bytes ? bytes : 1);
  char* b = malloc(bytes ? bytes : 1);
  int code = (a == NULL || b == NULL) ? ADDSUB_NO_MEMORY : ADDSUB_OK;
  if (code == ADDSUB_OK) code = read_input(cb, payload->input_context, "INPUT0", a, bytes);
  if (code == ADDSUB_OK) code = read_input(cb, payload->input_context, "INPUT1", b, bytes);
  for (uint32_t o = 0; code == ADDSUB_OK && o < payload->output_cnt; o++) {
    const char* name = payload->required_output_names[o];
    int sum = strcmp(name, "OUTPUT0") == 0;
    if (!sum && strcmp(name, "OUTPUT1") != 0) continue;
    void* out = NULL;
    if (!get_output(cb, payload->output_context, name, shape_cnt, shape, bytes, &out)) {
      code = ADDSUB_OUTPUT_BUFFER;
      break;
    }
    if (out == NULL) continue; /* not wanted */
    if (context->datatype == TYPE_INT32) {
      const int32_t *x = (const int32_t*)a, *y = (const int32_t*)b;
      int32_t* z = out;
      for (uint64_t i = 0; i < elements; i++)
        z[i] = sum ? (int32_t)((uint32_t)x[i] + (uint32_t)y[i]) : (int32_t)((uint32_t)x[i] - (uint32_t)y[i]);
    } else {
      const float *x = (const float*)a, *y = (const float*)b;
      float* z = out;
      for (uint64_t i = 0; i < elements; i++) z[i] = sum ? x[i] + y[i] : x[i] - y[i];
    }
  }
  free(a);
  free(b);
  return code;
}

static int execute(void* custom_context, uint32_t payload_cnt, CustomPayload* payloads, const Callbacks* cb) {
  const Context* context = custom_context;
  unsigned batch = 0;
  for (uint32_t p = 0; p < payload_cnt; p++) {
    batch += payloads[p].batch_size;
    payloads[p].error_code = run_payload(context, cb, &payloads[p]);
  }
  trace("payloads=%u batch=%u\n", NULL, NULL, payload_cnt, batch);
  return ADDSUB_OK;
}

int CustomExecute(void* custom_context, uint32_t payload_cnt, CustomPayload* payloads,
                  CustomGetNextInputFn_t input_fn, CustomGetOutputFn_t output_fn) {
  Callbacks cb = {0};
  cb.input = input_fn;
  cb.output = output_fn;
  return execute(custom_context, payload_cnt, payloads, &cb);
}

#ifdef TRTIS_CUSTOM_1X
int CustomExecuteV2(void* custom_context, uint32_t payload_cnt, CustomPayload* payloads,
                    CustomGetNextInputV2Fn_t input_fn, CustomGetOutputV2Fn_t output_fn) {
  Callbacks cb = {0};
  cb.input_v2 = input_fn;
  cb.output_v2 = output_fn;
  return execute(custom_context, payload_cnt, payloads, &cb);
}
#endif
