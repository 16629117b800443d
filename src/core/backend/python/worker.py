"""trtis's Python backend worker: runs one model instance's `model.py`
(Triton's `class TritonPythonModel`) in a process of its own.

The server starts it as `python3 -u worker.py --fd N`, where file descriptor N
is one end of a Unix stream socket pair, and speaks the frame protocol of
PROTOCOL.md (beside this file in the trtis sources) over it. The model
imports `triton_python_backend_utils` (written beside this file) as
`pb_utils`; this worker installs itself there as `pb_utils._runtime`.

Threads:
- the main thread runs the model's hooks (auto_complete_config, initialize,
  execute, finalize), one inbox item at a time;
- the reader thread reads every frame: `cancel` takes effect at once,
  `bls_response` goes to the BLS call waiting for it, the rest to the inbox;
  at end of file (the server is gone) it ends the process;
- an event-loop thread, started for the first `async def execute`.
Any thread may write a frame; one lock keeps frames whole.
"""

import argparse
import asyncio
import importlib.util
import json
import os
import queue
import signal
import socket
import struct
import sys
import threading
import traceback
import weakref

import triton_python_backend_utils as pb_utils

_PREFIX = struct.Struct("<IQ")  # header length, body length
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


def _exit(code):
    """End the process now: model threads (daemon or not) must not keep it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # exiting anyway
            pass
    os._exit(code)


def _json_default(value):
    # numpy scalars (e.g. dims an auto_complete_config computed) as numbers.
    if hasattr(value, "item"):
        return value.item()
    raise TypeError("Object of type {} is not JSON serializable".format(type(value).__name__))


async def _guarded(coroutine):
    """Await a model coroutine: (its result, None) or (None, the formatted
    exception). Catching here keeps asyncio's frames out of the traceback."""
    try:
        return (await coroutine), None
    except BaseException as exc:  # any failure of model code
        return None, pb_utils._format_exception(exc)


