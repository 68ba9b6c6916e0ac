"""Protocol-neutral request handling shared by the HTTP/1.1 and HTTP/2 sessions (no IO).

The sans-IO sessions (``nvpair_wm.proto.h1`` and ``nvpair_wm.proto.h2``) turn bytes
into a :class:`Request`, ask the :class:`Handler` whether to go on (``head``), read the body up
to ``handler.max_body`` (answering :func:`too_large` when it is exceeded) and finally call
``complete``. Everything protocol-neutral a session or an endpoint needs lives here, with
:class:`Limits`, every bound of the server. Response headers from the handler never contain
``content-length``; the sessions add the framing headers themselves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "MIB",
    "Handler",
    "Limits",
    "Request",
    "Response",
    "empty_response",
    "error_response",
    "json_response",
    "path_of",
    "request_timeout",
    "too_large",
]

MIB = 1024 * 1024


@dataclass(slots=True)
class Request:
    """Everything known about a request before its body is read."""

    method: str  # "POST"
    path: str  # "/v1/workloads/events" (query string already stripped)
    headers: list[tuple[bytes, bytes]]  # names lowercased
    peer_fingerprint: str | None  # sha256 hex of the client's leaf cert (DER)
    protocol: str  # "h2" | "http/1.1"
    content_length: int | None


@dataclass(slots=True)
class Response:
    """A complete response. ``headers`` carries no content-length: the adapter adds framing."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""


class Handler(Protocol):
    """Application logic, called by the adapters."""

    max_body: int

    def head(self, req: Request) -> Response | None:
        """Decide BEFORE the body is read (403/404/405/413 by content-length/415/503).

        ``None`` means: go on, read the body, then call :meth:`complete`.
        """
        ...

    def complete(self, req: Request, body: bytes) -> Response:
        """Answer a request whose full body (at most ``max_body`` bytes) has been read."""
        ...


@dataclass(frozen=True, slots=True)
class Limits:
    """Every bound of the inter-node server, in one place (seconds, bytes, counts)."""

    handshake_timeout: float = 10.0  # TCP accept → TLS handshake done
    header_timeout: float = 10.0  # first byte of a request → its complete header block
    idle_timeout: float = 60.0  # keep-alive: response sent → first byte of the next request
    body_timeout: float = 30.0  # headers done → complete body
    write_timeout: float = 30.0  # one drain() waiting for a slow reader
    # Both unset by default: they follow the member count (certificates pinned), see
    # nvpair_wm.capacity; a value set is used as is (more connections are closed at accept),
    # and the node says when it caps the cluster below its members.
    max_connections: int | None = None  # open connections (unset: 2/member + strangers, >= 1024)
    listen_backlog: int | None = None  # accept queue (unset: members + strangers, >= 128)
    # Connections still in the handshake or whose certificate is not pinned have their own
    # budget and short timers, so that pinned peers always find a slot; the oldest goes for a
    # new one. Unset, it follows the member count too: every member may be in its handshake at
    # once after a restart or a healed partition.
    max_unauthenticated_connections: int | None = None  # strangers at once (unset: members, >= 128)
    unauthenticated_timeout: float = 5.0  # their handshake, header and idle timeout
    # TLS handshakes that progress at once; later arrivals wait their turn (reading paused),
    # first come first served, within their handshake timeout: a thousand members
    # reconnecting together then finish a few dozen at a time instead of all timing out.
    max_handshakes_at_once: int = 64  # TLS handshakes in progress; others wait, in order
    max_body: int = MIB  # request body bytes (the handler's max_body wins if smaller)
    max_header_bytes: int = 16 * 1024  # h1 header block / h2 header list (uncompressed) size
    shutdown_grace: float = 5.0  # graceful close: time for in-flight requests
    linger_timeout: float = 2.0  # after our close_notify+FIN: drain the peer's leftovers
    # HTTP/2
    h2_max_concurrent_streams: int = 100
    h2_max_frame_size: int = 16 * 1024
    h2_initial_window_size: int = 64 * 1024 - 1
    h2_max_continuation_frames: int = 16  # per header block (CONTINUATION flood)
    h2_rate_window: float = 1.0  # seconds of the flood budgets below
    h2_max_resets_per_window: int = 200  # client RST_STREAMs (rapid reset, CVE-2023-44487)
    h2_max_control_frames_per_window: int = 200  # SETTINGS + PING + empty frames (floods)
    h2_max_header_block_bytes: int = 64 * 1024  # encoded HEADERS+CONTINUATION per block
    h2_max_decoded_header_list: int = 64 * 1024  # where HPACK decoding stops (HPACK bomb)
    h2_max_refused_per_window: int = 100  # REFUSED_STREAMs per window → GOAWAY
    h2_connection_window: int = 1024 * 1024  # connection receive window
    h2_body_buffer_budget: int = 4 * 1024 * 1024  # buffered bodies before stream windows wait


def path_of(target: str | bytes) -> str:
    """The path part of a request target (query and fragment stripped).

    An absolute-form target (``https://host/path``) is reduced to its path: RFC 9112 §3.2.2
    says a server must accept it.
    """
    text = target.decode("ascii", "replace") if isinstance(target, bytes) else target
    if not text.startswith("/"):
        scheme, sep, rest = text.partition("://")
        if sep and scheme.lower() in ("http", "https"):
            slash = rest.find("/")
            text = rest[slash:] if slash >= 0 else "/"
    for sep in ("?", "#"):
        text = text.split(sep, 1)[0]
    return text


def json_response(
    status: int, obj: object, headers: list[tuple[bytes, bytes]] | None = None
) -> Response:
    """A JSON response (compact, UTF-8) with ``content-type: application/json``."""
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(status, [(b"content-type", b"application/json"), *(headers or [])], body)


def empty_response(status: int, headers: list[tuple[bytes, bytes]] | None = None) -> Response:
    """A response without a body (202, 204, ...)."""
    return Response(status, list(headers or []))


def error_response(
    status: int, reason: str, headers: list[tuple[bytes, bytes]] | None = None
) -> Response:
    """A short JSON error: ``{"error": reason}``."""
    return json_response(status, {"error": reason}, headers)


def too_large(limit: int = MIB) -> Response:
    """413: the body exceeds ``limit`` bytes (by content-length or while streaming)."""
    return error_response(413, f"request body exceeds {limit} bytes")


def request_timeout() -> Response:
    """408: the request (headers or body) did not arrive in time."""
    return error_response(408, "request timed out")
