"""Newline-delimited framing and JSON-RPC 2.0 envelopes (sans-IO).

Every frame from the broker and from peers passes through :func:`decode`, so the common case is
one call into msgspec: the generated ``InboundFrame`` union decodes, validates and dispatches on
``method`` in a single pass. Only a frame that fails that strict pass takes the slow path, which
re-reads it generically to give the precise JSON-RPC error (-32700 / -32600 / -32601 / -32602)
and to accept what JSON Schema calls an integer but msgspec's strict mode does not (``1.0``,
``1e3``), so that the code and ``schema/`` agree. The re-read also keeps the last of duplicate
member names, as the contract says.

msgspec skips unknown members without checking them, so a frame that passed the strict pass but
carried one (found cheaply, see :func:`_fully_read`) is re-read generically too: every member
must be I-JSON, and no frame may nest deeper than ``MAX_DEPTH``; in a batch each such fault is
its element's, once the whole text is known to be JSON (:func:`_not_json_text`). Nothing raises
out of :func:`decode`, whatever the bytes: each failure is that frame's -32700 with a reason that
says what was wrong and where.

:func:`validate` checks JSON text against any one generated type, with the same rules; a tagged
frame type decoded on its own still requires its ``method``, as the schema does (msgspec by itself
requires a tag only inside a union). The conformance vectors in ``schema/conformance/`` run
through :func:`validate`, and the frame vectors through :func:`decode` as well.
"""

from __future__ import annotations

import contextlib
import math
import re
from array import array
from dataclasses import dataclass
from itertools import accumulate
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

from nvpair_wm.errors import InvalidFrame  # defined there; still importable from here
from nvpair_wm.jsontext import is_json_text

# The error codes and messages are the contract's (generated); they are re-exported from here.
__all__ = [
    "ERROR_MESSAGES",
    "FRAME_TOO_LARGE",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "KNOWN_METHODS",
    "MAX_BATCH_FRAMES",
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
    "batch_too_long",
    "decode",
    "decode_whole",
    "encode",
    "encode_line",
    "event_response",
    "too_large",
    "validate",
]

MAX_FRAME_BYTES: Final = 1 << 20
# Nesting bound, in levels of arrays and objects within one frame (the frame object is level 1;
# the array of a batch is not counted). Deeper frames are refused with -32700 and the stream goes
# on: RFC 8259 section 9 lets a parser bound nesting, and msgspec would otherwise meet Python's
# recursion limit (about 1,000 levels) and raise. The deepest frame of the contract nests 4.
MAX_DEPTH: Final = 64
# Frames in one batch (a broker line or a peer body), in elements of its array. The largest batch
# a manager sends is broadcast.max_batch_frames (512); a broker's batch is bounded by the line
# limit. Without a bound, a 1 MiB body of ~350,000 empty elements earns a ~30 MB answer and
# seconds of CPU. A longer batch is refused as a whole (-32600, one error, nothing applied),
# counted before any element is decoded.
MAX_BATCH_FRAMES: Final = 10_000

# The tags of the generated union: the methods a manager accepts on some channel.
KNOWN_METHODS: Final = frozenset(INBOUND_FRAME_TYPES)

_frame_decoder: Final = msgspec.json.Decoder(InboundFrame)
_batch_decoder: Final = msgspec.json.Decoder(list[msgspec.Raw])
_whole_batch_decoder: Final = msgspec.json.Decoder(list[InboundFrame])
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
        if not self._buf and not self._discarding and data.find(b"\n") == len(data) - 1:
            # One whole line and nothing held (the usual read at a low rate): no buffer copy and
            # no split. An empty ``data`` finds -1 == -1 and emits nothing.
            if data:
                self._emit(data[:-1], out)
            return out
        if self._discarding:
            nl = data.find(b"\n")
            if nl < 0:
                return out
            data = data[nl + 1 :]
            self._discarding = False
        if b"\n" in data:
            # Split as bytes (what the lines are handed out as: no copy per line).
            lines = (bytes(self._buf) + data if self._buf else data).split(b"\n")
            self._buf = bytearray(lines.pop())
            emit = self._emit
            for line in lines:
                emit(line, out)
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
    too_many: bool = False  # a batch over the element bound, refused as a whole (items: its error)
    # A single frame that the strict pass read whole: its compact encoding, which that check
    # computed anyway, so that a caller relaying the frame unchanged need not encode it again.
    encoded: bytes | None = None


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


