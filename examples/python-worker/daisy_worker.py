#!/usr/bin/env python3
"""A daisy worker in pure Python 3 (standard library only), written from
docs/protocol.md alone: an example for writing a worker in any language.

    python3 daisy_worker.py --context-file daisy_run/NAME/context.json --task ID
    DAISY_CONTEXT='{...}' python3 daisy_worker.py

Exit status: 0 no more work (or stopped by SIGTERM/SIGINT), 1 driver
unreachable or lost, or the task's code cannot run, 2 no usable context,
3 rejected by the driver.
"""
import argparse, json, os, queue, signal, socket, struct, subprocess, sys, threading

PROTOCOL, MAX_FRAME = 1, 16 * 1024 * 1024
VERBOSE = False


def log(*what):
    print("daisy_worker.py:", *what, file=sys.stderr, flush=True)


# ---- MessagePack: the subset the protocol uses (nil, bool, int, float, str,
# bin, array, map). Integers get their smallest encoding, as the driver does.
INTS = [(0xcc, ">B", 0, 2**8 - 1), (0xcd, ">H", 0, 2**16 - 1), (0xce, ">I", 0, 2**32 - 1),
        (0xcf, ">Q", 0, 2**64 - 1), (0xd0, ">b", -2**7, -1), (0xd1, ">h", -2**15, -1),
        (0xd2, ">i", -2**31, -1), (0xd3, ">q", -2**63, -1)]


def header(n, fix, fix_max, m8, m16, m32):
    if n < fix_max: return bytes([fix | n])
    if m8 and n < 2**8: return bytes([m8, n])
    return bytes([m16]) + struct.pack(">H", n) if n < 2**16 else bytes([m32]) + struct.pack(">I", n)


def pack(v):
    if v is None or v is True or v is False: return {None: b"\xc0", False: b"\xc2", True: b"\xc3"}[v]
    if isinstance(v, int):
        if -32 <= v < 0x80: return struct.pack(">b" if v < 0 else ">B", v)
        for marker, fmt, lo, hi in INTS:
            if lo <= v <= hi: return bytes([marker]) + struct.pack(fmt, v)
        raise ValueError(f"integer out of range: {v}")
    if isinstance(v, float): return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str): v = v.encode(); return header(len(v), 0xa0, 32, 0xd9, 0xda, 0xdb) + v
    if isinstance(v, bytes): return header(len(v), 0, 0, 0xc4, 0xc5, 0xc6) + v
    if isinstance(v, (list, tuple)):
        return header(len(v), 0x90, 16, None, 0xdc, 0xdd) + b"".join(map(pack, v))
    if isinstance(v, dict):
        return header(len(v), 0x80, 16, None, 0xde, 0xdf) + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(f"cannot encode {type(v).__name__}")


FIXED = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b", 0xd1: ">h",
         0xd2: ">i", 0xd3: ">q", 0xca: ">f", 0xcb: ">d"}
SIZED = {0xd9: (">B", "str"), 0xda: (">H", "str"), 0xdb: (">I", "str"), 0xc4: (">B", "bin"),
         0xc5: (">H", "bin"), 0xc6: (">I", "bin"), 0xdc: (">H", "array"), 0xdd: (">I", "array"),
         0xde: (">H", "map"), 0xdf: (">I", "map")}  # marker: (length format, what follows)


def unpack(data):
    try:
        return unpack_at(data, 0)[0]
    except (IndexError, struct.error) as e:
        raise ValueError(f"truncated MessagePack value: {e}") from e


def unpack_at(b, i):
    """The value starting at b[i], and where the next one starts."""
    t, i = b[i], i + 1
    if t <= 0x7f: return t, i
    if t >= 0xe0: return t - 0x100, i
    if t in (0xc0, 0xc2, 0xc3): return {0xc0: None, 0xc2: False, 0xc3: True}[t], i
    if t in FIXED: return struct.unpack_from(FIXED[t], b, i)[0], i + struct.calcsize(FIXED[t])
    if t in SIZED:
        fmt, kind = SIZED[t]
        n, i = struct.unpack_from(fmt, b, i)[0], i + struct.calcsize(fmt)
    elif 0x80 <= t <= 0x8f: kind, n = "map", t & 0x0f
    elif 0x90 <= t <= 0x9f: kind, n = "array", t & 0x0f
    elif 0xa0 <= t <= 0xbf: kind, n = "str", t & 0x1f
    else: raise ValueError(f"unsupported MessagePack marker 0x{t:02x}")
    if kind in ("str", "bin"):
        if i + n > len(b): raise ValueError("truncated MessagePack value")
        raw = bytes(b[i:i + n])
        return (raw.decode() if kind == "str" else raw), i + n
    items = []
    for _ in range(2 * n if kind == "map" else n):
        item, i = unpack_at(b, i)
        items.append(item)
    return (dict(zip(items[::2], items[1::2])) if kind == "map" else items), i


