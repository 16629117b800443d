"""Ragged batching with Triton's clients: the example model `simple_ragged`
(ONNX Runtime) takes requests of different lengths, batched without padding.
The server flattens the ragged INPUT, adds the batch input OFFSETS
(BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO) and scatters DOUBLED back by each
request's INPUT shape (BATCH_SCATTER_WITH_INPUT_SHAPE); SUM is split by rows.

The test repository copies the example with a long queue delay and a
preferred batch of 4, so four requests sent together always form one batch
(checked in the statistics), however slow the machine.

Run: .venv/bin/python -m pytest tests/python/test_ragged.py -q
"""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from trtis_harness import EXAMPLES, grpc_client_for, running_server

MODEL = "simple_ragged"
LENGTHS = [2, 4, 1, 3]


@pytest.fixture(scope="module")
def ragged_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("trtis_ragged") / "models"
    shutil.copytree(EXAMPLES / MODEL, repo / MODEL)
    config = repo / MODEL / "config.pbtxt"
    text = config.read_text()
    example_batching = "dynamic_batching { max_queue_delay_microseconds: 5000 }"
    assert example_batching in text
    config.write_text(text.replace(
        example_batching,
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 3000000 }",
    ))
    yield from running_server(repo, name="ragged server")


def values(length: int, request: int) -> np.ndarray:
    return (np.arange(length, dtype=np.float32) + 10 * request).reshape(1, length)


def client_for(server, protocol):
    if protocol == "http":
        return httpclient.InferenceServerClient(server.url, network_timeout=60.0)
    return grpc_client_for(server)


def infer(server, protocol: str, data: np.ndarray):
    module = httpclient if protocol == "http" else grpcclient
    client = client_for(server, protocol)
    try:
        inp = module.InferInput("INPUT", list(data.shape), "FP32")
        inp.set_data_from_numpy(data)
        outputs = [module.InferRequestedOutput("SUM"), module.InferRequestedOutput("DOUBLED")]
        result = client.infer(MODEL, [inp], outputs=outputs)
        return result.as_numpy("SUM"), result.as_numpy("DOUBLED")
    finally:
        client.close()


def executions(server) -> dict[int, int]:
    client = httpclient.InferenceServerClient(server.url)
    try:
        stats = client.get_inference_statistics(MODEL)["model_stats"][0]
    finally:
        client.close()
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_requests_of_different_lengths_batch_and_each_gets_its_own_answer(ragged_server, protocol):
    before = executions(ragged_server)
    answers: dict[int, tuple] = {}
    errors: list[BaseException] = []

    def run(i: int, length: int):
        try:
            answers[i] = infer(ragged_server, protocol, values(length, i))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, n)) for i, n in enumerate(LENGTHS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for i, length in enumerate(LENGTHS):
        total, doubled = answers[i]
        data = values(length, i)
        assert total.shape == (1, 1)
        assert total[0, 0] == data.sum(), f"request {i} got another's sum"
        assert doubled.shape == (1, length)
        np.testing.assert_array_equal(doubled, data * 2)
    after = executions(ragged_server)
    assert after.get(4, 0) - before.get(4, 0) == 1, f"no batch of 4 formed: {before} -> {after}"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_lone_request_is_answered_after_the_delay(ragged_server, protocol):
    data = values(5, 7)
    total, doubled = infer(ragged_server, protocol, data)
    assert total[0, 0] == data.sum()
    np.testing.assert_array_equal(doubled, data * 2)
