"""Per-request HTTP/2 stream state (:class:`StreamState`, moved only through a transition table),
and requests/responses as header fields (sans-IO).

Inbound fields are validated here (RFC 9113 §8.2-8.3): a malformed request is a stream error,
so the session resets that stream and the connection goes on.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Final

from h2.errors import ErrorCodes

from nvpair_wm.http.core import Request, Response, error_response, path_of
from nvpair_wm.proto.h2.session import no_transition
from nvpair_wm.versions import RESPONSE_FIELDS

__all__ = [
    "NO_BODY_STATUSES",
    "BodyMode",
    "Stream",
    "StreamEnd",
    "StreamEvent",
    "StreamState",
    "parse_request",
    "response_fields",
    "response_status",
    "trailers_problem",
    "valid_fields",
]

NO_BODY_STATUSES = frozenset({204, 304})
# Response fields from the handler are checked here: the encoder writes them as given.
_FIELD_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(rb"[\x00\r\n]")
# Connection-specific fields are malformed in HTTP/2 (RFC 9113 §8.2.2): a request that has one
# is a stream error; a handler's response loses them, and its framing (content-length) is ours.
_CONNECTION_SPECIFIC = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
_DROPPED_RESPONSE_FIELDS = _CONNECTION_SPECIFIC | {b"content-length", b"te"}
_STATUS = {s: str(s).encode() for s in range(100, 600)}

# Inbound fields (RFC 9113 §8.2, §8.3): what makes a request malformed (a stream error).
_BAD_NAME = re.compile(rb"[\x00-\x20A-Z\x7f-\xff:]")  # §8.2.1 (":" only for pseudo-headers)
_BAD_INBOUND_VALUE = re.compile(rb"[\x00\r\n]|^[ \t]|[ \t]$")
# Small caches of what was found valid: clients repeat names, values and paths (values taken
# from the HPACK dynamic table are even the same objects, their hashes already computed).
_CACHE_MAX = 256
_CACHED_VALUE_MAX = 64  # longer values are checked every time, not remembered
_good_names: set[bytes] = set()
_good_values: set[bytes] = set()
_paths: dict[bytes, str] = {}
_methods = {b"POST": "POST", b"GET": "GET", b"HEAD": "HEAD", b"PUT": "PUT"}
_REQUEST_PSEUDO = frozenset({b":method", b":scheme", b":path", b":authority"})


class BodyMode(enum.Enum):
    """What becomes of a request body's DATA."""

    BUFFER = "buffered for the handler's complete()"
    DISCARD = "read and dropped: the request was answered early"


class StreamState(enum.Enum):
    """Where a tracked stream is (RFC 9113 §5.1, server side): the request whole or not (the
    peer's END_STREAM), and our response not started, started (its body waiting for the peer's
    windows), or sent whole (our END_STREAM). A reset stream is no longer tracked: how it ended
    is a :class:`StreamEnd`."""

    # (what it means, request_whole, sending)
    OPEN = ("receiving the request; no response yet", False, False)
    OPEN_RESPONDING = ("receiving the request; the response body still to send", False, True)
    HALF_CLOSED_LOCAL = ("the response sent (early); receiving the request", False, False)
    HALF_CLOSED_REMOTE = ("the request whole; no response yet", True, False)
    HALF_CLOSED_REMOTE_RESPONDING = ("the request whole; the response body to send", True, True)
    CLOSED = ("END_STREAM both ways: no longer tracked", True, False)

    def __init__(self, meaning: str, request_whole: bool, sending: bool) -> None:
        self.meaning = meaning
        self.request_whole = request_whole  # the peer ended the request
        self.sending = sending  # the response started, its body waits for the peer's windows

    __hash__ = object.__hash__  # identity: table lookups stay in C (Enum's is Python code)


class StreamEvent(enum.Enum):
    """What moves a stream from one :class:`StreamState` to the next."""

    RECV_END_STREAM = "the peer ended the request"
    SEND_HEADERS = "our response's HEADERS went out, its body to follow"
    SEND_END_STREAM = "our response went out whole"

    __hash__ = object.__hash__


