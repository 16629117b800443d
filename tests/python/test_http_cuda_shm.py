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


def test_cuda_shared_memory_without_gpu_grpc(grpc_client):
    with pytest.raises(InferenceServerException) as e:
        grpc_client.register_cuda_shared_memory("gpu_region", HANDLE, 0, 1024)
    assert "INVALID_ARGUMENT" in e.value.status()
    assert "GPUs not supported" in e.value.message()
    assert len(grpc_client.get_cuda_shared_memory_status().regions) == 0
    grpc_client.unregister_cuda_shared_memory()