# -- I-JSON in every member, and the nesting bound --------------------------------------------

# A string, or one never closed, to the end of the text: so every quote starts a match that ends
# where its string does and no match is retried inside a string (a closing quote required, a
# string of escaped quotes never closed cost time quadratic in its length).
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_ESCAPE: Final = re.compile(rb"\\(?:u([0-9A-Fa-f]{4})|.)", re.DOTALL)
_NUMBER: Final = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
# An integer literal that no finite double holds has at least 309 digits (2**1024 ~ 1.8e308).
_LONG_DIGITS: Final = re.compile(rb"[0-9]{309}")
_DIGITS: Final = b"0123456789"
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_NOT_BRACKETS_OR_DIGITS: Final = bytes(b for b in range(256) if b not in b"[]{}0123456789")
_STEP: Final = tuple(1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256))
_BOM: Final = b"\xef\xbb\xbf"
# The first four bytes of a \\u escape of a surrogate (see _not_json_text).
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")
TOO_DEEP: Final = (
    f"nested deeper than {MAX_DEPTH} levels of arrays and objects (the contract's MAX_DEPTH)"
)


def nesting_depth(text: bytes) -> int:
    """How deeply arrays and objects nest in JSON text; brackets inside strings do not count.

    Iterative and linear, so it is safe on any input (malformed text included): only the
    brackets are read, never parsed.
    """
    skeleton = _STRING.sub(b"", text).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, skeleton)), default=0)


def _too_deep(brackets: int, text: bytes) -> bool:
    # In JSON text the depth is at most half the brackets (each opens and closes once); only
    # above that cheap bound is the text scanned. Unbalanced text is malformed anyway.
    return brackets > 2 * MAX_DEPTH and nesting_depth(text) > MAX_DEPTH


def _lone_surrogate(text: bytes) -> tuple[int, str] | None:
    """The first ``\\uXXXX`` escape of a surrogate without its other half: (byte offset, escape).

    Escapes are read left to right (``\\\\`` is one escape), so text after an escaped backslash
    is never mistaken for an escape.
    """
    high: tuple[int, str] | None = None
    for m in _ESCAPE.finditer(text):
        hexa = m.group(1)
        unit = int(hexa, 16) if hexa is not None else -1
        if high is not None:
            if m.start() == high[0] + 6 and 0xDC00 <= unit <= 0xDFFF:
                high = None  # a correct pair: one astral character
                continue
            return high
        if 0xD800 <= unit <= 0xDBFF:
            high = (m.start(), m.group().decode("ascii"))
        elif 0xDC00 <= unit <= 0xDFFF:
            return m.start(), m.group().decode("ascii")
    return high


def _overflowing_number(text: bytes) -> tuple[int, bytes] | None:
    """The first number literal that no finite IEEE 754 double holds: (byte offset, literal)."""
    blanked = _STRING.sub(lambda m: b'""'.center(len(m.group()), b" "), text)
    for m in _NUMBER.finditer(blanked):
        if math.isinf(float(m.group())):
            return m.start(), m.group()
    return None


def _utf8_error(text: bytes) -> str | None:
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start
        after = text[at + 1] if at + 1 < len(text) else 0
        if text[at] == 0xED and 0xA0 <= after <= 0xBF:
            what = "a surrogate encoded in UTF-8 (not a Unicode scalar value)"
        else:
            what = exc.reason
        return f"invalid UTF-8 at byte {at}: {what} (JSON text is UTF-8, RFC 8259 section 8.1)"
    return None


def _why_unparseable(text: bytes, exc: msgspec.DecodeError) -> str:
    """msgspec's words, made precise where they mislead (a lone surrogate is "truncated")."""
    if text.lstrip(b" \t\r\n").startswith(_BOM):
        return "malformed JSON: a byte order mark (U+FEFF) before the text (RFC 8259 section 8.1)"
    utf8 = _utf8_error(text)
    if utf8 is not None:
        return f"malformed JSON: {utf8}"
    lone = _lone_surrogate(text) if b"\\u" in text else None
    if lone is not None:
        at, escape = lone
        return (
            f"malformed JSON: lone surrogate {escape} at byte {at}: strings must be Unicode "
            "scalar values (I-JSON, RFC 7493)"
        )
    big = _overflowing_number(text) if "out of range" in str(exc) else None
    if big is not None:
        at, literal = big
        shown = literal.decode("ascii") if len(literal) <= 24 else f"{literal[:20].decode()}..."
        return (
            f"malformed JSON: number {shown} at byte {at} is beyond every finite IEEE 754 "
            "double (I-JSON, RFC 7493)"
        )
    return f"malformed JSON: {exc}"


