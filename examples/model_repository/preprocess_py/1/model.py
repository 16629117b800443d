"""preprocess_py: UINT8 HWC images to FP32 NCHW scaled to [-1, 1].

A model for Triton's Python backend (it runs unchanged under Triton and
trtis). Each request of the batch keeps its own images, [batch, 224, 224, 3].
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            scaled = images.astype(np.float32) / 127.5 - 1.0
            nchw = np.ascontiguousarray(scaled.transpose(0, 3, 1, 2))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("INPUT", nchw)]))
        return responses
