"""Running real curl against the inter-node server, and reading what it printed.

curl is started with ``-D -`` (every header block, 1xx ones too) and a ``-w`` marker after each
transfer, so one invocation with several URLs (which reuse one connection) can be split back
into one :class:`CurlResult` per request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

WRITE_OUT = "\n##%{http_code} %{num_connects} %{http_version}##\n"
_MARK = re.compile(rb"\n##(\d{3}) (\d+) ([\d.]+)##\n")


@dataclass
class CurlResult:
    status: int  # 0: no HTTP response (e.g. the handshake failed)
    body: bytes
    new_connections: int  # 0 = this request reused an open connection
    http_version: str
    headers: dict[str, str] = field(default_factory=dict)


def base_args(proto: str, timeout: float, cert: Path | None, key: Path | None) -> list[str]:
    """curl's arguments up to the request itself: protocol, output format, client cert."""
    args = ["curl", "-sS", "-k", proto, "--max-time", str(timeout), "-D", "-", "-w", WRITE_OUT]
    if cert is not None and key is not None:
        args += ["--cert", str(cert), "--key", str(key)]
    return args


def parse(out: bytes) -> list[CurlResult]:
    """One result per transfer, in order; the headers are those of the final response."""
    results: list[CurlResult] = []
    pos = 0
    for m in _MARK.finditer(out):
        chunk = out[pos : m.start()]
        pos = m.end()
        headers: dict[str, str] = {}
        while chunk.startswith(b"HTTP/"):
            head, _, chunk = chunk.partition(b"\r\n\r\n")
            headers = {}
            for line in head.decode("latin-1").split("\r\n")[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        results.append(CurlResult(int(m[1]), chunk, int(m[2]), m[3].decode(), headers))
    return results
