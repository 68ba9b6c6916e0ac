"""What a client session hands its driver: responses, failures, PING answers, the end (sans-IO).

The client sessions (:mod:`nvpair_wm.proto.h1client`, :mod:`nvpair_wm.proto.h2.client`) share
this vocabulary, so the asyncio driver (:mod:`nvpair_wm.io.client`) does not care which protocol
it drives. Requests and PINGs are named by the integer the session returned when they started.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvpair_wm.errors import ClientError

__all__ = [
    "ClientEvent",
    "ConnectionEnded",
    "PingAnswered",
    "PingFailed",
    "RequestFailed",
    "Response",
    "ResponseReceived",
    "SessionChanged",
]


# Response and ResponseReceived are made once per response: not frozen, whose generated
# __init__ is an object.__setattr__ call per field. Nothing changes them after they are made.
@dataclass(slots=True)
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        """First value of header ``name`` (lowercase), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(slots=True)
class ResponseReceived:
    """Request ``request`` got its complete response."""

    request: int
    response: Response


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """Request ``request`` will get no response (``error`` says why; retrying is safe)."""

    request: int
    error: ClientError


@dataclass(frozen=True, slots=True)
class PingAnswered:
    ping: int


@dataclass(frozen=True, slots=True)
class PingFailed:
    ping: int
    error: ClientError


@dataclass(frozen=True, slots=True)
class SessionChanged:
    """What the connection can take changed (HTTP/2 SETTINGS, GOAWAY): look at it again."""


@dataclass(frozen=True, slots=True)
class ConnectionEnded:
    """The session is over: send what :meth:`data_to_send` still holds (when ``graceful``), then
    close the transport; every request and PING in progress has had its failure event first."""

    reason: str
    graceful: bool


ClientEvent = (
    ResponseReceived | RequestFailed | PingAnswered | PingFailed | SessionChanged | ConnectionEnded
)
