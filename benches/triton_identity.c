/* trtis's own minimal identity backend for Triton 2.51 (TRITONBACKEND API
 * 1.x), a bench helper only: it lets `scripts/bench.sh serve` run Triton's
 * server beside trtis on the same identity model, in the same run. Each
 * request's INPUTn is copied to OUTPUTn (same datatype and shape), one
 * response per request, with the per-request and per-batch statistics a
 * backend reports. It does less than Triton's own identity backend (no
 * config checks, no GPU, no request parameters), so Triton's figures with
 * it are, if anything, leaner than Triton's with its own.
 * scripts/setup-triton.sh builds it into the backend directory as
 * identity/libtriton_identity.so. The prototypes are the C API's, declared
 * here rather than taken from Triton's headers (which are not a dependency);
 * a TRITONSERVER_Error* of NULL is success, and errors are ignored (a
 * bench model that fails shows as failed requests in perf_analyzer). */
#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef int TRITONSERVER_DataType;
typedef int TRITONSERVER_MemoryType;
extern TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request*, uint32_t*);
extern TRITONSERVER_Error* TRITONBACKEND_RequestInputByIndex(TRITONBACKEND_Request*, uint32_t, TRITONBACKEND_Input**);
extern TRITONSERVER_Error* TRITONBACKEND_InputProperties(TRITONBACKEND_Input*, const char**, TRITONSERVER_DataType*, const int64_t**, uint32_t*, uint64_t*, uint32_t*);
extern TRITONSERVER_Error* TRITONBACKEND_InputBuffer(TRITONBACKEND_Input*, uint32_t, const void**, uint64_t*, TRITONSERVER_MemoryType*, int64_t*);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response**, TRITONBACKEND_Request*);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response*, TRITONBACKEND_Output**, const char*, TRITONSERVER_DataType, const int64_t*, uint32_t);
extern TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output*, void**, uint64_t, TRITONSERVER_MemoryType*, int64_t*);
extern TRITONSERVER_Error* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response*, uint32_t, TRITONSERVER_Error*);
extern TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request*, uint32_t);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance*, TRITONBACKEND_Request*, bool, uint64_t, uint64_t, uint64_t, uint64_t);
extern TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance*, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

static uint64_t now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }

__attribute__((visibility("default")))
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* inst, TRITONBACKEND_Request** reqs, const uint32_t n) {
  uint64_t start = now(), batch = 0;
  for (uint32_t r = 0; r < n; r++) {
    TRITONBACKEND_Response* resp = 0;
    TRITONBACKEND_ResponseNew(&resp, reqs[r]);
    uint32_t count = 0;
    TRITONBACKEND_RequestInputCount(reqs[r], &count);
    for (uint32_t i = 0; i < count; i++) {
      TRITONBACKEND_Input* in; const char* name; TRITONSERVER_DataType dt; const int64_t* shape; uint32_t dims, bufs; uint64_t size;
      TRITONBACKEND_RequestInputByIndex(reqs[r], i, &in);
      TRITONBACKEND_InputProperties(in, &name, &dt, &shape, &dims, &size, &bufs);
      if (i == 0 && dims > 0) batch += shape[0];
      char oname[64] = "OUTPUT";
      strncat(oname, name + 5, sizeof oname - 7);
      TRITONBACKEND_Output* out; void* dst; TRITONSERVER_MemoryType mt = 0; int64_t mid = 0;
      TRITONBACKEND_ResponseOutput(resp, &out, oname, dt, shape, dims);
      TRITONBACKEND_OutputBuffer(out, &dst, size, &mt, &mid);
      uint64_t off = 0;
      for (uint32_t b = 0; b < bufs; b++) {
        const void* src; uint64_t bs; TRITONSERVER_MemoryType smt = 0; int64_t sid = 0;
        TRITONBACKEND_InputBuffer(in, b, &src, &bs, &smt, &sid);
        memcpy((char*)dst + off, src, bs); off += bs;
      }
    }
    TRITONBACKEND_ResponseSend(resp, 1, 0);
  }
  uint64_t end = now();
  for (uint32_t r = 0; r < n; r++) {
    TRITONBACKEND_ModelInstanceReportStatistics(inst, reqs[r], true, start, start, end, end);
    TRITONBACKEND_RequestRelease(reqs[r], 1);
  }
  TRITONBACKEND_ModelInstanceReportBatchStatistics(inst, batch, start, start, end, end);
  return 0;
}
