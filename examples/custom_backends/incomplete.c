/* incomplete: a library that lacks CustomExecute; a model using it must
 * fail to load (and validate-config must say so) naming the symbol. */
#include "custom.h"

int CustomInitialize(const char* bytes, size_t size, int gpu_device_id, void** custom_context) {
  (void)bytes;
  (void)size;
  (void)gpu_device_id;
  *custom_context = 0;
  return 0;
}

int CustomFinalize(void* custom_context) {
  (void)custom_context;
  return 0;
}

const char* CustomErrorString(void* custom_context, int errcode) {
  (void)custom_context;
  (void)errcode;
  return "incomplete";
}
