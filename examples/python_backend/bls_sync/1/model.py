"""bls_sync: forwards its inputs to another model of the same server.

MODEL_NAME (a one-element BYTES tensor) names the model to call, "add_sub"
or "pytorch"; INPUT0 and INPUT1 go to it unchanged through a blocking BLS
call (InferenceRequest.exec()), and its OUTPUT0 and OUTPUT1 are this
model's answer. BLS calls never raise: a failure comes back as a response
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
            target = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()
            target = target.reshape(-1)[0]
            if isinstance(target, bytes):
                target = target.decode("utf-8")
            call = pb_utils.InferenceRequest(
                model_name=str(target),
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
