"""bls_sync: forwards its inputs to another model of the same server.

MODEL_NAME (a one-element BYTES tensor) names the model to call, "add_sub"
or "pytorch"; its element (bytes) goes to InferenceRequest as it is.
INPUT0 and INPUT1 go to that model unchanged through a blocking BLS call
(InferenceRequest.exec()), and its OUTPUT0 and OUTPUT1 are this model's
answer. BLS calls never raise: a failure comes back as a response
with has_error(), and this model turns it into an exception, so the client
sees the server's text, e.g. for an unknown model "... Model
'undefined_model' is not ready."

A model for Triton's Python backend (it runs unchanged under Triton and
trtis); written for trtis from the example's documented behaviour.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            # The name as the client sent it: a bytes item of the BYTES
            # tensor, passed on undecoded (pb_utils takes bytes or str
            # wherever it takes a name, as Triton's does).
            target = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
            call = pb_utils.InferenceRequest(
                model_name=target,
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
                requested_output_names=["OUTPUT0", "OUTPUT1"],
            )
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.get_output_tensor_by_name(answer, "OUTPUT0"),
                        pb_utils.get_output_tensor_by_name(answer, "OUTPUT1"),
                    ]
                )
            )
        return responses
