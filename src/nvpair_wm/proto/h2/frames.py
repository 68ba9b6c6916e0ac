"""The HTTP/2 frame layer shared by the server and client sessions (RFC 9113 §4, §6).

Inbound frames are not objects: :class:`FrameReader` hands over a read's whole frames as
tuples, each payload sliced once. :data:`FRAME_RULES` holds, per frame type, the rules that
need no session state (which stream it may be on, its fixed length; :func:`check_frame`) and
the name of the sessions' handler. Padding (:func:`unpad`),
a HEADERS frame's fragment (:func:`header_fragment`), a block continued in CONTINUATION frames
(:class:`HeaderBlock`) and split for the peer's frame size (:func:`header_block_frames`) are
here too. Outbound frames are bytes, one ``struct.pack`` for the header.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from h2.errors import ErrorCodes

from nvpair_wm.errors import H2ConnectionError

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113 §6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

MAX_WINDOW = 2**31 - 1  # flow-control windows and increments (RFC 9113 §6.9.1)
_STREAM_ID_MASK: Final = 0x7FFF_FFFF  # the reserved bit is ignored on receipt (§4.1)

_HEADER = struct.Struct(">HBBBL")  # 24-bit length as 16 + 8 bits, type, flags, stream id
_unpack_header = _HEADER.unpack_from


class On(enum.Enum):
    """Which streams a frame type may be sent on."""

    CONNECTION = "stream 0 only"
    STREAM = "a stream, never 0"
    EITHER = "stream 0 or a stream"


@dataclass(frozen=True, slots=True)
class FrameRule:
    """What a frame type's header alone must satisfy (a connection error when it does not,
    except ``length_is_stream_error``: §6.3 makes a PRIORITY of the wrong size a stream error).
    """

    name: str
    on: On
    length: int | None = None  # the payload's fixed length in octets
    min_length: int = 0
    length_is_stream_error: bool = False


FRAME_RULES: Final[dict[int, FrameRule]] = {
    DATA: FrameRule("DATA", On.STREAM),  # §6.1
    HEADERS: FrameRule("HEADERS", On.STREAM),  # §6.2
    PRIORITY: FrameRule("PRIORITY", On.STREAM, 5, length_is_stream_error=True),  # §6.3
    RST_STREAM: FrameRule("RST_STREAM", On.STREAM, 4),  # §6.4
    SETTINGS: FrameRule("SETTINGS", On.CONNECTION),  # §6.5 (6n octets: PeerSettings)
    PUSH_PROMISE: FrameRule("PUSH_PROMISE", On.STREAM),  # §6.6
    PING: FrameRule("PING", On.CONNECTION, 8),  # §6.7
    GOAWAY: FrameRule("GOAWAY", On.CONNECTION, min_length=8),  # §6.8
    WINDOW_UPDATE: FrameRule("WINDOW_UPDATE", On.EITHER, 4),  # §6.9
    CONTINUATION: FrameRule("CONTINUATION", On.STREAM),  # §6.10
}


def check_frame(rule: FrameRule, sid: int, length: int) -> bool:
    """Check a frame against its type's rule; False for a PRIORITY of the wrong size (a
    stream error the caller answers), :class:`H2ConnectionError` for a connection error."""
    if rule.on is On.STREAM:
        if not sid:
            raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, f"{rule.name} on stream 0")
    elif rule.on is On.CONNECTION and sid:
        raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, f"{rule.name} on a stream")
    if rule.length is not None and length != rule.length:
        if rule.length_is_stream_error:
            return False
        raise H2ConnectionError(
            ErrorCodes.FRAME_SIZE_ERROR, f"{rule.name} not {rule.length} octets"
        )
    if length < rule.min_length:
        raise H2ConnectionError(ErrorCodes.FRAME_SIZE_ERROR, f"{rule.name} frame too short")
    return True


class FrameReader:
    """Reads whole frames out of what arrives (:meth:`frames`) and holds an incomplete one
    until the rest of it comes (a frame in pieces is copied out once, whole)."""

    __slots__ = ("_held", "error", "max_frame")

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame  # the largest payload we accept (our SETTINGS_MAX_FRAME_SIZE)
        self._held = bytearray()
        #: A header announcing a payload over ``max_frame`` (FRAME_SIZE_ERROR, §4.2, known from
        #: the header alone): it ends the frames read, and the session raises this once it has
        #: handled the frames before it.
        self.error: H2ConnectionError | None = None

    def frames(self, data: bytes) -> list[tuple[int, int, int, bytes]]:
        """The whole frames of the bytes held and ``data``, in order: ``(type, flags, stream
        id, payload)`` each, one list for the read (a session handles a read's frames in one
        loop, and may look at the frame after the one in hand)."""
        held = self._held
        if held:
            held += data
            if len(held) < 9:
                return []
            length = (held[0] << 16) | (held[1] << 8) | held[2]
            if length <= self.max_frame and len(held) < 9 + length:
                return []
            data = bytes(held)
            held.clear()
        out: list[tuple[int, int, int, bytes]] = []
        pos = 0
        size = len(data)
        max_frame = self.max_frame
        while (start := pos + 9) <= size:
            high, low, ftype, flags, sid = _unpack_header(data, pos)
            length = (high << 8) | low
            if length > max_frame:
                self.error = H2ConnectionError(
                    ErrorCodes.FRAME_SIZE_ERROR, f"frame of {length} bytes"
                )
                return out
            end = start + length
            if end > size:
                break
            out.append((ftype, flags, sid & _STREAM_ID_MASK, data[start:end]))
            pos = end
        if pos < size:
            held += data[pos:]
        return out


def unpad(payload: bytes) -> tuple[int, int]:
    """(start, end) of the data inside a PADDED frame's payload (§6.1, §6.2)."""
    if not payload:
        raise H2ConnectionError(ErrorCodes.FRAME_SIZE_ERROR, "PADDED frame without a pad length")
    end = len(payload) - payload[0]
    if end < 1:
        raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, "padding longer than the frame")
    return 1, end


