"""text_embedding: text embeddings by feature hashing, NOT a learned model.
Each lower-cased word and each character trigram of the text adds 1 to one
of 64 dimensions (its CRC-32 modulo 64; the sign from one more bit), and
the vector is L2-normalized, so texts that share words and spellings point
the same way. It exists to show /v1/embeddings without a download.

Input `text_input` [batch, 1]; outputs `embedding` [batch, 64] (FP32) and
`num_input_tokens` [batch, 1] (the words of each text)."""

import re
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

DIM = 64


def embed(text):
    v = np.zeros(DIM, dtype=np.float32)
    words = re.findall(r"\w+", text.lower())
    features = words + [text.lower()[i : i + 3] for i in range(max(len(text) - 2, 0))]
    for f in features:
        h = zlib.crc32(f.encode("utf-8"))
        v[h % DIM] += 1.0 if (h >> 16) & 1 else -1.0
    norm = float(np.linalg.norm(v))
    return (v / norm if norm else v), len(words)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)
            vectors, counts = [], []
            for t in texts:
                v, n = embed(t.decode("utf-8") if isinstance(t, bytes) else str(t))
                vectors.append(v)
                counts.append([n])
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("embedding", np.stack(vectors).astype(np.float32)),
                        pb_utils.Tensor("num_input_tokens", np.array(counts, dtype=np.int32)),
                    ]
                )
            )
        return responses
