"""bls_decoupled_async: two decoupled BLS calls in flight at once.

For IN = [n] it starts two calls to square_int32 (decoupled: n responses,
each OUT = [n]) with async_exec(decoupled=True), awaits both with
asyncio.gather (each gives an iterator over that call's responses) and
answers SUM = the sum of every OUT of both calls, 2 * n * n.

A model for Triton's Python backend (it runs unchanged under Triton and
trtis); written for trtis from the example's documented behaviour.
"""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.sum_type = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "SUM")["data_type"]
        )

    async def execute(self, requests):
        responses = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "IN")
            calls = [
                pb_utils.InferenceRequest(
                    model_name="square_int32", inputs=[n], requested_output_names=["OUT"]
                ).async_exec(decoupled=True)
                for _ in range(2)
            ]
            total = 0
            for stream in await asyncio.gather(*calls):
                for response in stream:
                    if response.has_error():
                        raise pb_utils.TritonModelException(response.error().message())
                    out = pb_utils.get_output_tensor_by_name(response, "OUT")
                    if out is not None:  # the flag-only last response has no tensors
                        total += int(out.as_numpy().sum())
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("SUM", np.array([total], dtype=self.sum_type))
                    ]
                )
            )
        return responses
