"""Frame boundaries ahead of h2 (sans-IO): every frame is checked before h2 buffers it.

An over-long frame is refused from its 9-byte header alone (h2 would buffer the announced
length first); a header block (HEADERS + CONTINUATION) is bounded in bytes and frames here and
in time by the session, through :attr:`FrameScanner.block_started`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from h2.errors import ErrorCodes

from nvpair_wm.errors import H2ConnectionError

__all__ = [
    "ACK",
    "CONTINUATION",
    "DATA",
    "END_HEADERS",
    "END_STREAM",
    "GOAWAY",
    "H2_PREFACE",
    "HEADERS",
    "PING",
    "PRIORITY",
    "PUSH_PROMISE",
    "RST_STREAM",
    "SETTINGS",
    "WINDOW_UPDATE",
    "Frame",
    "FrameScanner",
]

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113 §6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4


@dataclass(slots=True)
class Frame:
    type: int  # -1 for (a piece of) the connection preface
    flags: int
    stream_id: int
    length: int
    raw: bytes


class FrameScanner:
    """Splits inbound bytes into whole frames; holds at most one incomplete frame."""

    __slots__ = (
        "_block_bytes",
        "_block_continuations",
        "_buf",
        "_preface_left",
        "block_started",
        "max_block_bytes",
        "max_continuations",
        "max_frame_size",
    )

    def __init__(
        self, max_frame_size: int, max_block_bytes: int, max_continuations: int, preface: bool
    ) -> None:
        self.max_frame_size = max_frame_size
        self.max_block_bytes = max_block_bytes
        self.max_continuations = max_continuations
        self._buf = bytearray()
        self._preface_left = len(H2_PREFACE) if preface else 0
        self.block_started: float | None = None  # a header block is open since then
        self._block_bytes = 0
        self._block_continuations = 0

    def feed(self, data: bytes, now: float) -> Iterator[Frame]:
        buf = self._buf
        buf += data
        if self._preface_left and buf:
            take = min(self._preface_left, len(buf))
            raw = bytes(buf[:take])
            del buf[:take]
            self._preface_left -= take
            yield Frame(-1, 0, 0, take, raw)
        while not self._preface_left and len(buf) >= 9:
            length = int.from_bytes(buf[0:3], "big")
            if length > self.max_frame_size:
                raise H2ConnectionError(ErrorCodes.FRAME_SIZE_ERROR, f"frame of {length} bytes")
            if len(buf) < 9 + length:
                return
            ftype, flags = buf[3], buf[4]
            stream_id = int.from_bytes(buf[5:9], "big") & 0x7FFF_FFFF
            raw = bytes(buf[: 9 + length])
            del buf[: 9 + length]
            if ftype in (HEADERS, PUSH_PROMISE, CONTINUATION):
                self._track_header_block(ftype, flags, length, now)
            yield Frame(ftype, flags, stream_id, length, raw)

    def _track_header_block(self, ftype: int, flags: int, length: int, now: float) -> None:
        if ftype in (HEADERS, PUSH_PROMISE) and self.block_started is None:
            if not flags & END_HEADERS:
                self.block_started = now
                self._block_bytes = length
                self._block_continuations = 0
        elif ftype == CONTINUATION and self.block_started is not None:
            self._block_bytes += length
            self._block_continuations += 1
            if self._block_bytes > self.max_block_bytes:
                raise H2ConnectionError(ErrorCodes.ENHANCE_YOUR_CALM, "header block too large")
            if self._block_continuations > self.max_continuations:
                raise H2ConnectionError(
                    ErrorCodes.ENHANCE_YOUR_CALM, "too many CONTINUATION frames"
                )
            if flags & END_HEADERS:
                self.block_started = None
