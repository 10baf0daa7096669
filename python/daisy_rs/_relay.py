"""The block relay: how processes that a worker function starts get the
worker's blocks, as daisy 1.x's spawn pattern needs.

In daisy 1.x a worker function often does not process blocks itself: it
starts ``python child.py``, a ``volara-cli`` command or an ``sbatch
--wait`` job, and that process calls ``daisy.Client()`` and loops over
``acquire_block()``. Here the worker (``python -m daisy_rs.worker``)
holds the one connection to the driver; a `Relay` in it listens on a port
of its own, puts its address in ``DAISY_CONTEXT`` (inherited by whatever
the function starts), and hands those clients the blocks of the worker's
feed. So a child is accounted as the worker that started it: the driver
sees one worker, its heartbeats and its releases; several clients (forked
fetchers, a job array) share it. A client that goes away while it holds
blocks fails them with the reason, and a client whose worker is gone gets
an error, never a silent wait.

One JSON object per line each way. A client first sends ``{"token": T,
"pid": P}`` and is answered ``{"ok": true}`` or ``{"refused": why}``; then
``{"op": "acquire"}`` is answered ``{"block": [task_id, block_id, read,
write]}`` (ROIs as ``[offset, shape]``) or ``{"block": null}`` when there
are no more, and ``{"op": "release", "block_id": N, "error": E}`` (E null
for success; ``"found_done": true`` instead of an error for a block the
check function calls done) is not answered.
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
import socket
import threading

from daisy_rs._feed import next_unchecked
from daisy_rs.context import Context

#: The longest line a relay reads: a release with a long traceback.
_MAX_LINE = 1 << 20

#: How long a client waits for the relay's answer to its hello.
_HELLO_TIMEOUT_S = 30


class Relay:
    """Serves the blocks of the current worker function's feed to clients
    in other processes. One per worker process, started on first use."""

    def __init__(self, host: str):
        self._lock = threading.Lock()
        #: Notified when a client lets go of blocks.
        self._let_go = threading.Condition(self._lock)
        self._held = 0
        self._feed = self._check = None
        self._clients = 0
        self._connections = set()
        os.register_at_fork(after_in_child=self._close_in_child)
        self.token = secrets.token_hex(16)
        self._socket = socket.create_server(("0.0.0.0", 0), backlog=64)
        self.hostname = host
        self.port = self._socket.getsockname()[1]
        threading.Thread(target=self._accept, name="daisy-relay", daemon=True).start()

    def serve(self, feed, check):
        """Clients from now on get blocks from ``feed``. The task's
        ``check`` function (or None) is called here for a client that does
        not call it itself (see `RelayClient`)."""
        with self._lock:
            self._feed, self._check = feed, check
            feed.set_clients(self._clients)

    def settle(self, timeout_s):
        """Waits (at most ``timeout_s``) until no client holds a block: a
        worker function that started a process returns as that process
        exits, and what the process held is its failure to report, not
        the function's."""
        with self._let_go:
            self._let_go.wait_for(lambda: self._held == 0, timeout_s)

    def _hold(self, count):
        with self._let_go:
            self._held += count
            self._let_go.notify_all()

    def context(self, task_id, worker_id, logdir, check_payload) -> Context:
        """The context of this worker's clients. ``check_payload``: the
        pickle of the task's check function, for a client to call it where
        it set its own state up (volara sets its log directory from the
        context before its first block), as daisy calls it where the
        program set it up; None to have the relay call it."""
        context = Context(hostname=self.hostname, port=self.port, task_id=task_id,
                          worker_id=worker_id, token=self.token)
        for key, value in (("logdir", logdir), ("check", check_payload)):
            if value is not None and Context.can_hold(value):
                context[key] = value
        return context

    def _close_in_child(self):
        """A forked child keeps none of the relay's sockets: the worker's
        clients must see EOF when the worker ends, not when its children do."""
        for connection in [self._socket, *self._connections]:
            try:
                connection.close()
            except OSError:
                pass

    def _count_client(self, change):
        with self._lock:
            self._clients += change
            if self._feed is not None:
                self._feed.set_clients(self._clients)

    def _accept(self):
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_client, args=(connection,), name="daisy-relay-client", daemon=True).start()

    def _serve_client(self, connection):
        held = {}
        pid = "?"
        self._connections.add(connection)
        _no_delay(connection)
        with connection, connection.makefile("rwb") as stream:
            try:
                connection.settimeout(_HELLO_TIMEOUT_S)  # a port scan must not pin a thread
                hello = _read(stream)
                if not isinstance(hello, dict):
                    return
                pid = hello.get("pid", "?")
                if not secrets.compare_digest(str(hello.get("token", "")), self.token):
                    _write(stream, {"refused": "wrong token: this is not the context of this worker"})
                    return
                connection.settimeout(None)
                _write(stream, {"ok": True})
                checks_itself = bool(hello.get("checks"))
                self._count_client(+1)
                try:
                    self._serve_requests(connection, stream, held, checks_itself)
                finally:
                    self._count_client(-1)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                pass  # a client that broke the exchange is a client gone
            finally:
                self._connections.discard(connection)
                for block_id, owner in held.items():
                    owner.release(
                        block_id,
                        f"the process that held this block (pid {pid}, a daisy.Client of this "
                        "worker) ended or disconnected before it released it",
                    )
                self._hold(-len(held))

    def _serve_requests(self, connection, stream, held, checks_itself):
        while True:
            request = _read(stream)
            if request is None:
                return
            with self._lock:
                feed, check = self._feed, self._check
            if request.get("op") == "acquire":
                block = next_unchecked(feed, None if checks_itself else check)
                if block is None:
                    _write(stream, {"block": None})
                elif _gone(connection):
                    feed.hand_back(block._spatial_id)  # it waited, then left: the block did not run
                    return
                else:
                    held[block._spatial_id] = feed
                    self._hold(1)
                    _write(stream, {"block": [block.task_id, block._spatial_id, list(block._read), list(block._write)]})
            elif request.get("op") == "release":
                block_id = int(request["block_id"])
                owner = held.pop(block_id, None)
                if owner is None:
                    continue
                if request.get("found_done"):
                    owner.found_done(block_id)
                else:
                    owner.release(block_id, request.get("error"))
                self._hold(-1)


