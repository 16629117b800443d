"""add_sub: OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1.

A model for Triton's Python backend (it runs unchanged under Triton and
trtis): execute() gets the list of requests the scheduler formed and
returns one InferenceResponse per request.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.types = {}
        for name in ("OUTPUT0", "OUTPUT1"):
            output = pb_utils.get_output_config_by_name(config, name)
            self.types[name] = pb_utils.triton_string_to_numpy(output["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [
                pb_utils.Tensor("OUTPUT0", (a + b).astype(self.types["OUTPUT0"])),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(self.types["OUTPUT1"])),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("add_sub: finalized")
