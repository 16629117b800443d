"""Shutdown: SIGINT ends `trtis serve` with exit code 0 within 10 s, and the
port stops answering. (Every other server of the suite is checked the same
way when its fixture ends.)"""

from __future__ import annotations

import socket

import numpy as np
import pytest
import tritonclient.http as httpclient

from trtis_harness import ServerError, TrtisServer


def test_sigint_exits_zero(tiny_repo):
    server = TrtisServer(tiny_repo, name="shutdown server")
    try:
        server.start()
    except ServerError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        # Serve one request first, with its connection kept open by the
        # client, so shutdown has an idle keep-alive connection to close.
        c = httpclient.InferenceServerClient(server.url, connection_timeout=10.0)
        inp = httpclient.InferInput("INPUT0", [1, 2], "FP32")
        inp.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
        c.infer("identity_fp32", [inp])
        port = server.port

        code = server.stop(timeout=10.0)
        assert code == 0, (
            f"SIGINT should exit 0 within 10 s, got "
            f"{'a hang (killed)' if code is None else code}\n{server.log_tail()}"
        )
        c.close()

        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2.0).close()
    finally:
        server.kill()