class Worker:
    def __init__(self, sock):
        self.sock = sock
        self.write_lock = threading.Lock()
        # SimpleQueue: its put() may be called from __del__ (abandoned requests).
        self.inbox = queue.SimpleQueue()
        # rid -> pb_utils._RequestState of requests still referenced somewhere.
        self.live = weakref.WeakValueDictionary()
        self.bls_lock = threading.Lock()
        self.bls_last_id = 0
        self.bls_waiting = {}  # bid -> queue of (header, body) replies
        self.model = None
        self.decoupled = False
        self.loop = None
        # Read by pb_utils (see its module docstring).
        self.instance_name = ""
        self.model_dir = ""
        self.bls_allowed = False

    # -- frames --------------------------------------------------------------

    def send_frame(self, header, parts):
        header_bytes = json.dumps(
            header, separators=(",", ":"), allow_nan=False, default=_json_default
        ).encode("utf-8")
        parts = [memoryview(part).cast("B") for part in parts]
        body_length = sum(part.nbytes for part in parts)
        with self.write_lock:
            self.sock.sendall(_PREFIX.pack(len(header_bytes), body_length) + header_bytes)
            for part in parts:
                self.sock.sendall(part)

    def _read_exactly(self, length):
        """`length` bytes as a bytearray, or None at end of file (or when the
        server's end is gone in any other way)."""
        buffer = bytearray(length)
        view = memoryview(buffer)
        received = 0
        while received < length:
            try:
                count = self.sock.recv_into(view[received:], length - received)
            except OSError:
                return None
            if count == 0:
                return None
            received += count
        return buffer

    def read_frames(self):
        """The reader thread."""
        code = 0
        try:
            while True:
                prefix = self._read_exactly(_PREFIX.size)
                if prefix is None:
                    break
                header_length, body_length = _PREFIX.unpack(prefix)
                header_bytes = self._read_exactly(header_length)
                body = self._read_exactly(body_length)
                if header_bytes is None or body is None:
                    break
                self._route(json.loads(header_bytes.decode("utf-8")), body)
        except Exception:  # a broken stream ends the worker
            sys.stderr.write("trtis python worker: bad frame from the server\n")
            traceback.print_exc()
            code = 2
        _exit(code)

    def _route(self, header, body):
        kind = header.get("kind")
        if kind == "cancel":
            state = self.live.get(header.get("rid"))
            if state is not None:
                state.cancelled = True
        elif kind == "bls_response":
            bid = header.get("bid")
            with self.bls_lock:
                replies = self.bls_waiting.get(bid)
                if header.get("final", True):
                    self.bls_waiting.pop(bid, None)
            if replies is not None:
                replies.put((header, body))
        elif kind == "execute":
            # The states exist before the main thread gets to the batch, so
            # that a `cancel` right behind the `execute` frame finds them.
            states = [
                pb_utils._RequestState(
                    request["rid"], index, request.get("outputs", []), self.decoupled
                )
                for index, request in enumerate(header.get("requests", []))
            ]
            for state in states:
                self.live[state.rid] = state
            self.inbox.put((kind, header, body, states))
        else:
            self.inbox.put((kind, header, body, None))

    # -- the runtime interface of pb_utils ------------------------------------

    def start_bls(self, header, parts):
        replies = queue.SimpleQueue()
        with self.bls_lock:
            self.bls_last_id += 1
            bid = self.bls_last_id
            self.bls_waiting[bid] = replies
        header["bid"] = bid
        try:
            self.send_frame(header, parts)
        except BaseException:
            with self.bls_lock:
                self.bls_waiting.pop(bid, None)
            raise
        return replies

    def request_abandoned(self, rid, index, sender_used):
        if sender_used:
            message = (
                "Python model '{}' dropped the response sender of request {} without "
                "sending the final flag.".format(self.instance_name, index)
            )
        else:
            message = self._no_response_message(index)
        self.inbox.put(("abandoned", rid, message, None))

    def _no_response_message(self, index):
        return (
            "Python model '{}' returned no response for request {} and did not use "
            "its response sender.".format(self.instance_name, index)
        )

    # -- the main thread -----------------------------------------------------

    def serve(self):
        kind, header, _, _ = self.inbox.get()
        if kind == "init":
            self.initialize(header)
        elif kind == "auto_complete":
            self.auto_complete(header)
        else:
            sys.stderr.write("trtis python worker: unexpected first frame {!r}\n".format(kind))
            _exit(2)
        while True:
            # One call per item: once it returns nothing here refers to the
            # batch, so requests the model let go of can be found abandoned.
            self._handle(*self.inbox.get())

    def _handle(self, kind, first, second, states):
        if kind == "execute":
            self.execute(first, second, states)
        elif kind == "abandoned":
            self.send_frame(
                {
                    "kind": "response",
                    "rid": first,
                    "final": True,
                    "error": {"message": second, "code": "INTERNAL"},
                    "tensors": [],
                },
                [],
            )
        elif kind == "finalize":
            self.finalize()
        else:
            sys.stderr.write("trtis python worker: unexpected frame {!r}\n".format(kind))

    def import_model(self, header):
        """Import the model file as Triton does; returns the module."""
        self.model_dir = header["version_dir"]
        # Python put this directory first; it goes last, after the model's.
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _OWN_DIR]
        sys.path.extend([header["version_dir"], header["model_dir"], _OWN_DIR])
        name = header["module_name"]
        spec = importlib.util.spec_from_file_location(name, header["model_file"])
        if spec is None:
            raise ImportError("cannot load '{}' as a Python module".format(header["model_file"]))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def initialize(self, header):
        args = {key: str(value) for key, value in header["args"].items()}
        self.instance_name = args.get("model_instance_name", "")
        self.decoupled = bool(header.get("decoupled", False))
        try:
            self.model = self.import_model(header).TritonPythonModel()
            initialize = getattr(self.model, "initialize", None)
            if initialize is not None:
                initialize(args)
        except BaseException as exc:  # any failure of model code
            self.send_frame({"kind": "error", "message": pb_utils._format_exception(exc)}, [])
            _exit(1)
        self.bls_allowed = True
        self.send_frame({"kind": "ready"}, [])

    def auto_complete(self, header):
        config = header["config"]
        try:
            model_class = self.import_model(header).TritonPythonModel
            hook = getattr(model_class, "auto_complete_config", None)
            if hook is not None:
                result = hook(pb_utils.ModelConfig(config))
                if not isinstance(result, pb_utils.ModelConfig):
                    message = (
                        "auto_complete_config function in model '{}' must return a "
                        "valid pb.ModelConfig object.".format(config.get("name", ""))
                    )
                    self.send_frame({"kind": "error", "message": message}, [])
                    _exit(1)
                config = result.as_dict()
            self.send_frame({"kind": "config", "config": config}, [])
        except BaseException as exc:  # any failure of model code
            self.send_frame({"kind": "error", "message": pb_utils._format_exception(exc)}, [])
            _exit(1)
        _exit(0)

    def execute(self, header, body, states):
        """Run one batch; always answers with exactly one `executed`."""
        try:
            error = self._execute(header, body, states)
        except BaseException as exc:  # a bug here must not hang the server
            traceback.print_exc()
            error = self._batch_error(pb_utils._format_exception(exc))
        if error is not None:
            for state in states:
                state.close()
        self.send_frame({"kind": "executed", "error": error}, [])

    def _batch_error(self, message):
        return "Failed to process the request(s) for model '{}', message: {}".format(
            self.instance_name, message
        )

    def _decoupled_return_error(self):
        return (
            "Python model '{}' is using the decoupled mode and the execute function "
            "must return None.".format(self.instance_name)
        )

    def _execute(self, header, body, states):
        """Run the batch; returns the `executed` error, or None."""
        requests = []
        offset = 0
        for request, state in zip(header["requests"], states):
            inputs, offset = pb_utils._tensors_from_wire(request.get("inputs", []), body, offset)
            requests.append(pb_utils.InferenceRequest._received(request, inputs, state))

        failure = None
        try:
            result = self.model.execute(requests)
        except BaseException as exc:  # any failure of model code
            result, failure = None, pb_utils._format_exception(exc)
        if asyncio.iscoroutine(result):
            if self.decoupled:
                # `executed` goes now; the coroutine answers through the senders.
                self._schedule_decoupled(result, states)
                return None
            result, failure = asyncio.run_coroutine_threadsafe(
                _guarded(result), self._event_loop()
            ).result()

        if failure is not None:
            return self._batch_error(failure)
        if self.decoupled:
            return None if result is None else self._batch_error(self._decoupled_return_error())
        return self._answer(result, states)

    def _answer(self, result, states):
        """Default mode: check execute's return value and send its responses;
        returns the `executed` error, or None."""
        if result is None:
            result = [None] * len(states)
        if not isinstance(result, list):
            return self._batch_error(
                "Expected a list in the execute return, found type '{}'.".format(type(result))
            )
        if len(result) != len(states):
            return self._batch_error(
                "Number of InferenceResponse objects do not match the number of "
                "InferenceRequest objects. InferenceRequest(s) size is:{}, and "
                "InferenceResponse(s) size is:{}\n".format(len(states), len(result))
            )
        for response in result:
            if response is not None and not isinstance(response, pb_utils.InferenceResponse):
                return self._batch_error(
                    "Expected an 'InferenceResponse' object in the execute function "
                    "return list, found type '{}'.".format(type(response))
                )
        for state, response in zip(states, result):
            if response is not None:
                state.complete(response)
            elif not state.sender_used:
                state.fail(self._no_response_message(state.index))
            # else: the response sender answers (maybe later, from a thread).
        return None

    def _schedule_decoupled(self, coroutine, states):
        """Run a decoupled `async def execute` to its end on the event loop;
        if it fails, its requests that are still open fail with the error."""

        async def run():
            result, failure = await _guarded(coroutine)
            if failure is None and result is not None:
                failure = self._decoupled_return_error()
            if failure is not None:
                for state in states:
                    state.fail(self._batch_error(failure))

        asyncio.run_coroutine_threadsafe(run(), self._event_loop())

    def _event_loop(self):
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            threading.Thread(
                target=self.loop.run_forever, name="trtis-asyncio", daemon=True
            ).start()
        return self.loop

    def finalize(self):
        self.bls_allowed = False
        hook = getattr(self.model, "finalize", None)
        if hook is not None:
            try:
                hook()
            except BaseException as exc:  # logged, not fatal
                self.send_frame(
                    {
                        "kind": "log",
                        "level": "E",
                        "file": "worker.py",
                        "line": sys._getframe().f_lineno,
                        "message": "Failed to finalize model instance '{}': {}".format(
                            self.instance_name, pb_utils._format_exception(exc)
                        ),
                    },
                    [],
                )
        self.send_frame({"kind": "finalized"}, [])
        _exit(0)


def main():
    parser = argparse.ArgumentParser(description="trtis Python backend worker")
    parser.add_argument("--fd", type=int, required=True, help="the socket's file descriptor")
    fd = parser.parse_args().fd
    # Ctrl-C in a terminal reaches the whole process group; the server decides
    # when this worker stops (finalize, or closing the socket).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    # A process the model forks must not hold the server's socket open.
    sock.set_inheritable(False)
    sock.setblocking(True)
    worker = Worker(sock)
    pb_utils._runtime = worker
    threading.Thread(target=worker.read_frames, name="trtis-reader", daemon=True).start()
    try:
        worker.serve()
    except BaseException:  # report, then leave
        traceback.print_exc()
    _exit(2)


if __name__ == "__main__":
    main()