class RelayClient:
    """A connection to the relay named by a context: a feed of blocks
    (``next_block``, ``release``) like the worker's own, and the task's
    check function if the relay leaves it to this process (``check``)."""

    def __init__(self, context: Context):
        for key in ("hostname", "port", "token"):
            if key not in context:
                raise ValueError(
                    f"DAISY_CONTEXT has no {key!r}: daisy_rs workers put their relay's "
                    "hostname, port and token in it; this context was written by something else "
                    f"({context!r})"
                )
        address = (context["hostname"], int(context["port"]))
        self._socket = socket.create_connection(address, timeout=_HELLO_TIMEOUT_S)
        _no_delay(self._socket)
        self._stream = self._socket.makefile("rwb")
        #: The task's check function, called here when the context names
        #: its pickle (see `Relay.context`).
        self.check = None
        if context.get("check"):
            with open(context["check"], "rb") as file:
                self.check = pickle.load(file)["check_function"]
        _write(self._stream, {"token": context["token"], "pid": os.getpid(), "checks": self.check is not None})
        answer = _read(self._stream)
        if answer is None:
            raise ConnectionError(f"the daisy worker at {address[0]}:{address[1]} closed the connection")
        if "refused" in answer:
            raise ConnectionError(f"the daisy worker at {address[0]}:{address[1]} refused this client: {answer['refused']}")
        # Blocks may take as long as their upstream blocks to become ready.
        self._socket.settimeout(None)

    def next_block(self):
        """``(task_id, block_id, read, write)``, or None when there are no more."""
        _write(self._stream, {"op": "acquire"})
        answer = _read(self._stream)
        if answer is None:
            raise ConnectionError(
                "the daisy worker this process belongs to ended (its connection closed while "
                "this process asked for a block)"
            )
        block = answer["block"]
        if block is None:
            return None
        task_id, block_id, read, write = block
        return task_id, block_id, tuple(map(tuple, read)), tuple(map(tuple, write))

    def release(self, block_id, error):
        _write(self._stream, {"op": "release", "block_id": block_id, "error": error})

    def found_done(self, block_id):
        _write(self._stream, {"op": "release", "block_id": block_id, "found_done": True})

    def close(self):
        try:
            self._stream.close()
            self._socket.close()
        except OSError:
            pass


def _no_delay(connection):
    """Each message leaves at once. With Nagle's algorithm a client's
    ``acquire`` right after its ``release`` (which has no answer) waited
    for the relay's delayed ACK: 40 ms per block."""
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _write(stream, message):
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()


def _read(stream):
    line = stream.readline(_MAX_LINE)
    if not line:
        return None
    return json.loads(line)


def _gone(connection) -> bool:
    """Whether the client closed its end (a peek finds EOF)."""
    try:
        return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
