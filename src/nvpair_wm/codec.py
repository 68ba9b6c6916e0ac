"""Newline-delimited framing and JSON-RPC 2.0 envelopes (sans-IO).

Every frame from the broker and from peers passes through :func:`decode`, so the common case is
one call into msgspec: the generated ``InboundFrame`` union decodes, validates and dispatches on
``method`` in a single pass. Only a frame that fails that strict pass takes the slow path, which
re-reads it generically to give the precise JSON-RPC error (-32700 / -32600 / -32601 / -32602)
and to accept what JSON Schema calls an integer but msgspec's strict mode does not (``1.0``,
``1e3``), so that the code and ``schema/`` agree. The re-read also keeps the last of duplicate
member names, as the contract says.

:func:`validate` checks JSON text against any one generated type, with the same rules; a tagged
frame type decoded on its own still requires its ``method``, as the schema does (msgspec by itself
requires a tag only inside a union). The conformance vectors in ``schema/conformance/`` run
through :func:`validate`, and the frame vectors through :func:`decode` as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeVar

import msgspec
from nvpair_wm_schema.contract import (
    ERROR_MESSAGES,
    FRAME_TOO_LARGE,
    INBOUND_FRAME_TYPES,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_REQUEST_ID_LENGTH,
    MAX_SAFE_INTEGER,
    METHOD_NOT_FOUND,
    OVERLOADED,
    PARAMLESS_METHODS,
    PARSE_ERROR,
    REQUEST_ONLY_METHODS,
)
from nvpair_wm_schema.inbound_frame_schema import InboundFrame
from nvpair_wm_schema.jsonrpc_schema import (
    ErrorCode,
    ErrorData,
    ErrorObject,
    ErrorResponse,
    EventOutcome,
    EventResponse,
    EventResult,
    RequestId,
)

# The error codes and messages are the contract's (generated); they are re-exported from here.
__all__ = [
    "ERROR_MESSAGES",
    "FRAME_TOO_LARGE",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "KNOWN_METHODS",
    "MAX_FRAME_BYTES",
    "METHOD_NOT_FOUND",
    "OVERLOADED",
    "PARSE_ERROR",
    "TOO_LARGE",
    "Decoded",
    "InvalidFrame",
    "Item",
    "LineBuffer",
    "RpcError",
    "TooLarge",
    "decode",
    "encode",
    "encode_line",
    "event_response",
    "too_large",
    "validate",
]

MAX_FRAME_BYTES: Final = 1 << 20

# The tags of the generated union: the methods a manager accepts on some channel.
KNOWN_METHODS: Final = frozenset(INBOUND_FRAME_TYPES)

_frame_decoder: Final = msgspec.json.Decoder(InboundFrame)
_batch_decoder: Final = msgspec.json.Decoder(list[msgspec.Raw])
_any_decoder: Final = msgspec.json.Decoder()
_encoder: Final = msgspec.json.Encoder()

T = TypeVar("T")


class TooLarge:
    """Marks a line that exceeded the frame limit; its bytes were discarded."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "TOO_LARGE"


TOO_LARGE: Final = TooLarge()