@dataclass(slots=True, frozen=True)
class _Unparseable:
    reason: str


def _parse(text: bytes) -> Any:
    """Read JSON text generically under every rule of the contract, or say why it cannot be.

    Returns the value, or :class:`_Unparseable`. The rules: at most ``MAX_DEPTH`` levels, valid
    UTF-8, no lone surrogates, only numbers that a finite double holds (msgspec checks the last
    three except integer literals of 309+ digits, checked here). Nothing escapes as an exception:
    RecursionError is msgspec's own bound, a backstop behind ``MAX_DEPTH``.
    """
    # One pass keeps the brackets and digits, for two cheap bounds: depth, and long numbers.
    kept = text.translate(None, _NOT_BRACKETS_OR_DIGITS)
    brackets = len(kept.translate(None, _DIGITS))
    if _too_deep(brackets, text):
        return _Unparseable(f"malformed JSON: {TOO_DEEP}")
    try:
        value = _any_decoder.decode(text)
    except RecursionError:
        return _Unparseable(f"malformed JSON: {TOO_DEEP}")
    except msgspec.DecodeError as exc:
        return _Unparseable(_why_unparseable(text, exc))
    if len(kept) - brackets >= 309 and _LONG_DIGITS.search(text):
        big = _overflowing_number(text)
        if big is not None:
            at, literal = big
            return _Unparseable(
                f"malformed JSON: number {literal[:20].decode()}... ({len(literal)} digits) at "
                f"byte {at} is beyond every finite IEEE 754 double (I-JSON, RFC 7493)"
            )
    return value


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

    Every member, also one the type does not declare, must be I-JSON and the text at most
    ``MAX_DEPTH`` deep. Raises :class:`InvalidFrame`. Not the hot path: :func:`decode` is.
    """
    target = _target(typ)
    strict: Any = None
    with contextlib.suppress(msgspec.DecodeError, RecursionError):
        strict = target.decoder.decode(data)
    # Every member is held to the contract, also those the type skips (I-JSON, MAX_DEPTH).
    generic = _parse(data)
    if isinstance(generic, _Unparseable):
        raise InvalidFrame(generic.reason)
    # The strict pass keeps the last of repeated names, but picks a union member by the first
    # tag: a sentinel may hide behind it.
    if strict is not None and (target.sentinel is None or not isinstance(strict, target.sentinel)):
        return strict  # type: ignore[no-any-return]
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


def _fills_defaults(typ: Any) -> bool:
    """Whether decoding ``typ`` can fill in a member the text did not have (a schema
    ``default``, such as ``NodeRecord.port``): its re-encoding then holds names the text lacks."""
    seen: set[Any] = set()

    def walk(node: Any) -> bool:
        if isinstance(node, msgspec.inspect.Metadata):
            return walk(node.type)
        if isinstance(node, msgspec.inspect.StructType):
            if node.cls in seen:
                return False
            seen.add(node.cls)
            for f in node.fields:
                if not f.required and (
                    f.default is not msgspec.NODEFAULT or f.default_factory is not msgspec.NODEFAULT
                ):
                    return True
                if walk(f.type):
                    return True
            return False
        for attr in ("types", "item_type", "key_type", "value_type"):
            inner = getattr(node, attr, None)
            for child in inner if isinstance(inner, tuple) else (inner,):
                if child is not None and walk(child):
                    return True
        return False

    return walk(msgspec.inspect.type_info(typ))


# Frame types whose fast-path result can be trusted by counting quote marks (see _fully_read).
_COUNTABLE: Final = frozenset(
    t
    for t in InboundFrame.__origin__.__args__  # type: ignore[attr-defined]
    if not _fills_defaults(t)
)


def _fully_read(raw: bytes, frame: Any) -> bytes | None:
    """The compact encoding of ``frame`` when the strict typed decode read every member of
    ``raw``, so that its result may stand without the generic re-read (which checks members the
    types skip); else None.

    Why this is sound: msgspec validates every member it reads (UTF-8, surrogates, bounded
    integers, the schema's shallow nesting) but skips unknown ones unchecked. Re-encoding the
    frame writes each member it holds in the shortest spelling JSON has (strings with the
    shortest escapes, integers as plain literals: the strict pass accepts no other), so the text
    is never shorter, and each skipped member makes it at least 5 bytes longer (``,"":0``). So
    equal lengths (a compact sender: the common case) prove nothing was skipped. Otherwise
    (whitespace, other escapes), quote marks are counted: the re-encoding holds two per member
    name and string and one per ``"`` inside a string, like the text (``\u0022`` counted as
    one) whatever its whitespace or number spellings, while a skipped member adds at least two.
    Types that fill a default in (``NodeRecord.port``) re-encode names the text lacks, so they
    always take the re-read.

    Why this is cheap: one encode (about half a typed decode) and a length compare on the common
    path; the I-JSON scan runs only for frames that carry unknown members.
    """
    if type(frame) not in _COUNTABLE:
        return None
    canonical = _encoder.encode(frame)
    if _read_whole(raw, canonical):
        return canonical
    return None


def _read_whole(raw: bytes, canonical: bytes) -> bool:
    """:func:`_fully_read`'s rule: ``raw`` was read whole when it is as long as its re-encoding
    ``canonical`` or holds as many quote marks (``\\u0022`` counted as one)."""
    if len(canonical) == len(raw):
        return True
    quotes = raw.count(b'"')
    if b"\\" in raw:
        quotes += raw.count(b"\\u0022")
    return canonical.count(b'"') == quotes


def _strict(raw: bytes) -> tuple[Any, bytes | None]:
    """The strict typed decode of one frame (None when it refused it), and the compact encoding
    :func:`_fully_read` made when it read every member (else None)."""
    try:
        frame = _frame_decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None, None
    return frame, _fully_read(raw, frame)


def decode_frame(raw: bytes) -> tuple[Item, bytes | None]:
    """One frame (a payload that is not a batch, or one element of one): the item
    :func:`decode` makes of it, and its compact encoding when the strict pass read it whole
    (else None). The strict decode is trusted when it read every member; else the generic
    re-read applies the contract to every member (unknown ones too) and explains errors."""
    frame, encoded = _strict(raw)
    if encoded is not None:
        return frame, encoded
    return _reread(raw, frame), None


def _decode_single(raw: bytes) -> Decoded:
    """A payload that is one frame, keeping its encoding (:attr:`Decoded.encoded`)."""
    item, encoded = decode_frame(raw)
    return Decoded([item], False, False, encoded)


def decode_whole(raw: bytes) -> tuple[Any, bytes] | None:
    """One frame that the strict pass reads whole, with its compact encoding: the common case
    of :func:`decode` for a payload that is one frame, without its envelope. None for anything
    else (a batch, an error, a frame with members the types skip): :func:`decode` then."""
    frame, encoded = _strict(raw)
    if encoded is None:
        return None
    return frame, encoded


def _whole_batch(payload: bytes, max_batch: int) -> list[Any] | None:
    """The frames of a batch that the strict pass reads whole, element by element, as
    :func:`decode_frame` would return them, found with one typed decode and one encode of the
    whole array (no call, copy or encode per element); None for anything else (an element it
    refuses, one with members the types skip, an empty or over-long batch): the element-wise
    path then.

    :func:`_fully_read`'s rule holds for the array as a whole: each element's text is at least
    as long as its re-encoding, and holds at least as many quote marks, with equality exactly
    when it was read whole; the array's brackets and commas are the same on both sides and its
    whitespace adds length but no quote marks. So the sums are equal only when every element's
    are. Every element's type must be countable, or one's filled-in default could hide
    another's skipped member."""
    try:
        frames = _whole_batch_decoder.decode(payload)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not frames or len(frames) > max_batch or not _COUNTABLE.issuperset(map(type, frames)):
        return None
    canonical = _encoder.encode(frames)
    if _read_whole(payload, canonical):
        return frames
    return None


