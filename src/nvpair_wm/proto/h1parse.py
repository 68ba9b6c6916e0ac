"""HTTP/1.1 request framing for a server (RFC 9112), sans-IO: the head parser, the chunked reader.

Why not h11: h11 is general (both roles, every state, an event object per step, a regex per
header line) and cost most of the server's CPU per request. A server that only reads requests
needs much less, and can validate a whole head with a handful of C-level passes:

* the head ends at the first ``CRLF CRLF`` (one ``bytes.find``); it is split into lines once;
* one ``bytes.translate`` over the whole head finds any control character (only HTAB is
  allowed in a field line) and any bare CR or LF: what it leaves must be exactly the CRLFs the
  split consumed;
* each field name is checked to be a token with one ``translate`` and lower-cased once; values
  lose their surrounding whitespace; only the framing fields (Host, Content-Length,
  Transfer-Encoding, Connection, Expect) are looked at further.

**Bare LF.** RFC 9112 §2.2 lets a recipient accept a lone LF as a line terminator; this parser
does not: a head with a bare CR or LF is answered 400. An origin server that is strict about
line endings cannot be made to disagree with a proxy in front of it about where a field ends,
and every real peer (Go net/http, curl, h11, our own client) writes CRLF. Empty lines before a
request line are ignored, as §2.2 says a server SHOULD (see :func:`skip_empty_lines`).

Malformed input raises :class:`~nvpair_wm.errors.RemoteProtocolError` whose
``error_status_hint`` is the status RFC 9112 asks for: 400 for malformed syntax and ambiguous
framing, 501 for a transfer coding we do not implement, 505 for another HTTP version; the
session adds 414/431 for sizes, since it sees the head before it is complete.
"""

from __future__ import annotations

import re
from typing import Final

from nvpair_wm.errors import RemoteProtocolError

__all__ = [
    "BAD_LINE_ENDING",
    "HUGE_LENGTH",
    "ChunkedReader",
    "RequestHead",
    "parse_head",
    "skip_empty_lines",
]

#: Content-Length values with more digits than this are not converted (Python limits str→int
#: conversion, and no such body fits any limit): they stand for "more than any limit".
_MAX_LENGTH_DIGITS: Final = 18
HUGE_LENGTH: Final = 10**_MAX_LENGTH_DIGITS

#: The reason for a head with a control character or a bare CR or LF, whether it is judged
#: finished or, ended by a bare LF, still unfinished: the same input gets the same answer.
BAD_LINE_ENDING: Final = "control character or bare CR/LF in the request head"

_TCHAR: Final = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#: Bytes allowed in a field line: VCHAR, SP, HTAB, obs-text (RFC 9110 §5.5). Deleting them
#: leaves only what is forbidden (control characters, CR, LF).
_FIELD_BYTES: Final = bytes([9, *range(0x20, 0x7F), *range(0x80, 0x100)])
_VCHAR: Final = bytes(range(0x21, 0x7F))
_HEXDIG: Final = b"0123456789abcdefABCDEF"
_MAX_CHUNK_SIZE_DIGITS: Final = 16
_VERSIONS: Final = frozenset({b"HTTP/1.1", b"HTTP/1.0"})
_OTHER_VERSION = re.compile(rb"HTTP/[0-9]+(?:\.[0-9]+)?")
_OWS: Final = b" \t"

#: Fields that decide framing or connection handling; every other field is passed on as is.
_HOST, _CL, _TE, _CONN, _EXPECT = (
    b"host",
    b"content-length",
    b"transfer-encoding",
    b"connection",
    b"expect",
)
_FRAMING: Final = frozenset({_HOST, _CL, _TE, _CONN, _EXPECT})


def _bad(reason: str, status: int = 400) -> RemoteProtocolError:
    return RemoteProtocolError(reason, status)


class RequestHead:
    """A parsed, validated request head: what the session needs to frame and answer it."""

    __slots__ = (
        "chunked",
        "content_length",
        "expect_continue",
        "headers",
        "keep_alive",
        "method",
        "target",
        "version",
    )

    def __init__(
        self,
        *,
        method: str,
        target: bytes,
        version: bytes,
        headers: list[tuple[bytes, bytes]],
        content_length: int | None,
        chunked: bool,
        keep_alive: bool,
        expect_continue: bool,
    ) -> None:
        self.method = method  # a token, e.g. "POST"
        self.target = target  # origin-form or absolute-form (asterisk/authority-form: see below)
        self.version = version  # b"1.1" or b"1.0"
        self.headers = headers  # names lower-cased, values without surrounding whitespace
        self.content_length = content_length  # body length; None when chunked; 0 when no body
        self.chunked = chunked
        self.keep_alive = keep_alive  # the client lets the connection stay open after this
        self.expect_continue = expect_continue  # HTTP/1.1 ``Expect: 100-continue``


