"""bls_decoupled_sync: sums the responses of a decoupled model.

For IN = [n] it calls square_int32 (decoupled: n responses, each OUT = [n])
with exec(decoupled=True), which returns an iterator over the responses
that ends after square_int32's final flag (the last item may carry no
tensors), and answers SUM = the sum of all OUT values, n * n.

A model for Triton's Python backend (it runs unchanged under Triton and
trtis); written for trtis from the example's documented behaviour.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def total_of(responses):
    """Sum of OUT over an iterator of BLS responses; raises on an error."""
    total = 0
    for response in responses:
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        out = pb_utils.get_output_tensor_by_name(response, "OUT")
        if out is not None:  # the flag-only last response has no tensors
            total += int(out.as_numpy().sum())
    return total


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.sum_type = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "SUM")["data_type"]
        )

    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="square_int32",
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["OUT"],
            )
            total = total_of(call.exec(decoupled=True))
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("SUM", np.array([total], dtype=self.sum_type))
                    ]
                )
            )
        return responses
