/* faulty: a custom backend that misbehaves on purpose, for the tests. One
 * input INPUT0 (INT32 [1]) and one output OUTPUT0 (INT32 [1]); what a
 * request gets depends on its INPUT0:
 *   negative  the payload fails (error_code, "faulty: negative input");
 *   1000      asks for a buffer 4 bytes larger than OUTPUT0 holds and, when
 *             refused, fails the payload;
 *   2000      asks for a buffer for an output the config does not have,
 *             ignores the refusal and writes OUTPUT0 (the server still
 *             fails the request: the library misused the API);
 *   3000      CustomExecute fails as a whole (every request of the batch);
 *   else      OUTPUT0 = INPUT0. */
#include <string.h>

#include "custom.h"

enum { FAULTY_OK = 0, FAULTY_NEGATIVE, FAULTY_BUFFER, FAULTY_BATCH, FAULTY_INPUT, FAULTY_CODES };

static const char* const kMessages[FAULTY_CODES] = {
    "success",
    "faulty: negative input",
    "faulty: the server refused the output buffer",
    "faulty: the whole batch fails",
    "faulty: no INPUT0",
};

static int context_token;

int CustomInitialize(const char* bytes, size_t size, int gpu_device_id, void** custom_context) {
  (void)bytes;
  (void)size;
  (void)gpu_device_id;
  *custom_context = &context_token;
  return FAULTY_OK;
}

int CustomFinalize(void* custom_context) {
  return custom_context == &context_token ? FAULTY_OK : FAULTY_INPUT;
}

const char* CustomErrorString(void* custom_context, int errcode) {
  (void)custom_context;
  return errcode > 0 && errcode < FAULTY_CODES ? kMessages[errcode] : NULL;
}

int CustomExecute(void* custom_context, uint32_t payload_cnt, CustomPayload* payloads,
                  CustomGetNextInputFn_t input_fn, CustomGetOutputFn_t output_fn) {
  (void)custom_context;
  int32_t values[64];
  for (uint32_t p = 0; p < payload_cnt && p < 64; p++) {
    const void* block = NULL;
    uint64_t size = sizeof(int32_t);
    values[p] = 0;
    if (input_fn(payloads[p].input_context, "INPUT0", &block, &size) && block != NULL && size == 4)
      memcpy(&values[p], block, 4);
    if (values[p] == 3000) return FAULTY_BATCH;
  }
  for (uint32_t p = 0; p < payload_cnt && p < 64; p++) {
    CustomPayload* payload = &payloads[p];
    int32_t value = values[p];
    int64_t shape[2] = {payload->batch_size, 1};
    void* out = NULL;
    if (value < 0) {
      payload->error_code = FAULTY_NEGATIVE;
      continue;
    }
    if (value == 1000) {
      if (!output_fn(payload->output_context, "OUTPUT0", 2, shape, 8, &out)) {
        payload->error_code = FAULTY_BUFFER;
        continue;
      }
    }
    if (value == 2000) {
      void* ignored = NULL;
      (void)output_fn(payload->output_context, "NOT_AN_OUTPUT", 2, shape, 4, &ignored);
    }
    if (!output_fn(payload->output_context, "OUTPUT0", 2, shape, 4, &out)) {
      payload->error_code = FAULTY_BUFFER;
      continue;
    }
    if (out != NULL) memcpy(out, &value, 4);
  }
  return FAULTY_OK;
}
