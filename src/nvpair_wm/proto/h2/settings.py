"""SETTINGS of an HTTP/2 connection (RFC 9113 §6.5): the peer's checked, the server's own.

:class:`PeerSettings` serves both sessions: the initial stream send window, the largest frame
the peer may be sent, its stream limit (the client's concern: the server never pushes). The
peer's header table size does not matter (our encoder never uses the dynamic table).
"""

from __future__ import annotations

from h2.errors import ErrorCodes

from nvpair_wm.errors import H2ConnectionError
from nvpair_wm.http.core import Limits
from nvpair_wm.proto.h2.frames import MAX_WINDOW, SETTINGS, frame

__all__ = ["DEFAULT_WINDOW", "PeerSettings", "server_settings_frame"]

DEFAULT_WINDOW = 65535  # the initial window size before SETTINGS say otherwise (§6.9.2)
_DEFAULT_FRAME_SIZE = 16384
_MAX_FRAME_SIZE = 2**24 - 1

ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE = 0x2, 0x3, 0x4
MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE, ENABLE_CONNECT_PROTOCOL = 0x5, 0x6, 0x8


def server_settings_frame(limits: Limits) -> bytes:
    """Our SETTINGS frame, the server's connection preface."""
    values = (
        (MAX_CONCURRENT_STREAMS, limits.h2_max_concurrent_streams),
        (INITIAL_WINDOW_SIZE, limits.h2_initial_window_size),
        (MAX_FRAME_SIZE, limits.h2_max_frame_size),
        (MAX_HEADER_LIST_SIZE, limits.max_header_bytes),
    )
    payload = b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in values)
    return frame(SETTINGS, 0, 0, payload)


class PeerSettings:
    """The peer's settings that shape what we send (``server``: the peer is a server, which
    may not enable push, §6.5.2)."""

    __slots__ = ("initial_window", "max_concurrent_streams", "max_frame_size", "server")

    def __init__(self, *, server: bool = False) -> None:
        self.server = server
        self.initial_window = DEFAULT_WINDOW
        self.max_frame_size = _DEFAULT_FRAME_SIZE
        self.max_concurrent_streams = 2**31 - 1  # no limit until the peer sets one

    def apply(self, payload: bytes) -> int:
        """Apply a SETTINGS payload (not an ACK); returns the change of the initial window.

        Raises :class:`H2ConnectionError` for a value §6.5.2 forbids.
        """
        if len(payload) % 6:
            raise H2ConnectionError(ErrorCodes.FRAME_SIZE_ERROR, "SETTINGS length not 6n")
        delta = 0
        for i in range(0, len(payload), 6):
            ident = (payload[i] << 8) | payload[i + 1]
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if ident == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise H2ConnectionError(
                        ErrorCodes.FLOW_CONTROL_ERROR, f"INITIAL_WINDOW_SIZE {value}"
                    )
                delta += value - self.initial_window
                self.initial_window = value
            elif ident == MAX_FRAME_SIZE:
                if not _DEFAULT_FRAME_SIZE <= value <= _MAX_FRAME_SIZE:
                    raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, f"MAX_FRAME_SIZE {value}")
                self.max_frame_size = value
            elif ident == MAX_CONCURRENT_STREAMS:
                self.max_concurrent_streams = value
            elif ident in (ENABLE_PUSH, ENABLE_CONNECT_PROTOCOL) and value > 1:
                raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, f"setting {ident} = {value}")
            elif ident == ENABLE_PUSH and value and self.server:
                raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, "the server set ENABLE_PUSH")
        return delta