_S, _E = StreamState, StreamEvent
#: (state, event) → next state; any other pair is a bug of ours (:class:`LocalProtocolError`).
_TRANSITIONS: Final[dict[tuple[StreamState, StreamEvent], StreamState]] = {
    (_S.OPEN, _E.RECV_END_STREAM): _S.HALF_CLOSED_REMOTE,
    (_S.OPEN, _E.SEND_HEADERS): _S.OPEN_RESPONDING,
    (_S.OPEN, _E.SEND_END_STREAM): _S.HALF_CLOSED_LOCAL,
    (_S.OPEN_RESPONDING, _E.RECV_END_STREAM): _S.HALF_CLOSED_REMOTE_RESPONDING,
    (_S.OPEN_RESPONDING, _E.SEND_END_STREAM): _S.HALF_CLOSED_LOCAL,
    (_S.HALF_CLOSED_LOCAL, _E.RECV_END_STREAM): _S.CLOSED,
    (_S.HALF_CLOSED_REMOTE, _E.SEND_HEADERS): _S.HALF_CLOSED_REMOTE_RESPONDING,
    (_S.HALF_CLOSED_REMOTE, _E.SEND_END_STREAM): _S.CLOSED,
    (_S.HALF_CLOSED_REMOTE_RESPONDING, _E.SEND_END_STREAM): _S.CLOSED,
}


class StreamEnd(enum.Enum):
    """How a stream no longer tracked closed: it decides the answer to a late frame (§5.1)."""

    ENDED = "END_STREAM both ways: DATA or HEADERS is a connection error STREAM_CLOSED"
    RESET_SENT = "by our RST_STREAM: frames in flight are dropped"
    RESET_RECEIVED = "by the peer's RST_STREAM: a frame is a stream error STREAM_CLOSED"


@dataclass(slots=True, eq=False)
class Stream:
    """What the session keeps per request stream, until both directions are done."""

    sid: int
    recv_window: int  # what the peer may still send on this stream
    send_window: int  # what we may still send (may go negative, §6.9.2)
    state: StreamState = StreamState.OPEN
    request: Request | None = None
    mode: BodyMode = BodyMode.BUFFER
    body: bytearray = field(default_factory=bytearray)
    received: int = 0  # DATA payload bytes, checked against request.content_length
    owed: int = 0  # flow-controlled bytes received whose stream window is not yet reopened
    out: bytes = b""  # the response body, sent up to out_off (while state.sending)
    out_off: int = 0
    reset_after_send: ErrorCodes | None = None
    body_deadline: float | None = None
    send_deadline: float | None = None

    def step(self, event: StreamEvent) -> StreamState:
        """Move to the state :data:`_TRANSITIONS` gives for ``event``, and return it."""
        try:
            state = self.state = _TRANSITIONS[self.state, event]
        except KeyError:
            raise no_transition(self.state, event, "stream", self.sid) from None
        return state


def valid_fields(headers: list[tuple[bytes, bytes]]) -> bool:
    """True if every field name is a token and no value holds NUL, CR or LF."""
    return all(_FIELD_NAME.fullmatch(k) and not _BAD_VALUE.search(v) for k, v in headers)