# ---- Frames: a 4-byte big-endian payload length, then one MessagePack map.
class Connection:
    def __init__(self, sock):
        self.sock, self.lock = sock, threading.RLock()  # re-entrant: a signal handler sends too

    def send(self, message):
        if VERBOSE: log("->", json.dumps({k: "***" if k == "token" else v for k, v in message.items()}))
        payload = pack(message)
        with self.lock:  # one frame, one write: frames of two threads never interleave
            self.sock.sendall(struct.pack(">I", len(payload)) + payload)

    def receive(self):
        (n,) = struct.unpack(">I", self.exactly(4))
        if n > MAX_FRAME: raise ValueError(f"frame of {n} bytes exceeds the limit")
        message = unpack(self.exactly(n))
        if VERBOSE: log("<-", json.dumps(message))
        return message

    def exactly(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk: raise EOFError("the driver closed the connection")
            data += chunk
        return data


def connect(addresses, rounds=8):
    """The first address that answers, trying them all in rounds with backoff."""
    for attempt in range(rounds):
        for address in addresses:
            host, port = address.rsplit(":", 1)
            try:
                sock = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except OSError as e:
                error = f"{address}: {e}"
        threading.Event().wait(min(0.2 * 2**attempt, 5))
    raise ConnectionError(f"cannot reach the driver ({error})")


# ---- The task's code: a block command, run once per block.
def render(argument, block):
    """The argument with {placeholders} filled in; {{ and }} are literal braces."""
    join = lambda v: ",".join(map(str, v))
    r, w = block["read_roi"], block["write_roi"]
    fields = {"task_id": block["task_id"], "block_id": str(block["block_id"]),
              "read_offset": join(r["offset"]), "read_shape": join(r["shape"]),
              "write_offset": join(w["offset"]), "write_shape": join(w["shape"])}
    out, i = [], 0
    while i < len(argument):
        if argument[i:i + 2] in ("{{", "}}"): out.append(argument[i]); i += 2
        elif argument[i] == "{":
            end = argument.find("}", i)
            if end < 0 or argument[i + 1:end] not in fields:
                raise ValueError(f"unknown placeholder or unmatched brace in {argument!r}")
            out.append(fields[argument[i + 1:end]]); i = end + 1
        elif argument[i] == "}": raise ValueError(f"unmatched brace in {argument!r}")
        else: out.append(argument[i]); i += 1
    return "".join(out)


def run_block(code, block):
    """None if the block succeeded, else why it failed."""
    compact = lambda v: json.dumps(v, separators=(",", ":"))
    env = dict(os.environ, **code.get("env") or {}, DAISY_BLOCK=compact(block),
               DAISY_TASK_ID=block["task_id"], DAISY_BLOCK_ID=str(block["block_id"]),
               DAISY_READ_ROI=compact(block["read_roi"]), DAISY_WRITE_ROI=compact(block["write_roi"]))
    argv = [render(a, block) for a in code["argv"]]
    try:  # a process group of its own, so a timeout stops what it started too
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        return f"cannot start {argv[0]!r}: {e}"
    try:
        _, err = proc.communicate(timeout=code.get("timeout_s"))
    except subprocess.TimeoutExpired:  # SIGTERM, SIGKILL 5 s later
        os.killpg(proc.pid, signal.SIGTERM)
        try: proc.communicate(timeout=5)
        except subprocess.TimeoutExpired: os.killpg(proc.pid, signal.SIGKILL); proc.communicate()
        return f"timed out after {code['timeout_s']} s"
    sys.stderr.buffer.write(err)
    tail = "\n".join(err.decode(errors="replace").strip().splitlines()[-20:])
    return None if proc.returncode == 0 else f"exit status {proc.returncode}; stderr tail: {tail}"


def check_code(code, task):
    if code["kind"] != "block_command" or not code["argv"]:
        raise ValueError(f"this example runs block commands only, not {code['kind']}")
    roi = {"offset": [0], "shape": [1]}
    for argument in code["argv"]:
        render(argument, {"task_id": task, "block_id": 0, "read_roi": roi, "write_roi": roi})


# ---- The worker.
def serve(conn, welcome, batch):
    """Takes and runs blocks until the driver says shutdown (0) or is lost (1)."""
    interval, code = welcome["heartbeat_interval_s"], welcome["code"]
    conn.sock.settimeout(interval * welcome["heartbeat_misses"])  # silence = driver lost
    answers, stop = queue.Queue(), threading.Event()

    def reader():  # the only reader of the socket; passes on answers to acquire_blocks
        try:
            while True:
                message = conn.receive()
                if message.get("type") in ("blocks", "shutdown"): answers.put(message)
                elif message.get("type") == "error": log("the driver refused a message:", message["reason"])
        except (OSError, EOFError, ValueError) as e:  # a timeout is an OSError
            answers.put({"type": "lost", "reason": str(e) or "the driver went silent"})

    def heartbeat():  # also while a block runs
        while not stop.wait(interval):
            try: conn.send({"type": "heartbeat"})
            except OSError: return

    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=heartbeat, daemon=True).start()
    # SIGTERM/SIGINT: take no more blocks. The driver answers the next (or a
    # parked) acquire_blocks with shutdown; a running block finishes first.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda n, _: conn.send({"type": "draining", "reason": f"received {signal.Signals(n).name}"}))
    try:
        while True:
            conn.send({"type": "acquire_blocks", "max": batch})
            answer = answers.get()
            if answer["type"] == "lost":
                log("lost the driver:", answer["reason"]); return 1
            if answer["type"] == "shutdown":
                log("no more work:", answer["reason"]); break
            for block in answer["blocks"]:
                error = run_block(code, block)
                result = {"block_id": block["block_id"], "ok": error is None}
                if error: result["error"] = error; log(f"block {block['block_id']} failed: {error}")
                conn.send({"type": "release_blocks", "results": [result]})
    except OSError as e:
        log("lost the driver:", e); return 1
    # Leave cleanly: half-close, then read until the driver closes too
    # (closing with unread input would reset the connection: a lost worker).
    stop.set()
    with conn.lock:
        conn.sock.shutdown(socket.SHUT_WR)
    try:
        while answers.get(timeout=10)["type"] != "lost": pass
    except queue.Empty: pass
    return 0


