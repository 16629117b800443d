"""batch_auto_complete: a batching model with no config.pbtxt.

Its auto_complete_config() gives the server what a config file would:
max_batch_size 4 with dynamic batching, FP32 inputs INPUT0 and INPUT1 of
dims [4] and FP32 outputs OUTPUT0 and OUTPUT1 of dims [4] (each request is
then [batch, 4]). The server runs it before loading the model, in a process
of its own, and GET /v2/models/batch_auto_complete/config then shows the
completed config. execute() gets the requests the dynamic batcher put
together, each with its own tensors, and answers each with
OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1.

A model for Triton's Python backend (it runs unchanged under Triton and
trtis); written for trtis from the auto_complete example's documented
behaviour.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

MAX_BATCH_SIZE = 4
INPUTS = [
    {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
    {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
]
OUTPUTS = [
    {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
    {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
]


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        have_inputs = {entry["name"] for entry in config.get("input", [])}
        have_outputs = {entry["name"] for entry in config.get("output", [])}
        # A config.pbtxt, when there is one, wins; fill in only what is missing.
        for entry in INPUTS:
            if entry["name"] not in have_inputs:
                auto_complete_model_config.add_input(entry)
        for entry in OUTPUTS:
            if entry["name"] not in have_outputs:
                auto_complete_model_config.add_output(entry)
        # A config file may ask for a smaller batch, never a larger one
        # (set_max_batch_size raises ValueError for that).
        current = config.get("max_batch_size") or 0
        if current == 0 or current > MAX_BATCH_SIZE:
            auto_complete_model_config.set_max_batch_size(MAX_BATCH_SIZE)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

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