def _reread(raw: bytes, frame: Any) -> Item:
    """The generic re-read of a frame the strict pass refused (``frame`` None) or did not read
    whole: the contract applied to every member, and errors explained."""
    obj = _parse(raw)
    if isinstance(obj, _Unparseable):
        return RpcError(PARSE_ERROR, obj.reason)
    if frame is not None:
        # The skipped members are now checked too. A repeated name needs no re-read: msgspec
        # keeps the last value of a field, as the contract does, and refuses a second `method`
        # that names another type (which then takes the re-read below).
        return frame  # type: ignore[no-any-return]
    return _classify(obj)


def _blank(m: re.Match[bytes]) -> bytes:
    """A string as spaces between its quotes: the same length, so positions are kept."""
    return b'"' + b" " * (len(m.group()) - 2) + b'"'


def _split_array(payload: bytes) -> list[bytes] | None:
    """The elements of a JSON array, found without parsing them (so at any depth); None if the
    text is not one array of non-empty elements. Used only when msgspec cannot split it.

    Linear and mostly in C: strings are blanked (positions kept), the depth after each byte is a
    running sum, and the loop visits only the commas between elements, jumping over nested ones.
    """
    blanked = _STRING.sub(_blank, payload)
    first = len(blanked) - len(blanked.lstrip())
    if blanked[first : first + 1] != b"[":
        return None
    depth = array("l", accumulate(map(_STEP.__getitem__, blanked)))
    try:
        end = depth.index(0, first)
    except ValueError:
        return None  # never closed
    if blanked[end : end + 1] != b"]" or blanked[end + 1 :].strip():
        return None
    elements: list[bytes] = []
    start = at = first + 1
    while (at := blanked.find(b",", at, end)) >= 0:
        if depth[at] != 1:
            at = depth.index(1, at)  # past the nested value holding this comma
            continue
        elements.append(payload[start:at])
        start = at = at + 1
    elements.append(payload[start:end])
    if any(not e.strip() for e in elements):
        return None
    return elements