def main():
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context-file", help="e.g. <run-dir>/context.json (else DAISY_CONTEXT)")
    parser.add_argument("--task", help="the task to serve (overrides the context's task_id)")
    parser.add_argument("--batch", type=int, default=1, help="blocks to ask for at a time")
    parser.add_argument("--verbose", action="store_true", help="print every message (token hidden)")
    parser.add_argument("--log-dir", help=argparse.SUPPRESS)  # given to launched workers; unused
    args = parser.parse_args()
    VERBOSE = args.verbose
    text = os.environ.pop("DAISY_CONTEXT", None)  # user code must not inherit the token
    try:
        if args.context_file:
            with open(args.context_file) as f: text = f.read()
        context = json.loads(text or "null")
        task = args.task or context.get("task_id")
        if context["protocol"] != PROTOCOL or not context["addresses"] or not task:
            raise ValueError(f"need protocol {PROTOCOL}, an address and a task")
    except Exception as e:
        log(f"no usable context (give --context-file F --task T, or DAISY_CONTEXT): {e!r}"); return 2

    try:
        conn = Connection(connect(context["addresses"]))
        conn.sock.settimeout(30)
        conn.send({"type": "hello", "protocol": PROTOCOL, "token": context["token"], "role": "worker",
                   "task_id": task, "worker_id": context.get("worker_id"),
                   "job_id": os.environ.get("SLURM_JOB_ID") or os.environ.get("LSB_JOBID"),
                   "host": socket.gethostname(), "pid": os.getpid()})
        welcome = conn.receive()
    except (OSError, EOFError, ValueError) as e:
        log("cannot join the run:", e); return 1
    if welcome.get("type") == "rejected":
        log("rejected by the driver:", welcome["reason"]); return 3
    if welcome.get("type") != "welcome":
        log("expected a welcome, got", welcome.get("type")); return 1
    log(f"connected as worker {welcome['worker_id']} of task {task!r}")
    try:  # check the code before taking blocks: a typo fails once, not once per block
        check_code(welcome["code"], task)
    except ValueError as e:
        conn.send({"type": "cannot_serve", "reason": f"its code cannot run: {e}"}); log(e); return 1
    try:
        return serve(conn, welcome, args.batch)
    finally:
        conn.sock.close()


if __name__ == "__main__":
    sys.exit(main())
