"""Per-request HTTP/2 stream state, and requests/responses as header fields (sans-IO)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from h2.errors import ErrorCodes

from nvpair_wm.http.core import Request, Response, content_length_of, error_response, path_of

__all__ = ["NO_BODY_STATUSES", "Stream", "build_request", "response_fields"]

NO_BODY_STATUSES = frozenset({204, 304})
# Response fields from the handler are checked here (h2's own outbound validation is off:
# it would check them again, and it sends CR/LF in a value unchanged anyway).
_FIELD_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(rb"[\x00\r\n]")
# Connection-specific fields are malformed in HTTP/2 (RFC 9113 §8.2.2); framing is ours.
_DROPPED_RESPONSE_FIELDS = frozenset(
    {
        b"connection",
        b"content-length",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
    }
)
_STATUS = {s: str(s).encode() for s in range(100, 600)}


@dataclass(slots=True, eq=False)
class Stream:
    """What the session keeps per request stream, until both directions are done."""

    sid: int
    request: Request | None = None
    mode: str = "body"  # "body": buffering for complete(); "discard": answered early
    body: bytearray = field(default_factory=bytearray)
    received: int = 0  # DATA payload bytes, checked against request.content_length
    owed: int = 0  # flow-controlled bytes received whose stream window is not yet reopened
    remote_done: bool = False
    out: bytes | None = None  # response body still to send (None: no response yet)
    out_off: int = 0
    response_done: bool = False
    reset_after_send: ErrorCodes | None = None
    body_deadline: float | None = None
    send_deadline: float | None = None


def build_request(
    headers: list[tuple[bytes, bytes]], max_header_bytes: int, peer_fingerprint: str | None
) -> tuple[Request | None, Response | None]:
    """The :class:`Request` (h2 validated the pseudo-headers), or an answer instead of one."""
    size = 0
    pseudo: dict[bytes, bytes] = {}
    fields: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        size += len(name) + len(value) + 32
        if name[:1] == b":":
            pseudo[name] = value
        else:
            fields.append((name, value))
    if size > max_header_bytes:
        return None, error_response(431, "request header fields too large")
    method = pseudo.get(b":method", b"").decode("ascii", "replace")
    if method == "CONNECT":
        return None, error_response(501, "CONNECT is not supported")
    authority = pseudo.get(b":authority")
    if authority is not None and not any(name == b"host" for name, _ in fields):
        fields.append((b"host", authority))
    try:
        length = content_length_of(fields)
    except ValueError:
        return None, error_response(400, "bad content-length")
    request = Request(
        method=method,
        path=path_of(pseudo.get(b":path", b"/")),
        headers=fields,
        peer_fingerprint=peer_fingerprint,
        protocol="h2",
        content_length=length,
    )
    return request, None


def valid_fields(headers: list[tuple[bytes, bytes]]) -> bool:
    """True if every field name is a token and no value holds NUL, CR or LF."""
    return all(_FIELD_NAME.fullmatch(k) and not _BAD_VALUE.search(v) for k, v in headers)


def response_fields(
    response: Response, head_request: bool
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """(header fields, body) of ``response``: ``:status`` first, content-length added."""
    status = response.status
    headers: list[tuple[bytes, bytes]] = [(b":status", _STATUS.get(status) or str(status).encode())]
    for k, v in response.headers:
        name = k.lower()
        if name not in _DROPPED_RESPONSE_FIELDS:
            headers.append((name, v))
    body = response.body
    if status in NO_BODY_STATUSES:
        body = b""
    else:
        headers.append((b"content-length", str(len(body)).encode()))
    if head_request:
        body = b""
    return headers, body
