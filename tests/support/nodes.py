"""A real ``nvpair-wm`` subprocess on a cluster directory (:class:`Node`), the clients the end to
end tests talk to it with (curl, h11 over TLS), and the fence that shows what did not reach the
broker."""

from __future__ import annotations

import http.client
import itertools
import json
import queue
import signal
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.curl import CurlResult, base_args, parse
from tests.support.frames import event, workload
from tests.support.wm_process import WAIT, WmProcess

if TYPE_CHECKING:
    from tests.conftest import CertPair
PROTOCOLS = ["--http2", "--http1.1"]
EVENTS = "/v1/workloads/events"
JSON_HEADERS = {"Content-Type": "application/json"}
_ids = itertools.count(1)


def uid(prefix: str) -> str:
    """A workload id no other test of this run uses."""
    return f"{prefix}-{next(_ids)}"


class Node(WmProcess):
    """A WmProcess whose stdout pump can be paused (``reading``), noting stdout EOF.

    Pausing stops ``readline`` calls, so the pipe (and then the node's write buffer and its
    bounded queue toward the broker) fills up exactly as with a broker that stops reading.
    """

    def __init__(self, *args: str) -> None:
        self.reading = threading.Event()
        self.reading.set()
        self.stdout_eof = threading.Event()
        self.signalled = False
        super().__init__(*args)
        self.port = 0

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        try:
            while True:
                self.reading.wait()
                line = self.proc.stdout.readline()
                if not line:
                    return
                self.stdout_log.append(line)
                self.raw_lines.put(line)
        finally:
            self.stdout_eof.set()

    def url(self, path: str = EVENTS) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def recv_line(self) -> bytes:
        """The next stdout line, as the broker reads it."""
        try:
            return self.raw_lines.get(timeout=WAIT)
        except queue.Empty:
            tail = "\n".join(self.stderr_log[-20:])
            raise AssertionError(f"no frame within {WAIT}s; stderr:\n{tail}") from None

    def upsert(self) -> dict[str, Any]:
        """The next stdout frame, which must be a ``workloads:upsert``; its workloadInfo."""
        frame = self.recv()
        assert frame.get("method") == "workloads:upsert", frame
        info: dict[str, Any] = frame["params"]["workloadInfo"]
        return info

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        self.signalled = True
        super().terminate(sig)

    def sigterm_and_wait(self) -> int:
        """Stop it (once: a second SIGTERM during exit would kill it) and wait for its exit."""
        self.reading.set()
        if not self.signalled:
            self.terminate(signal.SIGTERM)
        return self.wait(WAIT)


def assert_only_jsonrpc(lines: list[bytes]) -> None:
    """Every stdout line is one complete JSON-RPC 2.0 frame (or a batch of them)."""
    for line in lines:
        assert line.endswith(b"\n") and line.count(b"\n") == 1, line[:200]
        decoded = json.loads(line)
        for frame in decoded if isinstance(decoded, list) else [decoded]:
            assert isinstance(frame, dict) and frame.get("jsonrpc") == "2.0", line[:200]
            assert "method" in frame or "id" in frame, line[:200]


StartNode = Callable[..., Node]


def launch(cluster_dir: Path, *extra: str) -> Node:
    """``nvpair-wm --bind 127.0.0.1 --port 0 --cluster-dir cluster_dir *extra``, started; the
    caller keeps it (for :func:`finish`) before :func:`wait_ready`."""
    return Node("--bind", "127.0.0.1", "--port", "0", "--cluster-dir", str(cluster_dir), *extra)


def wait_ready(node: Node) -> Node:
    """Until ``ready``; then its port, from ``manager:status``."""
    ready = node.recv()
    assert ready.get("method") == "ready", ready
    status = node.status()
    assert isinstance(status["port"], int) and status["port"] > 0, status
    node.port = status["port"]
    return node


def finish(node: Node) -> None:
    """SIGTERM → exit 0, stdout read to EOF, only JSON-RPC frames on it."""
    with node:
        code = node.sigterm_and_wait()
        assert node.stdout_eof.wait(WAIT), "stdout not closed after exit"
        assert_only_jsonrpc(node.stdout_log)
        assert code == 0, "\n".join(node.stderr_log[-30:])


@dataclass
class CurlRun:
    code: int
    results: list[CurlResult]
    stderr: str

    @property
    def one(self) -> CurlResult:
        assert self.code == 0, self.stderr
        [result] = self.results
        return result


def curl(
    proto: str,
    urls: list[str],
    *,
    pair: CertPair | None,
    data: Path | None = None,
    uploads: list[Path] | None = None,
    ctype: str = "application/json",
) -> CurlRun:
    """Run curl once (several URLs reuse one connection). ``data``: one body for every URL;
    ``uploads``: one file per URL, streamed (``-T``), so a FIFO makes curl wait for us."""
    cert, key = (None, None) if pair is None else (pair.cert, pair.key)
    args = base_args(proto, WAIT, cert, key)
    args += ["-H", f"Content-Type: {ctype}"]
    if data is not None:
        args += ["--data-binary", f"@{data}", *urls]
    else:
        assert uploads is not None and len(uploads) == len(urls)
        args += ["-X", "POST"]
        for upload, url in zip(uploads, urls, strict=True):
            args += ["-T", str(upload), url]
    proc = subprocess.run(args, capture_output=True, timeout=WAIT * 2, check=False)
    return CurlRun(proc.returncode, parse(proc.stdout), proc.stderr.decode())


def post(proto: str, node: Node, body: bytes, pair: CertPair, tmp: Path) -> CurlResult:
    """One curl POST; asserts the HTTP version that was negotiated."""
    path = tmp / f"body-{next(_ids)}.json"
    path.write_bytes(body)
    result = curl(proto, [node.url()], pair=pair, data=path).one
    assert result.http_version == ("2" if proto == "--http2" else "1.1")
    return result


def client_ssl(pair: CertPair, alpn: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(pair.cert, pair.key)
    ctx.set_alpn_protocols([alpn])
    return ctx


def tls_socket(port: int, pair: CertPair, alpn: str) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    try:
        sock = client_ssl(pair, alpn).wrap_socket(raw)
    except BaseException:
        raw.close()
        raise
    assert sock.selected_alpn_protocol() == alpn
    return sock


def fence(node: Node, pair: CertPair) -> None:
    """Nothing else reached the broker: a fresh event from ``pair`` is the next stdout frame."""
    wid = uid("fence")
    conn = http.client.HTTPSConnection(
        "127.0.0.1", node.port, timeout=WAIT, context=client_ssl(pair, "http/1.1")
    )
    try:
        conn.request("POST", EVENTS, event("workload:submitted", workload(id=wid)), JSON_HEADERS)
        assert conn.getresponse().status == 202
    finally:
        conn.close()
    assert node.upsert()["id"] == wid
