"""Local channel: frames per second through a real ``nvpair-wm`` process, on stdio and over
``--ipc``, against the codec alone (``Dispatcher.local`` in this process) on the same frames.

The bench plays the broker. Each repetition writes N lifecycle frames (``frames.stream``: the
lifecycle mix, ~10 % redeliveries, new workload ids every repetition so that nothing is a
duplicate of an earlier repetition) as fast as the process takes them, then one
``manager:status`` request; the repetition ends when its answer is read, so every frame has
been processed (checked: ``counters.framesIn`` grows by N + 1). Writer and reader share one
non-blocking ``selectors`` loop, so neither side of the pipe stalls the other.

* ``stdio``: notifications, as a broker sends them (no output per frame: local events are not
  echoed to the broker);
* ``ipc``: the same over a Unix socket the bench listens on (``--ipc PATH``);
* ``stdio, requests``: every frame carries an ``id``, so the process also writes one response
  line per frame (the write side of the channel under load).

The baseline is the codec alone, in this process, on the same bytes: ``LineBuffer.feed`` of
64 KiB reads + ``Dispatcher.local(line)`` per frame (decode + validate, translate, dedup,
encode of the peer-bound frame), with its own table evolving exactly as the process's does.
Costs are compared per frame in CPU time (the process's from ``/proc``, all threads; the
codec's from ``time.thread_time``): the difference is what the IO layer adds (event loop,
pipe/socket reads, the broker queue, the broadcaster hand-off, the writer).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.frames import stream
from bench.harness import BenchResult, Context, Measurement, Skip, fmt
from bench.procs import WmProc, cpu_seconds

NAME = "local_channel"
DESCRIPTION = "frames/s through a real nvpair-wm on stdio and --ipc, vs the codec alone"

ID_STRIDE = 10_000_000


def payload(n: int, rep: int, requests: bool) -> bytes:
    """N frames with workload ids unique to this repetition (and ``"id"``s if ``requests``)."""
    lines = [line for line, _ in stream(n, seed=5, start_id=(rep + 1) * ID_STRIDE)]
    if requests:
        lines = [line[:-1] + b',"id":%d}' % i for i, line in enumerate(lines)]
    return b"\n".join(lines) + b"\n"


def _status_request(rid: str) -> bytes:
    return b'{"jsonrpc":"2.0","method":"manager:status","id":"%s"}\n' % rid.encode()


def pump(
    wfd: int, rfd: int, data: bytes, marker: bytes, timeout: float = 120.0
) -> tuple[bytes, int]:
    """Write ``data`` to ``wfd`` while reading ``rfd`` (the same fd for a socket) until a line
    containing ``marker`` has been read; returns (that line, lines read in total)."""
    sel = selectors.DefaultSelector()
    os.set_blocking(wfd, False)
    os.set_blocking(rfd, False)
    view = memoryview(data)
    R, W = selectors.EVENT_READ, selectors.EVENT_WRITE

    def watch() -> None:
        want = {rfd: R}
        if view:
            want[wfd] = want.get(wfd, 0) | W
        for fd, ev in want.items():
            try:
                if sel.get_key(fd).events != ev:
                    sel.modify(fd, ev)
            except KeyError:
                sel.register(fd, ev)
        if wfd != rfd and not view and wfd in sel.get_map():
            sel.unregister(wfd)

    buf = b""
    lines = 0
    deadline = time.monotonic() + timeout
    try:
        watch()
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no line with {marker!r} within {timeout:g}s")
            for key, events in sel.select(1.0):
                if events & W and key.fd == wfd and view:
                    with contextlib.suppress(BlockingIOError):
                        view = view[os.write(wfd, view[: 1 << 20]) :]
                    if not view:
                        watch()
                if not (events & R and key.fd == rfd):
                    continue
                try:
                    chunk = os.read(rfd, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    raise EOFError("the process closed its output")
                lines += chunk.count(b"\n")
                buf += chunk
                at = buf.find(marker)
                if at >= 0:
                    end = buf.find(b"\n", at)
                    if end >= 0:
                        if view:
                            raise RuntimeError("answered before everything was written")
                        return buf[buf.rfind(b"\n", 0, at) + 1 : end], lines
                    continue  # the rest of that line is still on its way
                cut = buf.rfind(b"\n") + 1
                buf = buf[cut:]  # keep only an incomplete last line
    finally:
        sel.close()
        os.set_blocking(wfd, True)
        os.set_blocking(rfd, True)


class Channel:
    """A running nvpair-wm and the two ends of its broker channel."""

    def __init__(self, key: str, root: Path) -> None:
        self.key = key
        self.root = root
        self.sock: socket.socket | None = None
        self.listener: socket.socket | None = None
        args = ("--port", "0", "--bind", "127.0.0.1", "--log-level", "warn")
        if key == "ipc":
            path = str(root / "broker.sock")
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(path)
            self.listener.listen(1)
            self.wm = WmProc("--ipc", path, *args, log_path=root / f"{key}.log", stdio=False)
            self.listener.settimeout(15)
            try:
                self.sock, _ = self.listener.accept()
            except TimeoutError:
                raise self.wm.error("did not dial the --ipc socket") from None
            self.sock.settimeout(None)
            self.wfd = self.rfd = self.sock.fileno()
        else:
            self.wm = WmProc(*args, log_path=root / f"{key}.log")
            self.wfd, self.rfd = self.wm.stdin_fd, self.wm.stdout_fd
        pump(self.wfd, self.rfd, b"", b'"ready"', timeout=15)
        self.last_frames_in = self.status("bench-start")[0]["counters"]["framesIn"]

    def status(self, rid: str, data: bytes = b"") -> tuple[dict[str, Any], int]:
        line, lines = pump(
            self.wfd, self.rfd, data + _status_request(rid), b'"id":"%s"' % rid.encode()
        )
        frame = json.loads(line)
        if "result" not in frame:
            raise self.wm.error(f"manager:status failed: {frame}")
        return frame["result"], lines

    def run(self, data: bytes, n: int, rid: str) -> tuple[float, float, int]:
        """(wall seconds, process CPU seconds, lines read) for writing ``data`` (n frames)."""
        cpu0 = cpu_seconds(self.wm.pid)
        t0 = time.perf_counter()
        result, lines = self.status(rid, data)
        t1 = time.perf_counter()
        cpu1 = cpu_seconds(self.wm.pid)
        frames_in = result["counters"]["framesIn"]
        if frames_in - self.last_frames_in != n + 1:
            raise self.wm.error(
                f"framesIn grew by {frames_in - self.last_frames_in}, expected {n + 1}"
            )
        self.last_frames_in = frames_in
        return t1 - t0, cpu1 - cpu0, lines

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)
        self.wm.close()
        for s in (self.sock, self.listener):
            if s is not None:
                s.close()


def _codec(requests: bool) -> tuple[Callable[[bytes], None], Any]:
    from nvpair_wm.codec import LineBuffer, TooLarge  # noqa: PLC0415
    from nvpair_wm.dedup import WorkloadTable  # noqa: PLC0415
    from nvpair_wm.dispatch import Dispatcher  # noqa: PLC0415

    def no_status() -> Any:
        raise AssertionError("not asked")

    disp = Dispatcher(WorkloadTable(), no_status)

    def feed(data: bytes) -> None:
        lb = LineBuffer()
        local = disp.local
        for chunk in ndjson_chunks_of(data):
            for line in lb.feed(chunk):
                if not isinstance(line, TooLarge):
                    local(line)

    return feed, disp


def ndjson_chunks_of(data: bytes, size: int = 65_536) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def run(ctx: Context) -> BenchResult:
    try:
        from nvpair_wm import codec, dispatch  # noqa: F401, PLC0415
    except ImportError as exc:
        raise Skip(f"nvpair_wm is not importable: {exc}") from exc
    n = ctx.size(60_000, 10_000)
    res = BenchResult(NAME, DESCRIPTION)
    res.params["frames_per_rep"] = n
    sample = payload(min(n, 5000), 0, False)
    res.params["bytes_per_frame"] = len(sample) / min(n, 5000)

    variants = [("stdio", False), ("ipc", False), ("stdio_req", True)]
    labels = {
        "stdio": "nvpair-wm process, stdio (notifications)",
        "ipc": "nvpair-wm process, --ipc Unix socket (notifications)",
        "stdio_req": "nvpair-wm process, stdio, requests (one response line per frame)",
        "codec": "codec alone: LineBuffer + Dispatcher.local, in-process",
        "codec_req": "codec alone, requests (responses encoded, not written)",
    }
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}  # CPU seconds per frame
    lines_seen: dict[str, int] = {}
    codecs = {"codec": _codec(False), "codec_req": _codec(True)}
    with tempfile.TemporaryDirectory(prefix="nvpair-bench-local-") as tmp:
        chans = {key: Channel(key, Path(tmp)) for key, _ in variants}
        try:
            warm = max(1, min(ctx.warmup, 1))
            for rep in range(warm + ctx.reps):
                timed = rep >= warm
                for req in (False, True):
                    data = payload(n, rep, req)
                    for key, is_req in variants:
                        if is_req != req:
                            continue
                        dt, dcpu, lines = chans[key].run(data, n, f"end-{rep}")
                        if timed:
                            wall.setdefault(key, []).append(n / dt)
                            cpu.setdefault(key, []).append(dcpu / n)
                            lines_seen[key] = lines_seen.get(key, 0) + lines
                    ckey = "codec_req" if req else "codec"
                    feed, _ = codecs[ckey]
                    w0, c0 = time.perf_counter(), time.thread_time()
                    feed(data)
                    c1, w1 = time.thread_time(), time.perf_counter()
                    if timed:
                        wall.setdefault(ckey, []).append(n / (w1 - w0))
                        cpu.setdefault(ckey, []).append((c1 - c0) / n)
                        wall.setdefault(ckey + "/cpu", []).append(n / (c1 - c0))
        finally:
            for ch in chans.values():
                ch.close()

    for key in ("stdio", "ipc", "stdio_req"):
        res.measurements.append(
            Measurement(
                key,
                labels[key],
                "frames/s",
                wall[key],
                role="subject" if key == "stdio" else "info",
                note="wall clock: first byte written -> manager:status answer read",
            )
        )
    for key in ("codec", "codec_req"):
        res.measurements.append(
            Measurement(
                key,
                labels[key],
                "frames/s",
                wall[key + "/cpu"],
                role="baseline" if key == "codec" else "info",
                note="per CPU-second of this thread (wall-clock beside)",
                wall=wall[key],
            )
        )
    for key in ("stdio", "ipc", "stdio_req", "codec", "codec_req"):
        res.measurements.append(
            Measurement(
                f"{key}/ns",
                f"{labels[key]}: CPU per frame",
                "ns/frame",
                [x * 1e9 for x in cpu[key]],
                higher_is_better=False,
                role="info",
                note="process CPU (all threads, /proc) / frames"
                if not key.startswith("codec")
                else "thread CPU / frames",
            )
        )
    res.ratio("stdio", "codec")
    res.ratio("ipc", "codec")
    res.ratio("stdio_req", "codec_req")
    res.ratio("stdio/ns", "codec/ns")
    res.ratio("ipc/ns", "codec/ns")
    res.ratio("stdio_req/ns", "codec_req/ns")

    rows = []
    for key, base in (("stdio", "codec"), ("ipc", "codec"), ("stdio_req", "codec_req")):
        p = res.get(f"{key}/ns").median
        c = res.get(f"{base}/ns").median
        rows.append(
            [
                labels[key],
                fmt(c),
                fmt(p),
                fmt(p - c),
                f"{100 * (p - c) / p:.0f} %",
                fmt(res.get(key).median),
                f"{res.get(key).median * p * 1e-9:.2f}",
            ]
        )
    res.tables.append(
        {
            "title": "what the IO layer adds, CPU ns per frame (medians)",
            "columns": [
                "channel",
                "codec alone",
                "process",
                "IO layer adds",
                "share of the process",
                "frames/s",
                "process CPU-s/s",
            ],
            "rows": rows,
        }
    )
    res.params["lines_read"] = lines_seen
    res.notes.append(
        f"{n:,} frames per repetition ({res.params['bytes_per_frame']:.0f} B each, the "
        "lifecycle mix with ~10 % redeliveries), new workload ids every repetition; "
        f"{max(1, min(ctx.warmup, 1))} warm-up repetition excluded; every repetition checked: "
        "framesIn grew by N + 1"
    )
    res.notes.append(
        "the process's rate is bounded by its single event-loop thread: 'process CPU-s/s' near "
        "1.0 means it was busy all along, lower means it waited (for the bench, or for a CPU "
        "on this shared machine)"
    )
    return res
