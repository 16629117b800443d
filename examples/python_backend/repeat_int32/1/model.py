"""repeat_int32: a decoupled model that streams its input back one element
at a time.

For a request with IN = [v0, v1, ...] and DELAY = [d0, d1, ...] (same shape)
it sends len(IN) responses, the i-th after sleeping d_i milliseconds, with
OUT = [v_i] and IDX = [i], then the final flag. The responses go out from a
thread of their own; execute() itself sleeps WAIT milliseconds and returns,
so with WAIT shorter than the sum of DELAY the instance takes the next
request while the previous one is still answering.

A model for Triton's Python backend (it runs unchanged under Triton and
trtis); written for trtis from the example's documented behaviour.
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                "model '{}' sends any number of responses per request: it needs "
                "model_transaction_policy {{ decoupled: true }}".format(args["model_name"])
            )
        self.out_type = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUT")["data_type"]
        )
        self.idx_type = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "IDX")["data_type"]
        )
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.busy = 0

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            if values.shape != delays.shape:
                error = pb_utils.TritonError(
                    "IN and DELAY must have the same shape, got {} and {}".format(
                        list(values.shape), list(delays.shape)
                    ),
                    pb_utils.TritonError.INVALID_ARG,
                )
                sender.send(
                    pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            # Copies: the request's tensors are not ours once execute returns.
            values = values.reshape(-1).copy()
            delays = delays.reshape(-1).copy()
            with self.lock:
                self.busy += 1
            threading.Thread(
                target=self.stream, args=(sender, values, delays), daemon=True
            ).start()
            time.sleep(float(wait.reshape(-1)[0]) / 1000.0)
        return None

    def stream(self, sender, values, delays):
        try:
            for i, (value, delay) in enumerate(zip(values, delays)):
                time.sleep(float(delay) / 1000.0)
                outputs = [
                    pb_utils.Tensor("OUT", np.array([value], dtype=self.out_type)),
                    pb_utils.Tensor("IDX", np.array([i], dtype=self.idx_type)),
                ]
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            with self.lock:
                self.busy -= 1
                self.idle.notify_all()

    def finalize(self):
        # Let every request still streaming finish before the model goes.
        with self.lock:
            self.idle.wait_for(lambda: self.busy == 0, timeout=30.0)
