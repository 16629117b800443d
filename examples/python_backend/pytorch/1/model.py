"""pytorch (STAND-IN): the I/O of Triton's python_backend "pytorch" example
without PyTorch.

Triton's example computes OUTPUT0 = INPUT0 + INPUT1 and
OUTPUT1 = INPUT0 - INPUT1 with a torch nn.Module; this model computes the
same with numpy, so the BLS examples that call a model named "pytorch"
(bls_sync, bls_async) and Triton's pytorch/client.py work on a machine
without torch. Written for trtis from the documented behaviour.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", np.add(a, b, dtype=np.float32)),
                        pb_utils.Tensor("OUTPUT1", np.subtract(a, b, dtype=np.float32)),
                    ]
                )
            )
        return responses
