"""The implementation under test as a process, driven as its broker drives it.

The broker channel is stdio or, with ``--ipc PATH``, a Unix socket this side listens on and the
implementation dials. A reader thread splits what the implementation writes into lines; it can
be paused, so that the implementation's writes block and its queue toward the broker fills (the
only way to reach 503 with the spec's own flags).

"What did the implementation answer to this input?" is decided by a barrier: after the input,
the broker sends a ``manager:status`` request with a fresh id; every line written before that
request's response belongs to the input. Responses on the local channel come in input order, so
"no response" is an empty list, not a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from nvpair_wm.errors import BrokerError  # defined there; still importable from here

WAIT: Final = 10.0
BARRIER_PREFIX: Final = "conformance-barrier-"


class Implementation:
    """COMMAND started with the given flags; its broker channel; its stderr kept for reports."""

    def __init__(
        self,
        command: Sequence[str],
        flags: Sequence[str],
        *,
        ipc: Path | None = None,
        timeout: float = WAIT,
    ) -> None:
        self.argv = [*command, *flags]
        self.timeout = timeout
        self._listener: socket.socket | None = None
        if ipc is not None:
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._listener.bind(str(ipc))
            self._listener.listen(1)
            self._listener.settimeout(timeout)
            self.argv += ["--ipc", str(ipc)]
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE if ipc is None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.stderr_tail: deque[str] = deque(maxlen=30)
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._reading = threading.Event()
        self._reading.set()
        self._sock: socket.socket | None = None
        self._barrier = 0
        threading.Thread(target=self._pump_stderr, daemon=True).start()
        if self._listener is None:
            assert self.proc.stdout is not None
            self._reader = self.proc.stdout
            threading.Thread(target=self._pump_lines, args=(self.proc.stdout,), daemon=True).start()
        else:
            threading.Thread(target=self._drain_stdout, daemon=True).start()
            try:
                self._sock, _ = self._listener.accept()
            except TimeoutError:
                self.kill()
                raise BrokerError(
                    f"did not connect to the --ipc socket within {timeout}s" + self.stderr_excerpt()
                ) from None
            finally:
                self._listener.close()
            self._sock.settimeout(None)
            threading.Thread(
                target=self._pump_lines, args=(self._sock.makefile("rb"),), daemon=True
            ).start()

    # -- reading --------------------------------------------------------------------------------

    def _pump_lines(self, stream: Any) -> None:
        while True:
            self._reading.wait()
            line = stream.readline()
            if not line:
                self._lines.put(None)
                return
            self._lines.put(line)

    def _drain_stdout(self) -> None:
        """In --ipc mode stdout is not the protocol; read it so that a write never blocks."""
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr_tail.append(raw.decode(errors="replace").rstrip("\n"))

    def stderr_excerpt(self) -> str:
        tail = list(self.stderr_tail)[-8:]
        return ("\nstderr (last lines):\n  " + "\n  ".join(tail)) if tail else ""

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    def next_line(self, timeout: float | None = None) -> bytes:
        timeout = timeout or self.timeout
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise BrokerError(f"nothing written to the broker within {timeout}s") from None
        if line is None:
            self._lines.put(None)  # stay closed for later readers
            raise BrokerError(
                f"the broker channel closed (exit status {self.proc.poll()})"
                + self.stderr_excerpt()
            )
        return line

    # -- writing --------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        try:
            if self._sock is not None:
                self._sock.sendall(data)
            else:
                assert self.proc.stdin is not None
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
        except OSError as exc:
            raise BrokerError(
                f"cannot write to the broker channel: {exc}" + self.stderr_excerpt()
            ) from exc

    def collect(self, timeout: float | None = None) -> list[Any]:
        """Send a barrier request; return every line written before its response, parsed.

        A line that is not JSON text is returned as the string ``"<not JSON> ..."``: the matchers
        then refuse it, and the report shows it.
        """
        self._barrier += 1
        rid = f"{BARRIER_PREFIX}{self._barrier}"
        self.write(
            json.dumps({"jsonrpc": "2.0", "method": "manager:status", "id": rid}).encode() + b"\n"
        )
        out: list[Any] = []
        while True:
            line = self.next_line(timeout)
            try:
                value = json.loads(line)
            except ValueError:
                out.append(f"<not JSON> {line[:200]!r}")
                continue
            if isinstance(value, dict) and value.get("id") == rid:
                if "result" not in value:
                    raise BrokerError(f"the barrier manager:status was refused: {value}")
                return out
            out.append(value)

    def read_startup(self, timeout: float | None = None) -> Any:
        """The first line the implementation writes (``ready``), parsed."""
        line = self.next_line(timeout)
        try:
            return json.loads(line)
        except ValueError:
            return f"<not JSON> {line[:200]!r}"

    # -- ending ---------------------------------------------------------------------------------

    def close_channel(self) -> None:
        with contextlib.suppress(OSError):
            if self._sock is not None:
                self._sock.shutdown(socket.SHUT_WR)
            elif self.proc.stdin is not None:
                self.proc.stdin.close()

    def rest(self) -> list[Any]:
        """Every line written until the channel closes (after close_channel), parsed."""
        out: list[Any] = []
        while True:
            line = self._lines.get(timeout=self.timeout)
            if line is None:
                self._lines.put(None)
                return out
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append(f"<not JSON> {line[:200]!r}")

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=WAIT)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if self._sock is not None:
            self._sock.close()
