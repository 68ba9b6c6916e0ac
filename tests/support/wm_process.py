"""A real ``nvpair-wm`` subprocess driven as its broker would drive it (stdio).

Reader threads turn stdout lines into parsed frames on a queue, so tests wait for events with a
timeout instead of sleeping. Absence is asserted by ordering: send a request after the frame
that must get no answer, and check the next frame out is that request's response.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

WAIT = 10.0


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``nvpair-wm`` to completion with no stdin (it exits 0 at once on EOF)."""
    return subprocess.run(
        [sys.executable, "-m", "nvpair_wm", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@contextmanager
def ipc_broker(path: Path, timeout: float = WAIT) -> Iterator[tuple[socket.socket, Any]]:
    """A broker listening on ``path`` for a node started with ``--ipc``: accepts the node's one
    connection and reads its ``ready``; yields the connection and its line reader."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        listener.settimeout(timeout)
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(timeout)
            reader = conn.makefile("rb")
            ready = json.loads(reader.readline())
            assert ready["method"] == "ready", ready
            yield conn, reader


class WmProcess:
    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        prefix: Sequence[str] = (),
        program: Sequence[str] | None = None,
    ):
        """``prefix`` runs the daemon through another command, e.g. ``ip netns exec NS``
        (which execs, so the pid stays the node's own). ``program``: another daemon than this
        tree's (an earlier release's ``nvpair-wm``, a stand-in script)."""
        daemon = [sys.executable, "-m", "nvpair_wm"] if program is None else list(program)
        self.args = [*prefix, *daemon, *args]
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )
        self.raw_lines: queue.Queue[bytes] = queue.Queue()
        self.stderr_lines: queue.Queue[str] = queue.Queue()
        self.stderr_log: list[str] = []
        self.stdout_log: list[bytes] = []
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()
        self._next_id = 1000

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout_log.append(line)
            self.raw_lines.put(line)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            self.stderr_log.append(line)
            self.stderr_lines.put(line)

    def send(self, data: bytes | str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data.encode() if isinstance(data, str) else data)
        self.proc.stdin.flush()

    def send_frame(self, frame: Any) -> None:
        self.send(json.dumps(frame).encode() + b"\n")

    def recv(self, timeout: float = WAIT) -> Any:
        try:
            line = self.raw_lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no frame within {timeout}s; stderr:\n" + "\n".join(self.stderr_log[-20:])
            ) from None
        return json.loads(line)

    def request(self, method: str, params: Any = None, *, keep: list[Any] | None = None) -> Any:
        """Send a request and return its response. Without ``keep`` the next frame must be the
        response; with it, notifications written before the response are appended to ``keep``."""
        self._next_id += 1
        rid = self._next_id
        frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": rid}
        if params is not None:
            frame["params"] = params
        self.send_frame(frame)
        while True:
            reply = self.recv()
            if reply.get("id") == rid or keep is None:
                break
            keep.append(reply)
        assert reply.get("id") == rid, f"expected the response to {frame}, got {reply}"
        return reply

    def status(self) -> Any:
        return self.request("manager:status")["result"]

    def wait_stderr(self, needle: str, timeout: float = WAIT) -> str:
        for line in self.stderr_log:
            if needle in line:
                return line
        deadline = time.monotonic() + timeout  # for the whole wait, not per line read
        while True:
            try:
                line = self.stderr_lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"{needle!r} not logged within {timeout}s:\n" + "\n".join(self.stderr_log)
                ) from None
            if needle in line:
                return line

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def wait(self, timeout: float = WAIT) -> int:
        return self.proc.wait(timeout=timeout)

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)

    def __enter__(self) -> WmProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
