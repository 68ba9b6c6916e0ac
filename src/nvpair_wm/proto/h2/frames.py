"""HTTP/2 frame layout (RFC 9113 §4, §6): type and flag numbers, and frames written out.

Inbound frames are not objects: the session reads the 9-byte header straight from its buffer
and hands the payload to the handler of the frame type (see ``connection``). Outbound frames
are bytes built here, one ``struct.pack`` for the header.
"""

from __future__ import annotations

import struct

__all__ = [
    "ACK",
    "CONTINUATION",
    "DATA",
    "END_HEADERS",
    "END_STREAM",
    "GOAWAY",
    "H2_PREFACE",
    "HEADERS",
    "MAX_WINDOW",
    "PADDED",
    "PING",
    "PRIORITY",
    "PRIORITY_FLAG",
    "PUSH_PROMISE",
    "RST_STREAM",
    "SETTINGS",
    "WINDOW_UPDATE",
    "frame",
    "frame_header",
    "goaway_frame",
    "rst_stream_frame",
    "unpack_frame_header",
    "window_update_frame",
]

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113 §6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

MAX_WINDOW = 2**31 - 1  # flow-control windows and increments (RFC 9113 §6.9.1)

_HEADER = struct.Struct(">HBBBL")  # 24-bit length as 16 + 8 bits, type, flags, stream id
#: ``(length >> 8, length & 0xFF, type, flags, stream id with its reserved bit)`` at an offset.
unpack_frame_header = _HEADER.unpack_from


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