def skip_empty_lines(buf: bytearray) -> None:
    """Drop CRLFs before a request line (RFC 9112 §2.2: a server SHOULD ignore at least one:
    some clients send one after a POST body)."""
    n = 0
    while buf.startswith(b"\r\n", n):
        n += 2
    if n:
        del buf[:n]


def parse_head(head: bytes) -> RequestHead:
    """Parse a request head: the bytes before its terminating empty line (CRLF CRLF).

    Size limits are the caller's (it sees the head grow); everything else RFC 9112 requires of a
    server is checked here.
    """
    lines = head.split(b"\r\n")
    # One pass over the whole head: once the allowed bytes are deleted, only the CRLFs the split
    # consumed may remain. Anything else is a control character, a bare CR or a bare LF.
    if head.translate(None, _FIELD_BYTES) != b"\r\n" * (len(lines) - 1):
        raise _bad(BAD_LINE_ENDING)
    method, target, version = _request_line(lines[0])

    headers: list[tuple[bytes, bytes]] = []
    hosts = 0
    length: int | None = None
    codings: list[bytes] | None = None
    connection: list[bytes] = []
    expect = False
    for i in range(1, len(lines)):
        line = lines[i]
        name, colon, value = line.partition(b":")
        if not colon or not name or name.translate(None, _TCHAR):
            raise _bad(_field_line_fault(line))
        name = name.lower()
        value = value.strip(_OWS)
        headers.append((name, value))
        if name not in _FRAMING:
            continue
        if name == _CL:
            if length is None and value.isdigit() and len(value) <= _MAX_LENGTH_DIGITS:
                length = int(value)  # the usual case, without the list handling
            else:
                length = _content_length(value, length)
        elif name == _TE:
            if codings is None:
                codings = []
            codings += _tokens(value)
        elif name == _HOST:
            hosts += 1
        elif name == _CONN:
            connection += _tokens(value)
        elif value.lower() == b"100-continue":
            expect = True

    http11 = version == b"1.1"
    if hosts > 1 or (http11 and not hosts):
        raise _bad("an HTTP/1.1 request needs exactly one Host field")
    if codings is not None:
        _check_codings(codings, length, http11)
    if http11:
        keep_alive = b"close" not in connection
    else:
        keep_alive = b"keep-alive" in connection and b"close" not in connection
    return RequestHead(
        method=method,
        target=target,
        version=version,
        headers=headers,
        content_length=None if codings is not None else (length or 0),
        chunked=codings is not None,
        keep_alive=keep_alive,
        expect_continue=expect and http11,
    )


def _request_line(line: bytes) -> tuple[str, bytes, bytes]:
    """``method SP request-target SP HTTP-version``, exactly one SP each (RFC 9112 §3)."""
    parts = line.split(b" ")
    if len(parts) != 3:
        raise _bad("malformed request line")
    method, target, version = parts
    if not method or method.translate(None, _TCHAR):
        raise _bad("malformed method")
    if version not in _VERSIONS:
        if _OTHER_VERSION.fullmatch(version):
            raise _bad("HTTP version not supported", 505)
        raise _bad("malformed HTTP version")
    if not target or target.translate(None, _VCHAR):
        raise _bad("malformed request target")
    if target[0] != 0x2F and not _other_target_form(method, target):  # not "/..."
        raise _bad("request target is not origin-form or absolute-form")
    return method.decode("ascii"), target, version[5:]


def _other_target_form(method: bytes, target: bytes) -> bool:
    """absolute-form for http(s) (§3.2.2: a server MUST accept it), asterisk-form for OPTIONS,
    authority-form for CONNECT; the handler then answers the method."""
    scheme, sep, _ = target.partition(b"://")
    if sep:
        return scheme.lower() in (b"http", b"https")
    if method == b"OPTIONS":
        return target == b"*"
    return method == b"CONNECT" and b"/" not in target


def _field_line_fault(line: bytes) -> str:
    if line[:1] in (b" ", b"\t"):
        return "obsolete line folding in a field"
    name, colon, _ = line.partition(b":")
    if not colon:
        return "field line without a colon"
    if name.rstrip(_OWS) != name:
        return "whitespace between a field name and its colon"
    return "malformed field name"


def _tokens(value: bytes) -> list[bytes]:
    """A comma-separated list of case-insensitive tokens, empty elements dropped (§5.6.1)."""
    return [t for t in (t.strip(_OWS) for t in value.lower().split(b",")) if t]


