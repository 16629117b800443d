"""trtis's Python backend worker: runs one model instance's `model.py`
(Triton's `class TritonPythonModel`) in a process of its own.

The server starts it as `python3 -u worker.py --fd N --write-fd M
--answer-fd A`: it reads frames from socket N, writes each batch's answer
(the responses `execute` returned, then `executed`) to A, read by the
server's instance thread, and every other frame to M, read by the server's
reader thread. The frame protocol is PROTOCOL.md's (beside this file in the
trtis sources). The model
imports `triton_python_backend_utils` (written beside this file) as
`pb_utils`; this worker installs itself there as `pb_utils._runtime`.

Threads:
- the main thread runs the model's hooks (auto_complete_config, initialize,
  execute, finalize), one command at a time;
- reading has no thread of its own: whichever thread waits for a frame
  reads the socket, one at a time (the "reader"), and hands frames meant for
  others to them: the main thread waiting for its next command, a BLS call
  waiting for its reply, `is_cancelled()` looking for a `cancel` without
  blocking. So a request costs no thread switch in the worker. Whoever reads
  sees end of file (the server is gone) and ends the process;
- the deferred thread sends what the garbage collector finds on any thread:
  the errors of requests the model let go of without answering, and the
  custom metrics it let go of;
- an event-loop thread, started for the first `async def execute`.
Any thread may write; one lock keeps frames whole, and frames sent together
(a batch's responses and its `executed`) go out in one system call.

The native core: when the server passes `--native PATH` (its
`_trtis_native` extension, backends/python-native) and it loads, reading
frames, making the received requests, answering a batch in the usual case
and writing go through it (`self.wire`); the pure-Python code below does
the same where it is not (`self.wire` None), and for everything the native
`answer` leaves to it. Behaviour is the same either way.
"""

import argparse
import asyncio
import collections
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
# The receive buffer: small frames (most) come in one read.
_CHUNK = 1 << 16
_SCAN = json.JSONDecoder().scan_once
# _execute's answer when the native core sent the batch's answers and its
# `executed` itself.
_SENT = object()
# sendmsg's buffer count is bounded (IOV_MAX, 1024 on Linux).
_MAX_BUFFERS = 512


_RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


def _rescheduled(states):
    """The states of the requests the model released with
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE (none looked for until the model
    first called `set_release_flags`)."""
    if not pb_utils._release_flags_used:
        return []
    return [state for state in states if state.release_flags == _RESCHEDULE]


def _exit(code):
    """End the process now: model threads (daemon or not) must not keep it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # exiting anyway
            pass
    os._exit(code)


def _bad_frame():
    """End the worker on a frame it cannot read (a protocol violation)."""
    sys.stderr.write("trtis python worker: bad frame from the server\n")
    traceback.print_exc()
    _exit(2)


def _json_default(value):
    # numpy scalars (e.g. dims an auto_complete_config computed) as numbers.
    if hasattr(value, "item"):
        return value.item()
    raise TypeError("Object of type {} is not JSON serializable".format(type(value).__name__))


def _encode(header, parts, out):
    """Append one frame's buffers to `out`; `header` is a dict, or JSON text
    (str) or bytes already."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"), allow_nan=False, default=_json_default)
    header_bytes = header.encode("utf-8") if isinstance(header, str) else header
    views = [memoryview(part).cast("B") for part in parts]
    out.append(_PREFIX.pack(len(header_bytes), sum(v.nbytes for v in views)) + header_bytes)
    out.extend(v for v in views if v.nbytes)


async def _guarded(coroutine):
    """Await a model coroutine: (its result, None) or (None, the formatted
    exception). Catching here keeps asyncio's frames out of the traceback."""
    try:
        return (await coroutine), None
    except BaseException as exc:  # any failure of model code
        return None, pb_utils._format_exception(exc)


class _Replies:
    """The replies to one BLS call, in order; `get()` waits (reading the
    socket itself when nobody else does)."""

    def __init__(self, worker):
        self._worker = worker
        self._items = collections.deque()

    def get(self):
        items = self._items
        return self._worker.wait_for(lambda: items.popleft() if items else None)


