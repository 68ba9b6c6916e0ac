"""Real processes for the phase-2 benchmarks: nvpair-wm nodes, CPU and IO accounting, pipes.

Everything here drives processes the way their real neighbours would: a broker on stdin/stdout
(or a Unix socket), peers over mutual TLS. Nothing sleeps to synchronise: readiness is a frame
(``ready``, a ``manager:status`` answer), and a process's CPU time comes from ``/proc``.

* :class:`WmProc` - one ``nvpair-wm`` subprocess on stdio: send bytes, read frames, ask
  ``manager:status``; stderr goes to a log file (shown when something fails).
* :class:`Drain` - a thread that empties a process's stdout and counts its lines, so a server
  under load never stalls on a full pipe (its broker side must be read).
* :func:`cpu_seconds` / :func:`io_bytes` - CPU time (all threads, nanosecond resolution from
  ``schedstat``) and bytes read/written by syscalls, of any process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import ROOT

F_SETPIPE_SZ = 1031
PIPE_SIZE = 1 << 20
WAIT = 15.0
_TICK = os.sysconf("SC_CLK_TCK")


class ProcError(RuntimeError):
    """A benchmark process did not do what it should (with its log tail)."""


# ------------------------------------------------------------------------------------- accounting


def cpu_seconds(pid: int) -> float:
    """CPU time of every live thread of ``pid`` (schedstat: ns), else utime+stime (ticks)."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        if total:
            return total / 1e9
    except OSError:
        pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def io_bytes(pid: int) -> tuple[int, int]:
    """(bytes read, bytes written) by syscalls of ``pid`` (``rchar``/``wchar``: sockets and
    pipes included, before any caching)."""
    rchar = wchar = 0
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                rchar = int(line.split()[1])
            elif line.startswith("wchar:"):
                wchar = int(line.split()[1])
    return rchar, wchar


def grow_pipe(fd: int, size: int = PIPE_SIZE) -> None:
    """A 1 MiB pipe instead of 64 KiB: fewer stalls of writer and reader on each other."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, F_SETPIPE_SZ, size)


# ---------------------------------------------------------------------------------------- nvpair-wm


# Flags added to every nvpair-wm a benchmark starts (``python -m bench --wm-arg FLAG``), e.g.
# ``--wm-arg=--metrics=127.0.0.1:0`` to measure what a feature costs, in the same benchmarks.
EXTRA_ARGS: list[str] = []


class WmProc:
    """One ``nvpair-wm`` process; its broker is this object (stdin/stdout pipes) unless
    ``stdio=False`` (``--ipc``: stdin and stdout are /dev/null)."""

    def __init__(
        self, *args: str, log_path: Path, stdio: bool = True, env: dict[str, str] | None = None
    ) -> None:
        self.args = [sys.executable, "-m", "nvpair_wm", *args, *EXTRA_ARGS]
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        pipe = subprocess.PIPE if stdio else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            self.args, stdin=pipe, stdout=pipe, stderr=self._log, cwd=ROOT, close_fds=True, env=env
        )
        self.pid = self.proc.pid
        self.buf = bytearray()
        self.other: list[dict[str, Any]] = []  # frames read while waiting for a response
        self._next_id = 0
        if stdio:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.stdin_fd = self.proc.stdin.fileno()
            self.stdout_fd = self.proc.stdout.fileno()
            grow_pipe(self.stdin_fd)
            grow_pipe(self.stdout_fd)

    # -- broker side --------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.stdin_fd, view) :]

    def send_frame(self, frame: Any) -> None:
        self.send(json.dumps(frame, separators=(",", ":")).encode() + b"\n")

    def recv_line(self, timeout: float = WAIT) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[: nl + 1]
                return line
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.stdout_fd], [], [], left)[0]:
                raise self.error(f"no frame within {timeout:g}s")
            chunk = os.read(self.stdout_fd, 1 << 20)
            if not chunk:
                raise self.error("stdout closed")
            self.buf += chunk

    def recv(self, timeout: float = WAIT) -> Any:
        return json.loads(self.recv_line(timeout))

    def request(self, method: str, params: Any = None, timeout: float = WAIT) -> Any:
        """A request; returns its response (frames read before it go to ``other``)."""
        self._next_id += 1
        rid = f"bench-{self._next_id}"
        frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": rid}
        if params is not None:
            frame["params"] = params
        self.send_frame(frame)
        deadline = time.monotonic() + timeout
        while True:
            f = self.recv(max(0.0, deadline - time.monotonic()))
            if f.get("id") == rid:
                if "error" in f:
                    raise self.error(f"{method} failed: {f['error']}")
                return f["result"]
            self.other.append(f)

    def status(self) -> Any:
        return self.request("manager:status")

    def expect_ready(self) -> None:
        f = self.recv()
        if f.get("method") != "ready":
            raise self.error(f"expected ready, got {f}")

    # -- the process --------------------------------------------------------------------------

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def log_tail(self, lines: int = 15) -> str:
        self._log.flush()
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def error(self, what: str) -> ProcError:
        code = self.proc.poll()
        state = "running" if code is None else f"exited {code}"
        return ProcError(f"nvpair-wm ({state}): {what}; log tail:\n{self.log_tail()}")

    def close(self, timeout: float = 10.0) -> int | None:
        """EOF on stdin (the node then exits 0), else SIGTERM, else SIGKILL."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
        with contextlib.suppress(OSError):
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        self._log.close()
        return code


class Drain(threading.Thread):
    """Reads a file descriptor until EOF, counting lines (a broker that keeps up)."""

    def __init__(self, fd: int, name: str = "drain") -> None:
        super().__init__(name=name, daemon=True)
        self.fd = fd
        self.lines = 0
        self.bytes = 0

    def run(self) -> None:
        read, fd = os.read, self.fd
        with contextlib.suppress(OSError):
            while chunk := read(fd, 1 << 20):
                self.lines += chunk.count(b"\n")
                self.bytes += len(chunk)


def python_module(module: str, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
    """``python -m module args`` from the repository root (for bench helpers)."""
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, close_fds=True, **kw)
