"""CUDA shared memory on a server without GPU support: registration fails
clearly with Triton's CPU-only message, status lists nothing, unregister is a
no-op (HTTP and gRPC)."""

import pytest
from tritonclient.utils import InferenceServerException

HANDLE = b"\0" * 64  # a CUDA IPC handle is 64 bytes


def test_cuda_shared_memory_without_gpu_http(client):
    with pytest.raises(InferenceServerException) as e:
        client.register_cuda_shared_memory("gpu_region", HANDLE, 0, 1024)
    assert "failed to register CUDA shared memory region: 'gpu_region', GPUs not supported" in e.value.message()
    assert client.get_cuda_shared_memory_status() == []
    client.unregister_cuda_shared_memory()
    assert client.is_server_ready()
    assert "cuda_shared_memory" not in client.get_server_metadata()["extensions"]


def test_cuda_shared_memory_without_gpu_grpc(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.register_cuda_shared_memory("gpu_region", HANDLE, 0, 1024)
    assert "INVALID_ARGUMENT" in e.value.status()
    assert "GPUs not supported" in e.value.message()
    assert len(grpc_client.get_cuda_shared_memory_status().regions) == 0
    grpc_client.unregister_cuda_shared_memory()


def test_cuda_shared_memory_with_a_gpu_but_no_driver(tmp_path):
    # A (simulated) GPU: registration is tried, and fails with the reason:
    # here there is no CUDA driver to open the handle. A device this server
    # does not use and a handle of the wrong size are refused first. Over
    # HTTP (handle in base64) and gRPC (raw bytes), as tritonclient sends it.
    import base64

    import tritonclient.http as httpclient

    from trtis_harness import _write_identity, grpc_client_for, running_server

    repo = tmp_path / "models"
    repo.mkdir()
    _write_identity(repo, "idn", "TYPE_FP32")
    handle = base64.b64encode(HANDLE)
    for server in running_server(repo, name="one-GPU server", env={"TRTIS_GPU_COUNT": "1"}):
        for client in (httpclient.InferenceServerClient(server.url), grpc_client_for(server)):
            for args, want in [
                ((handle, 0, 1024), "failed to register CUDA shared memory region 'r': no CUDA driver"),
                ((handle, 3, 1024), "failed to register CUDA shared memory region 'r': device 3 is not a GPU this server uses (its GPUs: 0)"),
                ((base64.b64encode(b"\1" * 10), 0, 1024), "a CUDA IPC handle is 64 bytes, this one is 10"),
            ]:
                with pytest.raises(InferenceServerException) as e:
                    client.register_cuda_shared_memory("r", *args)
                assert want in e.value.message(), e.value.message()
            status = client.get_cuda_shared_memory_status()
            assert (status == [] if isinstance(status, list) else len(status.regions) == 0), status
        # With a GPU, server metadata lists the extension.
        meta = httpclient.InferenceServerClient(server.url).get_server_metadata()
        assert "cuda_shared_memory" in meta["extensions"], meta