def _content_length(value: bytes, previous: int | None) -> int:
    """Digits only; repeated fields or list elements must all agree (RFC 9110 §8.6)."""
    length = previous
    for element in value.split(b","):
        digits = element.strip(_OWS)
        if not digits.isdigit():  # ASCII digits only: no sign, space or underscore
            raise _bad("malformed Content-Length")
        n = int(digits) if len(digits) <= _MAX_LENGTH_DIGITS else HUGE_LENGTH
        if length is not None and n != length:
            raise _bad("conflicting Content-Length values")
        length = n
    assert length is not None
    return length


def _check_codings(codings: list[bytes], length: int | None, http11: bool) -> None:
    """Transfer-Encoding rules of RFC 9112 §6.1 and §6.3 for a request."""
    if length is not None:
        # Request smuggling territory: a server may reject it and MUST close afterwards.
        raise _bad("both Content-Length and Transfer-Encoding")
    if not http11:
        raise _bad("Transfer-Encoding in an HTTP/1.0 request")
    if not codings or codings[-1] != b"chunked":
        raise _bad("chunked is not the final transfer coding")
    if codings.count(b"chunked") > 1:
        raise _bad("chunked applied more than once")
    if len(codings) > 1:  # gzip, deflate, ... before chunked: we decode none of them
        raise _bad("transfer coding not implemented", 501)


# -- chunked bodies --------------------------------------------------------------------------------

_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


class ChunkedReader:
    """Decodes a chunked body (RFC 9112 §7.1) from the session's buffer, bounded.

    ``max_line`` bounds a chunk-size line (extensions included), ``max_trailer`` the whole
    trailer section; chunk extensions are checked for forbidden bytes and ignored, trailer
    fields are checked like header fields and dropped (nothing here uses them).
    :attr:`pending` is how much of the current chunk is still to come, so the session can
    refuse a body whose declared chunk passes its limit before reading it.
    """

    __slots__ = ("_max_line", "_max_trailer", "_state", "_trailer_bytes", "pending")

    def __init__(self, max_line: int, max_trailer: int) -> None:
        self._max_line = max_line
        self._max_trailer = max_trailer
        self._state = _SIZE
        self._trailer_bytes = 0
        self.pending = 0

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def read(self, buf: bytearray, out: bytearray | None) -> bool:
        """Consume what ``buf`` holds of the body, appending the data to ``out`` (None: drop
        it). True once the last chunk and the trailer section have been read."""
        pos = 0
        end_of_buf = len(buf)
        state = self._state
        while state != _DONE:
            if state == _DATA:
                take = min(self.pending, end_of_buf - pos)
                if not take:
                    break
                if out is not None:
                    out += buf[pos : pos + take]
                pos += take
                self.pending -= take
                if self.pending:
                    break
                state = _DATA_END
            elif state == _DATA_END:
                if end_of_buf - pos < 2:
                    break
                if buf[pos] != 0x0D or buf[pos + 1] != 0x0A:
                    raise _bad("chunk data not followed by CRLF")
                pos += 2
                state = _SIZE
            else:
                eol = buf.find(b"\r\n", pos)
                if state == _SIZE:
                    if (eol if eol >= 0 else end_of_buf) - pos > self._max_line:
                        raise _bad("chunk-size line too long")
                    if eol < 0:
                        break
                    self.pending = _chunk_size(bytes(buf[pos:eol]))
                    state = _DATA if self.pending else _TRAILER
                else:  # a trailer field line, or the empty line that ends the body
                    line_bytes = (eol + 2 if eol >= 0 else end_of_buf) - pos
                    if self._trailer_bytes + line_bytes > self._max_trailer:
                        raise _bad("trailer section too large", 431)
                    if eol < 0:
                        break
                    self._trailer_bytes += line_bytes
                    if eol == pos:
                        state = _DONE
                    else:
                        _trailer_field(bytes(buf[pos:eol]))
                pos = eol + 2
        self._state = state
        del buf[:pos]
        return state == _DONE


def _chunk_size(line: bytes) -> int:
    """``chunk-size [ BWS ";" chunk-ext ]``: hex digits, extensions checked and ignored."""
    size, semi, ext = line.partition(b";")
    size = size.rstrip(_OWS)
    if not size or len(size) > _MAX_CHUNK_SIZE_DIGITS or size.translate(None, _HEXDIG):
        raise _bad("malformed chunk size")
    if semi and ext.translate(None, _FIELD_BYTES):
        raise _bad("control character in a chunk extension")
    return int(size, 16)


def _trailer_field(line: bytes) -> None:
    name, colon, value = line.partition(b":")
    if not colon or not name or name.translate(None, _TCHAR) or value.translate(None, _FIELD_BYTES):
        raise _bad("malformed trailer field")