class LineBuffer:
    """Splits a byte stream into newline-delimited frames with a bounded buffer.

    A line longer than ``max_frame`` yields ``TOO_LARGE`` as soon as the limit is crossed (so
    memory stays bounded) and everything up to the next newline is discarded: the stream
    resynchronises there. CRLF is accepted; blank lines are ignored.
    """

    __slots__ = ("_buf", "_discarding", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._discarding = False

    def feed(self, data: bytes) -> list[bytes | TooLarge]:
        out: list[bytes | TooLarge] = []
        if self._discarding:
            nl = data.find(b"\n")
            if nl < 0:
                return out
            data = data[nl + 1 :]
            self._discarding = False
        if b"\n" in data:
            self._buf += data
            *lines, rest = self._buf.split(b"\n")
            self._buf = bytearray(rest)
            for line in lines:
                self._emit(bytes(line), out)
        else:
            self._buf += data
        if len(self._buf) > self.max_frame:
            out.append(TOO_LARGE)
            self._buf.clear()
            self._discarding = True
        return out

    def end(self) -> list[bytes | TooLarge]:
        """Flush a final line that had no newline (the peer closed mid-line)."""
        out: list[bytes | TooLarge] = []
        if not self._discarding and self._buf:
            self._emit(bytes(self._buf), out)
        self._buf.clear()
        self._discarding = False
        return out

    def _emit(self, line: bytes, out: list[bytes | TooLarge]) -> None:
        if len(line) > self.max_frame:
            out.append(TOO_LARGE)
            return
        if line.endswith(b"\r"):
            line = line[:-1]
        if line and not line.isspace():
            out.append(line)


class InvalidFrame(ValueError):
    """A value refused by the generated validator, with where and why."""

    def __init__(self, reason: str, path: str | None = None) -> None:
        super().__init__(f"{reason} at {path}" if path else reason)
        self.reason = reason
        self.path = path


@dataclass(slots=True, frozen=True)
class RpcError:
    """A frame that could not be accepted, with what the sender should be told.

    ``respond`` is false for notifications: JSON-RPC never answers them, even with an error.
    ``method`` is kept (when readable) so the caller can log what was refused.
    """

    code: ErrorCode
    reason: str
    id: RequestId = None
    respond: bool = True
    path: str | None = None
    method: str | None = None

    def response(self, index: int | None = None) -> ErrorResponse:
        data = ErrorData(reason=self.reason)
        if self.path is not None:
            data.path = self.path
        if index is not None:
            data.index = index
        err = ErrorObject(code=self.code, message=ERROR_MESSAGES[self.code], data=data)
        return ErrorResponse(jsonrpc="2.0", id=self.id, error=err)


Item = InboundFrame | RpcError


@dataclass(slots=True)
class Decoded:
    """What one payload (a line, or an HTTP body) held: frames and errors, in order."""

    items: list[Item]
    batch: bool


def _split_validation_error(message: str) -> tuple[str, str | None]:
    reason, sep, where = message.rpartition(" - at `")
    if not sep:
        return message, None
    return reason, where.rstrip("`")


def _integral_floats_to_int(obj: Any) -> Any:
    """JSON Schema counts 1.0 and 1e3 as integers; msgspec's strict mode does not.

    Every integer in the contract lies within +-(2**53 - 1), where a double holds each integer
    exactly, so an integral float in that range becomes that int. A larger one stays a float and
    is refused as not an integer: the schema refuses it too (out of range), and an id such as
    ``1e20`` never becomes an int that an error response would echo.
    """
    if isinstance(obj, float):
        return int(obj) if obj.is_integer() and abs(obj) <= MAX_SAFE_INTEGER else obj
    if isinstance(obj, dict):
        return {k: _integral_floats_to_int(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_integral_floats_to_int(v) for v in obj]
    return obj


@dataclass(slots=True, frozen=True)
class _Target:
    """How :func:`validate` decodes one type: through ``decoder``, refusing ``sentinel``."""

    decoder: msgspec.json.Decoder[Any]
    union: Any
    sentinel: type[msgspec.Struct] | None = None


_targets: dict[Any, _Target] = {}


def _target(typ: Any) -> _Target:
    """The decoder for ``typ``, built once per type.

    msgspec requires the tag field (``method``) of a tagged Struct only when it picks a variant
    of a union; a tagged Struct decoded on its own takes an object without the tag as its own.
    The schema requires it (``required`` plus ``const``). So a lone tagged Struct is decoded
    through the union of itself and a sentinel Struct with the same tag field and another tag:
    the tag is then required. No frame should name the sentinel's tag; one that does is refused.
    """
    target = _targets.get(typ)
    if target is None:
        config = getattr(typ, "__struct_config__", None)
        if config is None or config.tag is None:
            target = _Target(msgspec.json.Decoder(typ), typ)
        else:
            tag = config.tag
            other = f"{tag}\x00(no such tag)" if isinstance(tag, str) else tag + 1
            sentinel = msgspec.defstruct(
                f"_TagRequired{typ.__name__}", [], tag_field=config.tag_field, tag=other
            )
            union = typ | sentinel
            target = _Target(msgspec.json.Decoder(union), union, sentinel)
        _targets[typ] = target
    return target


def validate(data: bytes, typ: type[T]) -> T:
    """Decode and validate JSON text against a generated type, as the schema defines it.

    Beyond msgspec's strict decode: integers may be written ``1.0`` or ``1e3``, the last of
    duplicate member names counts, and a tagged frame type requires its tag (``method``) even
    when it is decoded on its own rather than through a union.

    Raises :class:`InvalidFrame`. Not the hot path: :func:`decode` is.
    """
    target = _target(typ)
    try:
        obj = target.decoder.decode(data)
    except msgspec.DecodeError:
        pass
    else:
        # The strict pass read the first of duplicate names; a sentinel may hide behind it.
        if target.sentinel is None or not isinstance(obj, target.sentinel):
            return obj  # type: ignore[no-any-return]
    try:
        generic = _any_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidFrame(f"malformed JSON: {exc}") from exc
    try:
        obj = msgspec.convert(_integral_floats_to_int(generic), target.union)
    except msgspec.ValidationError as exc:
        # Report this error, not the strict pass's: that one may blame an integral float
        # (1.0) that the schema accepts, and hide the real fault.
        reason, path = _split_validation_error(str(exc))
        raise InvalidFrame(reason, path) from exc
    if target.sentinel is not None and isinstance(obj, target.sentinel):
        config = target.sentinel.__struct_config__
        raise InvalidFrame(f"Invalid value {config.tag!r}", f"$.{config.tag_field}")
    return obj  # type: ignore[no-any-return]


def _is_request_id(value: object) -> bool:
    """The schema's RequestId: what we may echo back in a response."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return len(value) <= MAX_REQUEST_ID_LENGTH
    return value is None or (
        isinstance(value, int) and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    )


def _classify(obj: Any) -> Item:
    """Explain why a generic JSON value is not an acceptable frame, or accept it."""
    if not isinstance(obj, dict):
        return RpcError(INVALID_REQUEST, "a frame must be a JSON object")
    obj = _integral_floats_to_int(obj)
    has_id = "id" in obj
    rid = obj.get("id")
    if has_id and not _is_request_id(rid):
        reason = (
            "id must be null, a string of at most 256 characters or an integer within ±(2^53-1)"
        )
        return RpcError(INVALID_REQUEST, reason, path="$.id")
    method = obj.get("method")
    respond = has_id
    if "method" not in obj and ("result" in obj or "error" in obj):
        # A response sent to us: answering it with an error could ping-pong forever.
        return RpcError(INVALID_REQUEST, "unexpected JSON-RPC response; ignored", rid, False)
    if obj.get("jsonrpc") != "2.0":
        return RpcError(INVALID_REQUEST, 'jsonrpc must be "2.0"', rid, respond)
    if not isinstance(method, str):
        return RpcError(INVALID_REQUEST, "method must be a string", rid, respond)
    if method not in KNOWN_METHODS:
        return RpcError(METHOD_NOT_FOUND, f"unknown method {method!r}", rid, respond, None, method)
    if "params" in obj and not isinstance(obj["params"], dict):
        reason = "params must be an object (by-name)"
        return RpcError(INVALID_PARAMS, reason, rid, respond, "$.params", method)
    if "params" not in obj and method not in PARAMLESS_METHODS:
        return RpcError(INVALID_PARAMS, "params are required", rid, respond, "$.params", method)
    try:
        frame: InboundFrame = msgspec.convert(obj, InboundFrame)
    except msgspec.ValidationError as exc:
        reason, path = _split_validation_error(str(exc))
        if path is not None and path.startswith("$.params"):
            return RpcError(INVALID_PARAMS, reason, rid, respond, path, method)
        if method in REQUEST_ONLY_METHODS and not has_id:
            reason = f"{method} is a request: it needs an id"
        return RpcError(INVALID_REQUEST, reason, rid, respond, path, method)
    return frame


def _decode_one(raw: bytes) -> Item:
    try:
        return _frame_decoder.decode(raw)
    except msgspec.DecodeError:
        pass
    try:
        obj = _any_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        return RpcError(PARSE_ERROR, f"malformed JSON: {exc}")
    return _classify(obj)


def decode(payload: bytes) -> Decoded:
    """Decode one payload: a single frame or a batch (a JSON array of frames)."""
    head = payload[:1]
    if head.isspace():
        head = payload.lstrip()[:1]
    if head != b"[":
        return Decoded([_decode_one(payload)], batch=False)
    try:
        raws = _batch_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        return Decoded([RpcError(PARSE_ERROR, f"malformed JSON: {exc}")], batch=False)
    if not raws:
        return Decoded([RpcError(INVALID_REQUEST, "empty batch")], batch=False)
    return Decoded([_decode_one(bytes(r)) for r in raws], batch=True)


def too_large(limit: int = MAX_FRAME_BYTES) -> RpcError:
    return RpcError(FRAME_TOO_LARGE, f"frame exceeds {limit} bytes; skipped to the next newline")


def event_response(rid: RequestId, outcome: EventOutcome) -> EventResponse:
    return EventResponse(jsonrpc="2.0", id=rid, result=EventResult(outcome=outcome))


def encode(obj: Any) -> bytes:
    """Encode one frame or response as compact JSON, with no newline."""
    return _encoder.encode(obj)


def encode_line(obj: Any) -> bytes:
    """Encode one frame or response as an NDJSON line."""
    buf = bytearray()
    _encoder.encode_into(obj, buf)
    buf += b"\n"
    return bytes(buf)
