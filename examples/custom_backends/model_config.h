/* model_config.h: the few fields of a serialized ModelConfig (binary
 * protobuf, as CustomInitialize receives it) that the example backends
 * need, read with a minimal protobuf walker: max_batch_size (field 4), and
 * of each input (field 5) and output (field 6) its data_type (field 2).
 * A real backend would use a protobuf library; the examples stay plain C. */
#ifndef TRTIS_EXAMPLE_MODEL_CONFIG_H
#define TRTIS_EXAMPLE_MODEL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define EXAMPLE_MAX_TENSORS 8
#define TYPE_INT32 8
#define TYPE_FP32 11

typedef struct {
  int max_batch_size;
  int input_cnt;
  int output_cnt;
  int input_types[EXAMPLE_MAX_TENSORS];
  int output_types[EXAMPLE_MAX_TENSORS];
} ExampleConfig;

static int example_varint(const uint8_t** p, const uint8_t* end, uint64_t* out) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t byte = *(*p)++;
    value |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80)) {
      *out = value;
      return 0;
    }
  }
  return -1;
}

/* Skips a field of wire type `wire`; -1 on malformed input. */
static int example_skip(const uint8_t** p, const uint8_t* end, int wire) {
  uint64_t n;
  switch (wire) {
    case 0: return example_varint(p, end, &n);
    case 1: if (end - *p < 8) return -1; *p += 8; return 0;
    case 2:
      if (example_varint(p, end, &n) || (uint64_t)(end - *p) < n) return -1;
      *p += n;
      return 0;
    case 5: if (end - *p < 4) return -1; *p += 4; return 0;
    default: return -1;
  }
}

/* data_type (field 2) of a ModelInput/ModelOutput message. */
static int example_tensor_type(const uint8_t* p, const uint8_t* end) {
  int type = 0;
  while (p < end) {
    uint64_t key, v;
    if (example_varint(&p, end, &key)) return -1;
    if (key == ((2 << 3) | 0)) {
      if (example_varint(&p, end, &v)) return -1;
      type = (int)v;
    } else if (example_skip(&p, end, (int)(key & 7))) {
      return -1;
    }
  }
  return type;
}

/* 0 on success, -1 if the bytes are not a ModelConfig this reader follows. */
static int example_read_config(const char* bytes, size_t size, ExampleConfig* config) {
  const uint8_t* p = (const uint8_t*)bytes;
  const uint8_t* end = p + size;
  *config = (ExampleConfig){0};
  while (p < end) {
    uint64_t key, v;
    if (example_varint(&p, end, &key)) return -1;
    int field = (int)(key >> 3), wire = (int)(key & 7);
    if (field == 4 && wire == 0) {
      if (example_varint(&p, end, &v)) return -1;
      config->max_batch_size = (int)v;
    } else if ((field == 5 || field == 6) && wire == 2) {
      if (example_varint(&p, end, &v) || (uint64_t)(end - p) < v) return -1;
      int type = example_tensor_type(p, p + v);
      p += v;
      int* count = field == 5 ? &config->input_cnt : &config->output_cnt;
      int* types = field == 5 ? config->input_types : config->output_types;
      if (type < 0 || *count >= EXAMPLE_MAX_TENSORS) return -1;
      types[(*count)++] = type;
    } else if (example_skip(&p, end, wire)) {
      return -1;
    }
  }
  return 0;
}

#endif