def header_fragment(flags: int, payload: bytes) -> tuple[bytes, int | None]:
    """A HEADERS payload's header block fragment, and the stream it depends on when the
    PRIORITY flag is set (§6.2): padding and priority fields taken off."""
    start, end = 0, len(payload)
    if flags & PADDED:
        start, end = unpad(payload)
    dependency = None
    if flags & PRIORITY_FLAG:
        if end - start < 5:
            raise H2ConnectionError(ErrorCodes.FRAME_SIZE_ERROR, "HEADERS priority cut short")
        dependency = int.from_bytes(payload[start : start + 4], "big") & _STREAM_ID_MASK
        start += 5
    fragment = payload if start == 0 and end == len(payload) else payload[start:end]
    return fragment, dependency


@dataclass(slots=True, eq=False)
class HeaderBlock:
    """A header block begun by HEADERS without END_HEADERS and continued in CONTINUATION
    frames (§6.10); no other frame may come between them.

    Bounded by the octets of its frames' payloads and by the number of CONTINUATION frames:
    past either the connection ends with ENHANCE_YOUR_CALM (CONTINUATION floods).
    """

    sid: int
    end_stream: bool
    dependency: int | None  # from the HEADERS frame's priority fields
    started: float  # when the HEADERS frame came (for the session's timer)
    frame_bytes: int  # the payloads so far, padding included
    fragments: bytearray
    continuations: int = 0

    def continue_with(
        self, flags: int, payload: bytes, max_bytes: int, max_continuations: int | None
    ) -> bytes | None:
        """Add a CONTINUATION frame's fragment; the whole block once END_HEADERS ends it."""
        self.frame_bytes += len(payload)
        self.continuations += 1
        if self.frame_bytes > max_bytes:
            raise H2ConnectionError(ErrorCodes.ENHANCE_YOUR_CALM, "header block too large")
        if max_continuations is not None and self.continuations > max_continuations:
            raise H2ConnectionError(ErrorCodes.ENHANCE_YOUR_CALM, "too many CONTINUATION frames")
        self.fragments += payload
        return bytes(self.fragments) if flags & END_HEADERS else None


def header_block_frames(sid: int, block: bytes, end_stream: bool, max_frame: int) -> list[bytes]:
    """A header block as HEADERS (END_HEADERS when it fits ``max_frame``), then CONTINUATION
    frames, the last with END_HEADERS (§4.3)."""
    first = END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return [frame_header(len(block), HEADERS, first | END_HEADERS, sid) + block]
    out = []
    for start in range(0, len(block), max_frame):
        chunk = block[start : start + max_frame]
        last = END_HEADERS if start + max_frame >= len(block) else 0
        ftype, flags = (CONTINUATION, last) if start else (HEADERS, first | last)
        out.append(frame_header(len(chunk), ftype, flags, sid) + chunk)
    return out


def frame_header(length: int, ftype: int, flags: int, stream_id: int) -> bytes:
    return _HEADER.pack(length >> 8, length & 0xFF, ftype, flags, stream_id)


def frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return _HEADER.pack(len(payload) >> 8, len(payload) & 0xFF, ftype, flags, stream_id) + payload


def rst_stream_frame(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))


def window_update_frame(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


def goaway_frame(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    payload = last_stream_id.to_bytes(4, "big") + code.to_bytes(4, "big") + debug
    return frame(GOAWAY, 0, 0, payload)
