/* sequence: a stateful custom backend for the sequence batcher (direct
 * strategy). Inputs: INPUT (INT32 [1]) and the control inputs START and
 * READY (INT32 [1], the config's CONTROL_SEQUENCE_START/READY with
 * int32_false_true [0, 1]); output OUTPUT (INT32 [1]): the running sum of
 * the sequence's INPUTs. The sum is kept per batch slot, which is the
 * payload's index in CustomExecute: the sequence batcher keeps a sequence
 * in one slot from its start to its end. A payload with READY 0 is an
 * empty slot: no request waits for it, and it leaves the slot's sum alone.
 * (A request cancelled before its batch ran is left out of CustomExecute,
 * which shifts the later payloads: a library that must survive that keys
 * its state by the CORRID control input instead.) */
#include <stdlib.h>
#include <string.h>

#include "custom.h"
#include "model_config.h"

enum { SEQ_OK = 0, SEQ_BAD_CONFIG, SEQ_NO_INPUT, SEQ_INPUT_READ, SEQ_OUTPUT_BUFFER, SEQ_SLOT, SEQ_NO_MEMORY, SEQ_CODES };

static const char* const kMessages[SEQ_CODES] = {
    "success",
    "sequence: the model must batch (max_batch_size > 0) and have INT32 inputs",
    "sequence: a request lacks INPUT, START or READY",
    "sequence: the server could not hand over an input",
    "sequence: the server refused an output buffer",
    "sequence: more payloads than batch slots",
    "sequence: out of memory",
};

typedef struct {
  int slots;
  int32_t sums[];
} Context;

int CustomInitialize(const char* bytes, size_t size, int gpu_device_id, void** custom_context) {
  *custom_context = NULL;
  ExampleConfig config;
  if (gpu_device_id != CUSTOM_NO_GPU_DEVICE || example_read_config(bytes, size, &config) ||
      config.max_batch_size <= 0 || config.input_cnt < 1 || config.input_types[0] != TYPE_INT32)
    return SEQ_BAD_CONFIG;
  Context* context = calloc(1, sizeof(Context) + sizeof(int32_t) * (size_t)config.max_batch_size);
  if (context == NULL) return SEQ_NO_MEMORY;
  context->slots = config.max_batch_size;
  *custom_context = context;
  return SEQ_OK;
}

int CustomFinalize(void* custom_context) {
  free(custom_context);
  return SEQ_OK;
}

const char* CustomErrorString(void* custom_context, int errcode) {
  (void)custom_context;
  return errcode >= 0 && errcode < SEQ_CODES ? kMessages[errcode] : NULL;
}

static int read_int(void* ctx, CustomGetNextInputFn_t input_fn, const char* name, int32_t* value) {
  const void* block = NULL;
  uint64_t size = sizeof(int32_t);
  if (!input_fn(ctx, name, &block, &size)) return SEQ_NO_INPUT;
  if (block == NULL || size != sizeof(int32_t)) return SEQ_INPUT_READ;
  memcpy(value, block, sizeof(int32_t));
  return SEQ_OK;
}

int CustomExecute(void* custom_context, uint32_t payload_cnt, CustomPayload* payloads,
                  CustomGetNextInputFn_t input_fn, CustomGetOutputFn_t output_fn) {
  Context* context = custom_context;
  for (uint32_t slot = 0; slot < payload_cnt; slot++) {
    CustomPayload* payload = &payloads[slot];
    int32_t input = 0, start = 0, ready = 0;
    int code = (int)slot < context->slots ? SEQ_OK : SEQ_SLOT;
    if (code == SEQ_OK) code = read_int(payload->input_context, input_fn, "READY", &ready);
    if (code == SEQ_OK && ready) code = read_int(payload->input_context, input_fn, "START", &start);
    if (code == SEQ_OK && ready) code = read_int(payload->input_context, input_fn, "INPUT", &input);
    if (code == SEQ_OK && ready) {
      if (start) context->sums[slot] = 0;
      /* Wrapping, as INT32 arithmetic in the server's other backends. */
      context->sums[slot] = (int32_t)((uint32_t)context->sums[slot] + (uint32_t)input);
    }
    for (uint32_t o = 0; code == SEQ_OK && o < payload->output_cnt; o++) {
      int64_t shape[2] = {1, 1};
      void* out = NULL;
      if (!output_fn(payload->output_context, payload->required_output_names[o], 2, shape, sizeof(int32_t), &out))
        code = SEQ_OUTPUT_BUFFER;
      else if (out != NULL)
        memcpy(out, &context->sums[slot < (uint32_t)context->slots ? slot : 0], sizeof(int32_t));
    }
    payload->error_code = code;
  }
  return SEQ_OK;
}
