"""HTTP/2 frames as raw bytes, and back: for feeding a session what h2 would never send."""

from __future__ import annotations

from hyperframe.frame import (
    Frame,
)


def raw(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((ftype, flags)) + sid.to_bytes(4, "big") + payload
    )


def frames_of(data: bytes) -> list[Frame]:
    out: list[Frame] = []
    while data:
        f, length = Frame.parse_frame_header(memoryview(data[:9]))
        f.parse_body(memoryview(data[9 : 9 + length]))
        out.append(f)
        data = data[9 + length :]
    return out