def _not_json_text(batch: bytes) -> str | None:
    """Why a batch that msgspec's splitter refused is not JSON text; None when it is.

    What the splitter refuses as an element's own fault is set aside: a lone surrogate escape
    gets other hex digits (as long, so msgspec's byte offsets hold; the text after an escaped
    backslash may change too, which changes no grammar), and text nested beyond its bound is
    read by :func:`is_json_text`, which does not recurse. The splitter does not check UTF-8
    inside strings: each element's own decode does."""
    text = _SURROGATE_ESCAPE.sub(rb"\\u00", batch)
    try:
        _batch_decoder.decode(text)
    except msgspec.DecodeError as exc:
        return f"malformed JSON: {exc}"
    except RecursionError:
        if not is_json_text(text):
            return f"malformed JSON: not JSON text (RFC 8259; read without recursion: {TOO_DEEP})"
    return None


def batch_too_long(count: int, limit: int) -> RpcError:
    """The one error of a batch over ``limit`` elements (its ids are not read: null)."""
    return RpcError(
        INVALID_REQUEST,
        f"batch of {count} frames exceeds the limit of {limit} frames per batch (max_batch)",
    )


def _too_many(count: int, limit: int) -> Decoded:
    return Decoded([batch_too_long(count, limit)], batch=False, too_many=True)


def decode(payload: bytes, max_batch: int = MAX_BATCH_FRAMES) -> Decoded:
    """Decode one payload: a single frame or a batch (a JSON array of frames) of at most
    ``max_batch`` elements; a longer batch is one -32600 (:attr:`Decoded.too_many`)."""
    head = payload[:1]
    if head.isspace():
        head = payload.lstrip()[:1]
    if head != b"[":
        return _decode_single(payload)
    whole = _whole_batch(payload, max_batch)
    if whole is not None:
        return Decoded(whole, batch=True)
    try:
        # Splitting makes one Raw view per element, in C; nothing is decoded or copied yet.
        views = _batch_decoder.decode(payload)
        if len(views) > max_batch:
            return _too_many(len(views), max_batch)
        raws = [bytes(r) for r in views]
    except (msgspec.DecodeError, RecursionError):
        # msgspec's splitter refuses a lone surrogate escape anywhere in the batch, and an
        # element nested beyond its own bound. Like every other I-JSON rule (and the nesting
        # bound) each is the offending element's error, not the whole body's: only a body that
        # is not JSON text at all is one parse error, and that is settled first.
        why = _not_json_text(payload)
        if why is not None:
            return Decoded([RpcError(PARSE_ERROR, why)], batch=False)
        raws = _split_array(payload) or []
    if not raws:
        return Decoded([RpcError(INVALID_REQUEST, "empty batch")], batch=False)
    if len(raws) > max_batch:
        return _too_many(len(raws), max_batch)
    return Decoded([decode_frame(r)[0] for r in raws], batch=True)


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
