"""Per-request HTTP/2 stream state, and requests/responses as header fields (sans-IO).

Inbound fields are validated here (RFC 9113 §8.2-8.3): a malformed request is a stream error,
so the session resets that stream and the connection goes on.
"""

from __future__ import annotations

import re

from h2.errors import ErrorCodes

from nvpair_wm.http.core import Request, Response, content_length_of, error_response, path_of

__all__ = [
    "NO_BODY_STATUSES",
    "Stream",
    "build_request",
    "request_problem",
    "response_fields",
    "trailers_problem",
    "valid_fields",
]

NO_BODY_STATUSES = frozenset({204, 304})
# Response fields from the handler are checked here: the encoder writes them as given.
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

# Inbound fields (RFC 9113 §8.2, §8.3): what makes a request malformed (a stream error).
_REQUEST_PSEUDO = frozenset({b":method", b":scheme", b":path", b":authority"})
_CONNECTION_SPECIFIC = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
_BAD_NAME = re.compile(rb"[\x00-\x20A-Z\x7f-\xff:]")  # §8.2.1 (":" only for pseudo-headers)
_BAD_INBOUND_VALUE = re.compile(rb"[\x00\r\n]|^[ \t]|[ \t]$")
_GOOD_NAMES_MAX = 256
_good_names: set[bytes] = set()  # regular names already found valid (a small cache)


class Stream:
    """What the session keeps per request stream, until both directions are done."""

    __slots__ = (
        "body",
        "body_deadline",
        "mode",
        "out",
        "out_off",
        "owed",
        "received",
        "recv_window",
        "remote_done",
        "request",
        "reset_after_send",
        "response_done",
        "send_deadline",
        "send_window",
        "sid",
    )

    def __init__(self, sid: int, recv_window: int, send_window: int) -> None:
        self.sid = sid
        self.request: Request | None = None
        self.mode = "body"  # "body": buffering for complete(); "discard": answered early
        self.body = bytearray()
        self.received = 0  # DATA payload bytes, checked against request.content_length
        self.owed = 0  # flow-controlled bytes received whose stream window is not yet reopened
        self.recv_window = recv_window  # what the peer may still send on this stream
        self.send_window = send_window  # what we may still send (may go negative, §6.9.2)
        self.remote_done = False
        self.out: bytes | None = None  # response body still to send (None: no response yet)
        self.out_off = 0
        self.response_done = False
        self.reset_after_send: ErrorCodes | None = None
        self.body_deadline: float | None = None
        self.send_deadline: float | None = None


def build_request(
    headers: list[tuple[bytes, bytes]], max_header_bytes: int, peer_fingerprint: str | None
) -> tuple[Request | None, Response | None]:
    """The :class:`Request` (:func:`request_problem` passed), or an answer instead of one."""
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


def _name_problem(name: bytes) -> str | None:
    if name in _good_names:
        return None
    if not name or _BAD_NAME.search(name):
        return f"bad field name {name!r}"
    if name in _CONNECTION_SPECIFIC:
        return f"connection-specific field {name!r}"
    if len(_good_names) >= _GOOD_NAMES_MAX:
        _good_names.clear()
    _good_names.add(name)
    return None


def request_problem(headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a request's header list is malformed (RFC 9113 §8.2-8.3), or None.

    Pseudo-headers: only the four of a request, each once, all before the regular fields;
    ``:method``, ``:scheme`` and a non-empty ``:path`` present (CONNECT: ``:method`` and
    ``:authority``). Names: lowercase tokens, no connection-specific fields, TE only
    ``trailers``. Values: no NUL/CR/LF, no surrounding whitespace.
    """
    pseudo: list[bytes] = []
    regular = False
    path: bytes | None = None
    connect = False
    for name, value in headers:
        if name[:1] == b":":
            if regular:
                return f"pseudo-header {name!r} after a regular field"
            if name not in _REQUEST_PSEUDO:
                return f"pseudo-header {name!r} in a request"
            if name in pseudo:
                return f"duplicate {name!r}"
            pseudo.append(name)
            if name == b":path":
                path = value
            elif name == b":method":
                connect = value == b"CONNECT"
        else:
            regular = True
            problem = _name_problem(name)
            if problem is not None:
                return problem
            if name == b"te" and value != b"trailers":
                return "TE other than trailers"
        if value and _BAD_INBOUND_VALUE.search(value):
            return f"bad value of {name!r}"
    if connect:
        return None if b":authority" in pseudo else "CONNECT without :authority"
    if b":method" not in pseudo or b":scheme" not in pseudo or path is None:
        return "a required pseudo-header is missing"
    if not path:
        return "empty :path"
    return None


def trailers_problem(headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a trailer section is malformed (no pseudo-headers, §8.1), or None."""
    for name, value in headers:
        if name[:1] == b":":
            return f"pseudo-header {name!r} in trailers"
        problem = _name_problem(name)
        if problem is not None:
            return problem
        if value and _BAD_INBOUND_VALUE.search(value):
            return f"bad value of {name!r}"
    return None
