"""square_int32: a decoupled model. For an input N it sends N responses,
each OUT = N, from a thread of its own after execute() has returned, then
the final flag.

A model for Triton's Python backend (it runs unchanged under Triton and
trtis).
"""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            thread = threading.Thread(target=self.answer, args=(sender, n), daemon=True)
            thread.start()
            self.threads.append(thread)
        return None

    def answer(self, sender, n):
        for _ in range(n):
            out = pb_utils.Tensor("OUT", np.array([n], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
