"""KIND_GPU instances through Triton's own clients, on a machine with an
NVIDIA GPU (marked `gpu`: scripts/test-gpu.sh runs them; elsewhere they
are skipped). The example classifier on CUDA, two instances per GPU,
answers a concurrent load of batches with the CPU's scores."""

from __future__ import annotations

import re
import shutil
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from trtis_harness import EXAMPLES, grpc_client_for, running_server

pytestmark = pytest.mark.gpu


def _classifier_repo(path, instance_group):
    shutil.copytree(EXAMPLES / "efficientnet_lite0", path / "efficientnet_lite0")
    config = path / "efficientnet_lite0" / "config.pbtxt"
    text = re.sub(r"instance_group \[.*?\]\n", instance_group + "\n", config.read_text(), flags=re.S)
    config.write_text(text)
    return path


def _scores(client, batch):
    i = grpcclient.InferInput("input", list(batch.shape), "FP32")
    i.set_data_from_numpy(batch)
    return client.infer("efficientnet_lite0", [i]).as_numpy("output")


def test_the_classifier_on_two_gpu_instances_scores_as_on_the_cpu(tmp_path):
    rng = np.random.default_rng(5)
    batches = [rng.standard_normal((n, 3, 224, 224), dtype=np.float32) for n in (1, 8, 3, 8)]
    cpu_repo = _classifier_repo(tmp_path / "cpu", "instance_group [ { kind: KIND_CPU count: 1 } ]")
    gpu_repo = _classifier_repo(tmp_path / "gpu", "instance_group [ { kind: KIND_GPU count: 2 } ]")
    for server in running_server(cpu_repo, name="CPU server"):
        client = grpc_client_for(server)
        want = [_scores(client, b) for b in batches]
    for server in running_server(gpu_repo, name="GPU server"):
        client = grpc_client_for(server)
        # Concurrent requests, so both instances run.
        results = []
        pending = []
        for b in batches * 4:
            i = grpcclient.InferInput("input", list(b.shape), "FP32")
            i.set_data_from_numpy(b)
            pending.append(client.async_infer("efficientnet_lite0", [i], lambda r, e: results.append((r, e))))
        deadline = time.time() + 120
        while len(results) < len(pending) and time.time() < deadline:
            time.sleep(0.05)
        assert len(results) == len(pending)
        assert all(e is None for _, e in results), [e for _, e in results if e]
        for b, w in zip(batches, want):
            got = _scores(client, b)
            np.testing.assert_allclose(got, w, atol=0.05)
            np.testing.assert_array_equal(np.argmax(got, axis=1), np.argmax(w, axis=1))