def _load_native(path):
    """The native core's module from `path`; raises when it cannot load."""
    from importlib.machinery import ExtensionFileLoader

    loader = ExtensionFileLoader("_trtis_native", path)
    spec = importlib.util.spec_from_file_location("_trtis_native", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class Worker:
    def __init__(self, sock, native=None, rsock=None, asock=None):
        """`sock`: the socket to write to; `rsock`: the one to read from,
        `asock`: the one batches' answers go to (each `sock` when None)."""
        self.sock = sock
        self.rsock = sock if rsock is None else rsock
        self.asock = sock if asock is None else asock
        self.sent = 0  # bytes written to `sock` (pure Python)
        self.write_lock = threading.Lock()
        # Guards the reader role, the inbox, the BLS reply lists and the
        # cancelled flags; waiters for a frame wait on it.
        # Reentrant: a __del__ run by the garbage collector while this
        # thread holds it may reach it again (e.g. is_cancelled()).
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)  # `with self.lock`: C-level
        self.writing = threading.local()  # .active: inside send_frames
        self.reading = False  # some thread holds the reader role
        self.waiters = 0  # threads in cond.wait(): only they need a notify
        self.inbox = collections.deque()  # commands for the main thread
        self.buffer = bytearray(_CHUNK)  # only the reader touches these three
        self.view = memoryview(self.buffer)
        self.start = self.end = 0
        # rid -> weakref of the pb_utils._RequestState of a request still
        # referenced somewhere (a state leaves when collected).
        self.live = {}
        self.bls_last_id = 0
        self.bls_waiting = {}  # bid -> _Replies
        # Frames sent by the deferred thread (errors of abandoned requests,
        # metrics let go of): SimpleQueue.put may run in __del__.
        self.deferred = queue.SimpleQueue()
        self.model = None
        self.decoupled = False
        self.loop = None
        # Read by pb_utils (see its module docstring).
        self.instance_name = ""
        self.model_dir = ""
        self.bls_allowed = False
        self.wire = None
        if native is not None:
            self.wire = native.Wire(
                self.rsock.fileno(),
                sock.fileno(),
                self.asock.fileno(),
                pb_utils.Tensor,
                pb_utils.InferenceRequest,
                pb_utils._RequestState,
                pb_utils.InferenceResponse,
                pb_utils.np.ndarray,
                dict(pb_utils._NUMBER_TYPES),
                self.live,
                threading.Lock,
            )

    # -- writing -------------------------------------------------------------

    def send_frame(self, header, parts):
        self.send_frames([(header, parts)])

    def send_frames(self, frames, answer=False):
        """Write frames, in order, in as few system calls as they allow, to
        the write socket, or with `answer` to the answer socket. A frame
        sent while this thread is already writing (a __del__ the garbage
        collector ran mid-write) goes to the deferred thread."""
        if getattr(self.writing, "active", False):
            for frame in frames:
                self.deferred.put(frame)
            return
        buffers = []
        for header, parts in frames:
            _encode(header, parts, buffers)
        self.writing.active = True
        try:
            if self.wire is not None:
                self.wire.send(buffers, answer)
                return
            sock = self.asock if answer else self.sock
            with self.write_lock:
                if not answer:
                    self.sent += sum(memoryview(b).nbytes for b in buffers)
                while buffers:
                    sent = sock.sendmsg(
                        buffers if len(buffers) <= _MAX_BUFFERS else buffers[:_MAX_BUFFERS]
                    )
                    while buffers and sent >= len(buffers[0]):
                        sent -= len(buffers[0])
                        buffers.pop(0)
                    if sent:
                        buffers[0] = memoryview(buffers[0])[sent:]
        finally:
            self.writing.active = False

    # -- reading -------------------------------------------------------------

    def _take(self, length):
        """The next `length` bytes of the stream as a bytearray of their own,
        or None at end of file (or when the server's end is gone otherwise)."""
        out = bytearray(length)
        have = min(length, self.end - self.start)
        out[:have] = self.view[self.start : self.start + have]
        self.start += have
        if have == length:
            return out
        self.start = self.end = 0
        view = memoryview(out)
        got = have
        try:
            while got < length:
                if length - got >= _CHUNK // 2:  # big: straight into place
                    count = self.rsock.recv_into(view[got:], length - got)
                    if not count:
                        return None
                    got += count
                else:
                    count = self.rsock.recv_into(self.view)
                    if not count:
                        return None
                    used = min(count, length - got)
                    view[got : got + used] = self.view[:used]
                    got += used
                    self.start, self.end = used, count
        except OSError:
            return None
        return out

    def _fill(self, length):
        """Have at least `length` (<= _CHUNK) bytes in the buffer; False at
        end of file (or when the server's end is gone otherwise)."""
        if self.start + length > _CHUNK:  # move what is left to the front
            left = self.end - self.start
            self.view[:left] = self.view[self.start : self.end]
            self.start, self.end = 0, left
        try:
            while self.end - self.start < length:
                count = self.rsock.recv_into(self.view[self.end :])
                if not count:
                    return False
                self.end += count
        except OSError:
            return False
        return True

    def _read_frame(self):
        """One frame (header, body); ends the process at end of file or on a
        frame that cannot be read. Only the reader calls it."""
        try:
            if self.end - self.start >= _PREFIX.size or self._fill(_PREFIX.size):
                header_length, body_length = _PREFIX.unpack_from(self.buffer, self.start)
                self.start += _PREFIX.size
                if header_length <= _CHUNK:
                    if not self._fill(header_length):
                        _exit(0)
                    text = str(self.view[self.start : self.start + header_length], "utf-8")
                    self.start += header_length
                else:
                    header = self._take(header_length)
                    if header is None:
                        _exit(0)
                    text = header.decode("utf-8")
                body = self._take(body_length)
                if body is not None:
                    # The decoder's scanner, called directly: json.loads adds
                    # an encoding guess and whitespace checks to every frame.
                    header, end = _SCAN(text, 0)
                    if not isinstance(header, dict) or end != len(text):
                        raise ValueError("a frame header that is not one JSON object")
                    return header, body
        except Exception:  # a broken stream ends the worker
            _bad_frame()
        _exit(0)

    def wait_for(self, take):
        """Wait until `take()` (called with `cond` held) returns something
        other than None, and return it. While nobody else reads, this thread
        is the reader: it reads frames and routes them until `take()` has
        its item."""
        with self.lock:
            while True:
                item = take()
                if item is not None:
                    return item
                if not self.reading:
                    self.reading = True
                    break
                self.waiters += 1
                try:
                    self.cond.wait()
                finally:
                    self.waiters -= 1
        try:
            while True:
                frame = self._next_frame()
                with self.lock:
                    self._route(*frame)
                    item = take()
                    if item is not None:
                        return item
        finally:
            self._release_reader()

    def _release_reader(self):
        """Give up the reader role; a waiting thread may take it."""
        with self.lock:
            self.reading = False
            if self.waiters:
                self.cond.notify_all()

    def poll(self):
        """Route the frames already waiting, without blocking, when nobody
        else reads (`is_cancelled()` calls this: a `cancel` that came while
        the main thread runs `execute` takes effect)."""
        with self.lock:
            if self.reading:
                return  # the reader routes frames as they come
            self.reading = True
        try:
            while self._pending():
                frame = self._next_frame()
                with self.lock:
                    self._route(*frame)
        finally:
            self._release_reader()

    def _next_frame(self):
        """The next frame as (kind, header, body, states); see _route."""
        if self.wire is None:
            header, body = self._read_frame()
            return header.get("kind"), header, body, None
        try:
            frame = self.wire.read(self.decoupled)
        except Exception:  # a broken stream ends the worker
            _bad_frame()
        if frame is None:
            _exit(0)
        return frame

    def _pending(self):
        """Whether a frame is waiting (never blocks)."""
        if self.wire is not None:
            return self.wire.pending()
        return self.start < self.end or self._waiting()

    def _waiting(self):
        """Whether the socket has bytes to read (or is at end of file)."""
        try:
            self.rsock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True  # the read that follows finds the end
        return True

    def _route(self, kind, header, body, states):
        """A frame to whoever it is for (`cond` is held). An `execute` frame
        read by the native core comes with its requests made: `header` is
        their list (or the error that stopped making them), `states`
        theirs."""
        if kind == "cancel":
            ref = self.live.get(header.get("rid"))
            state = ref() if ref is not None else None
            if state is not None:
                state.cancelled = True
        elif kind == "bls_response" or kind == "reply":
            bid = header.get("bid")
            replies = self.bls_waiting.get(bid)
            if header.get("final", True):
                self.bls_waiting.pop(bid, None)
            if replies is not None:
                replies._items.append((header, body))
        elif kind == "execute" and states is not None:
            self.inbox.append((kind, header, body, states))
        elif kind == "execute":
            # The states exist as the frame is read, so that a `cancel`
            # right behind the `execute` frame finds them.
            states = [
                pb_utils._RequestState(
                    request["rid"], index, request.get("outputs", []), self.decoupled
                )
                for index, request in enumerate(header.get("requests", []))
            ]
            for state in states:
                self.live[state.rid] = weakref.ref(state)
            self.inbox.append((kind, header, body, states))
        else:
            self.inbox.append((kind, header, body, None))
        if self.waiters:
            self.cond.notify_all()

    def next_command(self):
        inbox = self.inbox
        return self.wait_for(lambda: inbox.popleft() if inbox else None)

    # -- the runtime interface of pb_utils ------------------------------------

    def call(self, header):
        """Send a frame the server answers with a `reply` frame of the same
        `bid` (a `metric` request); returns its reply list."""
        return self.start_bls(header, [])

    def defer(self, header):
        self.deferred.put((header, []))

    def start_bls(self, header, parts):
        replies = _Replies(self)
        with self.lock:
            self.bls_last_id += 1
            bid = self.bls_last_id
            self.bls_waiting[bid] = replies
        header["bid"] = bid
        try:
            self.send_frame(header, parts)
        except BaseException:
            with self.lock:
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
        self.deferred.put(
            (
                {
                    "kind": "response",
                    "rid": rid,
                    "final": True,
                    "error": {"message": message, "code": "INTERNAL"},
                    "tensors": [],
                },
                [],
            )
        )

    def send_deferred(self):
        """The deferred thread."""
        while True:
            header, parts = self.deferred.get()
            try:
                self.send_frames([(header, parts)])
            except Exception:  # keep serving the next ones
                sys.stderr.write("trtis python worker: a deferred frame could not be sent\n")
                traceback.print_exc()

    def _no_response_message(self, index):
        return (
            "Python model '{}' returned no response for request {} and did not use "
            "its response sender.".format(self.instance_name, index)
        )

    # -- the main thread -----------------------------------------------------

    def serve(self):
        kind, header, _, _ = self.next_command()
        if kind == "init":
            self.initialize(header)
        elif kind == "auto_complete":
            self.auto_complete(header)
        else:
            sys.stderr.write("trtis python worker: unexpected first frame {!r}\n".format(kind))
            _exit(2)
        while True:
            # One call per command: once it returns nothing here refers to
            # the batch, so requests the model let go of can be found abandoned.
            self._handle(*self.next_command())

    def _handle(self, kind, first, second, states):
        if kind == "execute":
            self.execute(first, second, states)
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
        """Run one batch; always answers with exactly one `executed`, sent in
        one write with the responses of execute's return value."""
        frames = []
        try:
            error = self._execute(header, body, states, frames)
        except BaseException as exc:  # a bug here must not hang the server
            traceback.print_exc()
            error = self._batch_error(pb_utils._format_exception(exc))
        if error is _SENT:
            return
        executed = {"kind": "executed", "error": error}
        if error is not None:
            for state in states:
                state.close()
        else:
            rescheduled = _rescheduled(states)
            if rescheduled:
                # Back to the scheduler: this run of the request sends
                # nothing more (it answers when it runs again).
                for state in rescheduled:
                    state.close()
                executed["rescheduled"] = [state.rid for state in rescheduled]
        # `after`: what went to the write socket before; the server deals
        # with it before it takes the batch as done.
        executed["after"] = self.wire.sent() if self.wire is not None else self.sent
        frames.append((executed, []))
        self.send_frames(frames, answer=True)

    def _batch_error(self, message):
        return "Failed to process the request(s) for model '{}', message: {}".format(
            self.instance_name, message
        )

    def _decoupled_return_error(self):
        return (
            "Python model '{}' is using the decoupled mode and the execute function "
            "must return None.".format(self.instance_name)
        )

    def _execute(self, header, body, states, frames):
        """Run the batch; returns the `executed` error, or None. Responses to
        send go to `frames`."""
        if type(header) is list:  # made by the native core
            requests = header
        elif isinstance(header, BaseException):
            raise header  # the native core could not make the requests
        else:
            requests = []
            offset = 0
            for request, state in zip(header["requests"], states):
                inputs, offset = pb_utils._tensors_from_wire(
                    request.get("inputs", []), body, offset
                )
                requests.append(pb_utils.InferenceRequest._received(request, inputs, state))

        if self._buffered():
            # Frames came behind this one (the server sends a batch while
            # the one before runs): a `cancel` among them takes effect now.
            self.poll()
        if any(state.cancelled for state in states):
            requests, states = self._leave_out_cancelled(requests, states)
            if not requests:
                return None

        try:
            result = self.model.execute(requests)
        except BaseException as exc:  # any failure of model code
            return self._batch_error(pb_utils._format_exception(exc))
        if type(result) is list and not self.decoupled:  # the usual case
            if (
                self.wire is not None
                and not _rescheduled(states)
                and self.wire.answer(result, states)
            ):
                return _SENT
            return self._answer(result, states, frames)
        failure = None
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
        return self._answer(result, states, frames)

    def _buffered(self):
        """Whether bytes of a frame behind the last one read wait in the
        buffer (no system call)."""
        if self.wire is not None:
            return self.wire.buffered()
        return self.start < self.end

    def _leave_out_cancelled(self, requests, states):
        """A request cancelled before its batch began is not run (as one
        cancelled in the server's queue): it ends with CANCELLED, sent
        now; returns the requests and states left."""
        frames, kept = [], []
        for request, state in zip(requests, states):
            if state.cancelled:
                state.closed = True
                frames.append(
                    (
                        {
                            "kind": "response",
                            "rid": state.rid,
                            "final": True,
                            "error": {"message": "", "code": "CANCELLED"},
                            "tensors": [],
                        },
                        [],
                    )
                )
            else:
                kept.append((request, state))
        self.send_frames(frames, answer=True)
        return [r for r, _ in kept], [s for _, s in kept]

    def _answer(self, result, states, frames):
        """Default mode: check execute's return value and put its responses
        in `frames`; returns the `executed` error, or None."""
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
        for state, response in zip(states, result):
            if response is not None and state.release_flags == _RESCHEDULE:
                return self._batch_error(
                    "Expected a None object in the execute function return list for "
                    "reschduled request, found type '{}'.".format(type(response))
                )
            if response is not None and not isinstance(response, pb_utils.InferenceResponse):
                return self._batch_error(
                    "Expected an 'InferenceResponse' object in the execute function "
                    "return list, found type '{}'.".format(type(response))
                )
        for state, response in zip(states, result):
            by_model = True
            if response is None:
                if state.sender_used or state.release_flags == _RESCHEDULE:
                    continue  # the response sender answers (maybe later, from a thread)
                response = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(self._no_response_message(state.index))
                )
                by_model = False
            frame = state.final_frame(response, by_model)
            if frame is not None:
                frames.append(frame)
        return None

    def _schedule_decoupled(self, coroutine, states):
        """Run a decoupled `async def execute` to its end on the event loop;
        if it fails, its requests that are still open fail with the error."""

        async def run():
            result, failure = await _guarded(coroutine)
            if failure is None and result is not None:
                failure = self._decoupled_return_error()
            if failure is not None:
                # Logged whatever the requests' state, as Triton's stub does:
                # an exception after the final flags reaches no client.
                self.send_frame(
                    {
                        "kind": "log",
                        "level": "E",
                        "file": "worker.py",
                        "line": sys._getframe().f_lineno,
                        "message": "Failed to execute the async decoupled execute of '{}': {}".format(
                            self.instance_name, failure
                        ),
                    },
                    [],
                )
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
    parser.add_argument(
        "--write-fd",
        type=int,
        help="a second socket to write to (then --fd is only read from)",
    )
    parser.add_argument(
        "--answer-fd",
        type=int,
        help="a socket to write batches' answers to (else the one written to)",
    )
    parser.add_argument("--native", help="the native core (_trtis_native) to load, if it can")
    options = parser.parse_args()
    # The model's process sees the command line Triton's stub gives it: a
    # model running a test runner (it parses sys.argv) in initialize works.
    sys.argv = [""]
    fd = options.fd
    # Ctrl-C in a terminal reaches the whole process group; the server decides
    # when this worker stops (finalize, or closing the socket).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sockets = []
    for number in (fd, options.write_fd, options.answer_fd):
        if number is None:
            sockets.append(sockets[-1])
            continue
        sock = socket.socket(fileno=number)
        # A process the model forks must not hold the server's socket open.
        sock.set_inheritable(False)
        sock.setblocking(True)
        sockets.append(sock)
    native, why_not = None, None
    if options.native:
        try:
            native = _load_native(options.native)
        except Exception as exc:  # any reason: the pure-Python code serves
            why_not = "{}: {}".format(type(exc).__name__, exc)
    # Two sockets (the server's way): one per direction, so that reading
    # one direction's frames never wakes a thread blocked reading the other
    # (a Unix socket wakes its peer's waiters whenever it frees send space).
    # The third: batches' answers go straight to the server's instance
    # thread, which waits for them, and not through its reader thread.
    worker = Worker(sockets[1], native, rsock=sockets[0], asock=sockets[2])
    pb_utils._runtime = worker
    if why_not is not None:
        worker.send_frame(
            {
                "kind": "log",
                "level": "W",
                "file": "worker.py",
                "line": sys._getframe().f_lineno,
                "message": "the Python backend's native core {} did not load ({}); "
                "the worker runs in pure Python".format(options.native, why_not),
            },
            [],
        )
    threading.Thread(target=worker.send_deferred, name="trtis-deferred", daemon=True).start()
    try:
        worker.serve()
    except BaseException:  # report, then leave
        traceback.print_exc()
    _exit(2)


if __name__ == "__main__":
    main()
