"""bls_async: two BLS calls in flight at once.

execute() is a coroutine: for each request it starts one call to "pytorch"
and one to "add_sub" with InferenceRequest.async_exec(), waits for both
with asyncio.gather, and answers with OUTPUT0 taken from pytorch's
response and OUTPUT1 from add_sub's (both models compute the sum and the
difference, so the answer is INPUT0 + INPUT1 and INPUT0 - INPUT1).

A model for Triton's Python backend (it runs unchanged under Triton and
trtis); written for trtis from the example's documented behaviour.
"""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [
                pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                pb_utils.get_input_tensor_by_name(request, "INPUT1"),
            ]
            calls = [
                pb_utils.InferenceRequest(
                    model_name=model,
                    inputs=inputs,
                    requested_output_names=["OUTPUT0", "OUTPUT1"],
                ).async_exec()
                for model in ("pytorch", "add_sub")
            ]
            from_pytorch, from_add_sub = await asyncio.gather(*calls)
            for answer in (from_pytorch, from_add_sub):
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.get_output_tensor_by_name(from_pytorch, "OUTPUT0"),
                        pb_utils.get_output_tensor_by_name(from_add_sub, "OUTPUT1"),
                    ]
                )
            )
        return responses
