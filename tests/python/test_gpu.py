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


def test_cuda_shared_memory_with_tritonclients_utilities(tmp_path):
    # Triton's simple_http/grpc_cudashm_client, in short: inputs and outputs
    # of the `simple` model (ONNX, on the CPU: the region's device is the
    # client's choice) in CUDA memory the client shares by IPC handle.
    import tritonclient.http as httpclient
    import tritonclient.utils.cuda_shared_memory as cudashm

    repo = tmp_path / "models"
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    size = a.nbytes
    for server in running_server(repo, name="CUDA shm server"):
        for client, module in [(httpclient.InferenceServerClient(server.url), httpclient),
                               (grpc_client_for(server), grpcclient)]:
            regions = {n: cudashm.create_shared_memory_region(n, size * (2 if n == "in" else 2), 0)
                       for n in ("in", "out")}
            try:
                cudashm.set_shared_memory_region(regions["in"], [a, b])
                for n, h in regions.items():
                    client.register_cuda_shared_memory(n, cudashm.get_raw_handle(h), 0, size * 2)
                status = client.get_cuda_shared_memory_status()
                names = {r["name"] for r in status} if isinstance(status, list) else set(status.regions)
                assert names == {"in", "out"}, status
                inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
                inputs[0].set_shared_memory("in", size)
                inputs[1].set_shared_memory("in", size, offset=size)
                outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
                outputs[0].set_shared_memory("out", size)
                outputs[1].set_shared_memory("out", size, offset=size)
                client.infer("simple", inputs, outputs=outputs)
                got = cudashm.get_contents_as_numpy(regions["out"], np.int32, [2, 16])
                np.testing.assert_array_equal(got[0], (a + b)[0])
                np.testing.assert_array_equal(got[1], (a - b)[0])
                # Past the registered size: refused as for system shared memory.
                inputs[0].set_shared_memory("in", size, offset=size * 2)
                with pytest.raises(Exception) as e:
                    client.infer("simple", inputs, outputs=outputs)
                assert "Invalid offset" in str(e.value), str(e.value)
            finally:
                client.unregister_cuda_shared_memory()
                for h in regions.values():
                    cudashm.destroy_shared_memory_region(h)