def response_fields(
    response: Response, head_request: bool
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """(header fields, body) of ``response``: ``:status`` first, then the handler's fields, the
    version fields of every response (:mod:`nvpair_wm.versions`) and content-length."""
    status = response.status
    headers: list[tuple[bytes, bytes]] = [(b":status", _STATUS.get(status) or str(status).encode())]
    for k, v in response.headers:
        name = k.lower()
        if name not in _DROPPED_RESPONSE_FIELDS:
            headers.append((name, v))
    headers += RESPONSE_FIELDS  # on every response (nvpair_wm.versions)
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
    if len(_good_names) >= _CACHE_MAX:
        _good_names.clear()
    _good_names.add(name)
    return None


def _value_problem(name: bytes, value: bytes) -> str | None:
    if value in _good_values:
        return None
    if _BAD_INBOUND_VALUE.search(value):
        return f"bad value of {name!r}"
    if len(value) <= _CACHED_VALUE_MAX:
        if len(_good_values) >= _CACHE_MAX:
            _good_values.clear()
        _good_values.add(value)
    return None


def parse_request(
    headers: list[tuple[bytes, bytes]], max_header_bytes: int, peer_fingerprint: str | None
) -> Request | Response | str:
    """The :class:`Request` of a decoded header list, an answer instead of one, or why the
    list is malformed (a ``str``: a stream error PROTOCOL_ERROR, RFC 9113 §8.1.1).

    Malformed (§8.2-8.3): pseudo-headers other than the four of a request, repeated, or after
    a regular field; ``:method``, ``:scheme`` or a non-empty ``:path`` missing (CONNECT:
    ``:authority``); names that are not lowercase tokens; connection-specific fields; TE
    other than ``trailers``; values with NUL/CR/LF or surrounding whitespace. Answers: 431
    over ``max_header_bytes`` (RFC 7541 §4.1 sizes), 501 for CONNECT, 400 for a bad
    content-length or repeated ones that differ (repeats that agree count once).
    """
    size = 0
    length = None
    host = False
    pseudo: dict[bytes, bytes] = {}
    fields: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        size += len(name) + len(value) + 32
        if value and value not in _good_values and (problem := _value_problem(name, value)):
            return problem
        if name[:1] == b":":
            if fields:
                return f"pseudo-header {name!r} after a regular field"
            if name not in _REQUEST_PSEUDO:
                return f"pseudo-header {name!r} in a request"
            if name in pseudo:
                return f"duplicate {name.decode()}"
            pseudo[name] = value
            continue
        if name not in _good_names and (problem := _name_problem(name)) is not None:
            return problem
        if name == b"content-length":
            if length is None:
                length = value
            elif value != length:  # as HTTP/1.1 does (RFC 9110 §8.6): repeats must agree
                return error_response(400, "conflicting content-length values")
        elif name == b"te":
            if value != b"trailers":
                return "TE other than trailers"
        elif name == b"host":
            host = True
        fields.append((name, value))
    method, path = pseudo.get(b":method"), pseudo.get(b":path")
    authority = pseudo.get(b":authority")
    if method == b"CONNECT":
        if authority is None:
            return "CONNECT without :authority"
    elif method is None or b":scheme" not in pseudo or path is None:
        return "a required pseudo-header is missing"
    elif not path:
        return "empty :path"
    if size > max_header_bytes:
        return error_response(431, "request header fields too large")
    if method == b"CONNECT" or path is None:
        return error_response(501, "CONNECT is not supported")
    content_length: int | None = None
    if length is not None:
        text = length.strip()
        if not text.isdigit():
            return error_response(400, "bad content-length")
        content_length = int(text)
    if authority is not None and not host:
        fields.append((b"host", authority))
    request_path = _paths.get(path)
    if request_path is None:
        request_path = path_of(path)
        if len(_paths) >= _CACHE_MAX:
            _paths.clear()
        _paths[path] = request_path
    return Request(
        method=_methods.get(method) or method.decode("ascii", "replace"),
        path=request_path,
        headers=fields,
        peer_fingerprint=peer_fingerprint,
        protocol="h2",
        content_length=content_length,
    )


def trailers_problem(headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a trailer section is malformed (no pseudo-headers, §8.1), or None."""
    for name, value in headers:
        if name[:1] == b":":
            return f"pseudo-header {name!r} in trailers"
        problem = _name_problem(name)
        if problem is not None:
            return problem
        if value and (problem := _value_problem(name, value)) is not None:
            return problem
    return None


def response_status(headers: list[tuple[bytes, bytes]]) -> int | str:
    """The ``:status`` of a response's header list, or why the list is malformed (a ``str``):
    exactly one ``:status`` of three digits, first (§8.3.2), no other pseudo-header, and the
    field rules of requests (§8.2)."""
    status = 0
    for i, (name, value) in enumerate(headers):
        if name[:1] == b":":
            if name != b":status":
                return f"pseudo-header {name!r} in a response"
            if i or not (len(value) == 3 and value.isdigit() and value[0] != ord("0")):
                return "response without a valid :status"
            status = int(value)
            continue
        if name not in _good_names and (problem := _name_problem(name)) is not None:
            return problem
        if value and value not in _good_values and (problem := _value_problem(name, value)):
            return problem
    return status or "response without a valid :status"
