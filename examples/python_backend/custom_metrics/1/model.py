"""custom_metrics: add and subtract, and count the time it takes.

initialize() makes the counter family requests_process_latency_ns
("Cumulative time spent processing requests") and, in it, the metric
labelled with this model's name and version. execute() computes
OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1 for each request,
adds the nanoseconds that took to the counter, and logs the running total
with pb_utils.Logger. The server shows the counter on /metrics as

    # HELP requests_process_latency_ns Cumulative time spent processing requests
    # TYPE requests_process_latency_ns counter
    requests_process_latency_ns{model="custom_metrics",version="1"} <ns>

A model for Triton's Python backend (it runs unchanged under Triton and
trtis); written for trtis from the example's documented behaviour.
"""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(
            name="requests_process_latency_ns",
            description="Cumulative time spent processing requests",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.latency = self.family.Metric(
            labels={"model": args["model_name"], "version": args["model_version"]}
        )

    def execute(self, requests):
        started = time.perf_counter_ns()
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
        self.latency.increment(time.perf_counter_ns() - started)
        pb_utils.Logger.log_info(
            "Cumulative requests processing latency: {}".format(self.latency.value())
        )
        return responses
