"""The HTTP/1.1 server framing (``proto.h1parse`` and ``proto.h1.H1Session``) fed bytes: no socket.

Each RFC 9112 rule the parser enforces gets the precise status it answers; chunked bodies,
pipelining and keep-alive are checked end to end through the session; a request split at every
byte boundary must give the same result as one fed whole. h11 serves as the independent oracle:
it writes the valid requests of the differential test and reads every response we write.
"""

from __future__ import annotations

import random

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvpair_wm.errors import RemoteProtocolError
from nvpair_wm.http.core import (
    Limits,
    Request,
    Response,
    empty_response,
    error_response,
    path_of,
)
from nvpair_wm.proto.h1 import H1Session
from nvpair_wm.proto.h1parse import HUGE_LENGTH, ChunkedReader, parse_head

FP = "cd" * 32


class Recorder:
    """Answers 202 and records every request it completed; ``/early`` gets 415 from ``head``."""

    def __init__(self, max_body: int = 1024 * 1024) -> None:
        self.max_body = max_body
        self.completed: list[tuple[Request, bytes]] = []
        self.heads = 0

    def head(self, req: Request) -> Response | None:
        self.heads += 1
        if req.path == "/early":
            return error_response(415, "early")
        return None

    def complete(self, req: Request, body: bytes) -> Response:
        self.completed.append((req, body))
        return empty_response(202, [(b"x-n", str(len(self.completed)).encode())])


def req(
    body: bytes = b"{}",
    *,
    target: str = "/e",
    version: str = "1.1",
    headers: str = "Host: t\r\n",
    length: bool = True,
) -> bytes:
    cl = f"Content-Length: {len(body)}\r\n" if length else ""
    return f"POST {target} HTTP/{version}\r\n{headers}{cl}\r\n".encode() + body


def chunked(*chunks: bytes, trailer: bytes = b"", ext: bytes = b"") -> bytes:
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(c), ext, c) for c in chunks)
    return out + b"0\r\n" + trailer + b"\r\n"


def chunked_req(body: bytes, target: str = "/e") -> bytes:
    head = f"POST {target} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head.encode() + body


def responses(data: bytes) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    """Parse what the session wrote with h11's client (which checks our framing)."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="POST", target="/", headers=[("host", "t")]))
    client.send(h11.EndOfMessage())
    if not data:
        return []  # (h11 takes b"" for EOF)
    client.receive_data(data)
    out: list[tuple[int, dict[bytes, bytes], bytes]] = []
    status, fields, body = 0, {}, b""
    while True:
        ev = client.next_event()
        if isinstance(ev, h11.InformationalResponse):
            out.append((ev.status_code, dict(ev.headers), b""))
        elif isinstance(ev, h11.Response):
            status, fields, body = ev.status_code, dict(ev.headers), b""
        elif isinstance(ev, h11.Data):
            body += ev.data
        elif isinstance(ev, h11.EndOfMessage):
            out.append((status, fields, body))
            if client.our_state is not h11.DONE or client.their_state is not h11.DONE:
                return out
            client.start_next_cycle()
            client.send(h11.Request(method="POST", target="/", headers=[("host", "t")]))
            client.send(h11.EndOfMessage())
        else:  # NEED_DATA, ConnectionClosed
            return out


def feed(
    data: bytes, *, limits: Limits | None = None, handler: Recorder | None = None
) -> H1Session:
    s = H1Session(handler or Recorder(), limits or Limits(), FP, now=0.0)
    s.receive_data(data, 0.0)
    return s


def status_of(data: bytes, limits: Limits) -> tuple[int, bool]:
    """The first response's status for ``data`` and whether the connection is closing."""
    s = feed(data, limits=limits)
    out = responses(s.data_to_send())
    assert out, "no response"
    return out[0][0], s.closed


# -- malformed heads: the precise status, then close ---------------------------------------------

MALFORMED: list[tuple[str, bytes, int]] = [
    ("garbage", b"hello there\r\n\r\n", 400),
    ("two spaces", b"POST  /e HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("no version", b"POST /e\r\nHost: t\r\n\r\n", 400),
    ("space in target", b"POST /a b HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("lower-case version", b"POST /e http/1.1\r\nHost: t\r\n\r\n", 400),
    ("HTTP/2.0", req().replace(b"HTTP/1.1", b"HTTP/2.0", 1), 505),
    ("HTTP/0.9", req().replace(b"HTTP/1.1", b"HTTP/0.9", 1), 505),
    ("HTTP/3", req().replace(b"HTTP/1.1", b"HTTP/3", 1), 505),
    ("method not a token", b"PO(ST /e HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("relative target", b"POST e HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("ftp absolute-form", b"POST ftp://h/e HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("non-ASCII target", b"POST /\xc3\xa9 HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("space before colon", b"POST /e HTTP/1.1\r\nHost : t\r\n\r\n", 400),
    ("obs-fold", b"POST /e HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n  2\r\n\r\n", 400),
    ("no colon", b"POST /e HTTP/1.1\r\nHost: t\r\nX-A\r\n\r\n", 400),
    ("empty name", b"POST /e HTTP/1.1\r\nHost: t\r\n: v\r\n\r\n", 400),
    ("control char in value", b"POST /e HTTP/1.1\r\nHost: t\r\nX-A: a\x01b\r\n\r\n", 400),
    ("NUL in value", b"POST /e HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n", 400),
    ("bare CR in value", b"POST /e HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n", 400),
    ("bare LF inside", b"POST /e HTTP/1.1\r\nX-A: 1\nHost: t\r\n\r\n", 400),
    ("bare LF only", b"POST /e HTTP/1.1\nHost: t\nContent-Length: 0\n\n", 400),
    ("HTTP/1.1 without Host", b"POST /e HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 400),
    ("two Hosts", b"POST /e HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 0\r\n\r\n", 400),
    (
        "Content-Length not digits",
        b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: nope\r\n\r\n",
        400,
    ),
    ("Content-Length signed", b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: +2\r\n\r\n{}", 400),
    ("Content-Length negative", b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400),
    ("Content-Length empty", b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length:\r\n\r\n", 400),
    ("Content-Lengths differ", req(headers="Host: t\r\nContent-Length: 3\r\n"), 400),
    (
        "Content-Length list differs",
        b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 2, 3\r\n\r\n",
        400,
    ),
    ("CL and TE", req(headers="Host: t\r\nTransfer-Encoding: chunked\r\n"), 400),
    ("TE not chunked", chunked_req(b"").replace(b"chunked", b"gzip"), 400),
    ("TE chunked twice", chunked_req(b"").replace(b"chunked", b"chunked, chunked"), 400),
    ("TE chunked not last", chunked_req(b"").replace(b"chunked", b"chunked, gzip"), 400),
    ("TE gzip then chunked", chunked_req(b"").replace(b"chunked", b"gzip, chunked"), 501),
    ("TE unknown then chunked", chunked_req(b"").replace(b"chunked", b"foo, chunked"), 501),
    ("TE empty", chunked_req(b"").replace(b"chunked", b""), 400),
    ("TE in HTTP/1.0", chunked_req(chunked(b"{}")).replace(b"HTTP/1.1", b"HTTP/1.0"), 400),
    (
        "huge Content-Length",
        b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: " + b"9" * 40 + b"\r\n\r\n",
        413,
    ),
]


@pytest.mark.parametrize(
    ("data", "status"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_head_gets_its_status_and_the_connection_closes(data: bytes, status: int) -> None:
    handler = Recorder()
    s = feed(data + req(b"behind"), handler=handler)  # a valid request pipelined behind it
    out = responses(s.data_to_send())
    assert [r[0] for r in out] == [status]
    assert out[0][1][b"connection"] == b"close"
    assert b'"error"' in out[0][2]
    assert s.closed
    assert handler.completed == []  # neither it nor the request behind it was applied


def test_request_line_over_the_limit_is_414_and_header_block_431_finished_or_not() -> None:
    limits = Limits(max_header_bytes=1024)
    long_line = req(target="/" + "x" * 2000)
    big_block = req(headers="Host: t\r\nX-Big: " + "y" * 2000 + "\r\n")
    assert status_of(long_line, limits=limits) == (414, True)
    assert status_of(big_block, limits=limits) == (431, True)
    assert status_of(long_line[:1500], limits=limits) == (414, True)  # no CRLF yet
    assert status_of(big_block[:1500], limits=limits) == (431, True)  # no blank line yet
    exact = req(b"", headers="Host: t\r\nX-Pad: ")  # grow it to exactly the limit
    exact = exact[:-4] + b"p" * (1024 - len(exact)) + b"\r\n\r\n"
    assert len(exact) == 1024
    assert status_of(exact, limits=limits) == (202, False)
    assert status_of(exact.replace(b"X-Pad: ", b"X-Pad: p"), limits=limits) == (431, True)


def test_valid_variants_are_accepted() -> None:
    for data in [
        req(target="https://h:1/e?q=1"),  # absolute-form (RFC 9112 §3.2.2)
        req(target="HTTP://h/e"),  # scheme is case-insensitive
        req(headers="hOsT: t\r\nX-Empty:\r\nX-Tab:\t a \t\r\n"),
        req(headers="Host: t\r\nContent-Length: 2\r\n"),  # repeated, same value
        b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 2 , 2\r\n\r\n{}",  # a list, agreeing
        req(version="1.0", headers=""),  # HTTP/1.0 needs no Host
        req(headers="Host: t\r\nX-Obs: café\r\n"),  # obs-text
        b"\r\n\r\n" + req(),  # empty lines before the request line are ignored (§2.2)
    ]:
        handler = Recorder()
        s = feed(data, handler=handler)
        assert [r[0] for r in responses(s.data_to_send())] == [202], data
        assert len(handler.completed) == 1


def test_parse_head_fields() -> None:
    head = parse_head(
        b"POST https://h/e?x HTTP/1.1\r\nHost: h\r\nX-A:  a b \r\nCONNECTION: Keep-Alive, Close\r\n"
        b"Expect: 100-Continue\r\nTransfer-Encoding: Chunked"
    )
    assert (head.method, head.target, head.version) == ("POST", b"https://h/e?x", b"1.1")
    assert head.headers[1] == (b"x-a", b"a b")  # name lower-cased, OWS stripped, inner SP kept
    assert head.chunked and head.content_length is None
    assert not head.keep_alive  # close wins
    assert head.expect_continue
    head = parse_head(b"POST /e HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 0012")
    assert head.content_length == 12
    assert not head.keep_alive  # HTTP/1.0 closes by default
    assert not head.expect_continue  # §10.1.1: ignored in an HTTP/1.0 request
    assert parse_head(b"POST /e HTTP/1.0\r\nConnection: keep-alive").keep_alive
    assert parse_head(b"POST /e HTTP/1.1\r\nHost: h").content_length == 0
    assert (
        parse_head(b"POST /e HTTP/1.1\r\nHost: h\r\nContent-Length: " + b"1" * 30).content_length
        == HUGE_LENGTH
    )
    with pytest.raises(RemoteProtocolError) as err:
        parse_head(b"POST /e HTTP/1.1\r\nHost: h\r\nHost : h")
    assert err.value.error_status_hint == 400
    assert "whitespace" in str(err.value)
    for target, method in [(b"*", b"OPTIONS"), (b"h:443", b"CONNECT")]:
        assert parse_head(method + b" " + target + b" HTTP/1.1\r\nHost: h").target == target
    with pytest.raises(RemoteProtocolError):
        parse_head(b"POST * HTTP/1.1\r\nHost: h")


# -- chunked bodies ------------------------------------------------------------------------------


def test_chunked_bodies_with_extensions_trailers_and_odd_sizes() -> None:
    cases = [
        (chunked(b"ab", b"cde"), b"abcde"),
        (chunked(b"ab", ext=b";name=value;flag"), b"ab"),
        (chunked(b"ab", ext=b' ; q="quoted \\" string"'), b"ab"),  # BWS before ';'
        (chunked(b"x" * 26, trailer=b"X-Sum: 1\r\nX-B:\r\n"), b"x" * 26),
        (b"000A\r\n0123456789\r\n0000\r\n\r\n", b"0123456789"),  # upper-case hex, leading zeros
        (b"2 \r\nab\r\n0\r\n\r\n", b"ab"),  # trailing whitespace after the size
        (b"0\r\n\r\n", b""),
    ]
    for body, expect in cases:
        handler = Recorder()
        s = feed(chunked_req(body) + req(b"next"), handler=handler)
        assert [r[0] for r in responses(s.data_to_send())] == [202, 202], body
        assert [b for _, b in handler.completed] == [expect, b"next"]
        assert handler.completed[0][0].content_length is None
        assert not s.closed


BROKEN_CHUNKS: list[tuple[str, bytes, int]] = [
    ("size not hex", b"zz\r\n{}\r\n0\r\n\r\n", 400),
    ("empty size", b"\r\n{}\r\n0\r\n\r\n", 400),
    ("signed size", b"+2\r\n{}\r\n0\r\n\r\n", 400),
    ("size over 16 digits", b"1" + b"0" * 16 + b"\r\n", 400),
    ("no CRLF after data", b"2\r\n{}XX0\r\n\r\n", 400),
    ("control char in extension", b"2;a=\x01\r\n{}\r\n0\r\n\r\n", 400),
    ("bare LF after size", b"2\n{}\r\n0\r\n\r\n", 400),
    ("malformed trailer", b"0\r\nno colon here\r\n\r\n", 400),
    ("size line too long", b"2;" + b"e" * 2000 + b"\r\n{}\r\n0\r\n\r\n", 400),
    ("trailer section too large", b"0\r\n" + b"X-T: " + b"v" * 2000 + b"\r\n\r\n", 431),
    ("declared chunk over the body limit", b"%x\r\n" % (1024 * 1024 + 1), 413),
]


@pytest.mark.parametrize(
    ("body", "status"), [m[1:] for m in BROKEN_CHUNKS], ids=[m[0] for m in BROKEN_CHUNKS]
)
def test_broken_chunked_body_gets_its_status_and_close(body: bytes, status: int) -> None:
    handler = Recorder()
    s = feed(chunked_req(body), limits=Limits(max_header_bytes=1024), handler=handler)
    out = responses(s.data_to_send())
    assert [r[0] for r in out] == [status]
    assert out[0][1][b"connection"] == b"close"
    assert s.closed
    assert handler.completed == []


def test_chunked_body_limit_is_exact() -> None:
    handler = Recorder(max_body=10)
    s = feed(chunked_req(chunked(b"12345", b"67890")), handler=handler)
    assert [r[0] for r in responses(s.data_to_send())] == [202]
    s = feed(chunked_req(chunked(b"12345", b"678901")), handler=Recorder(max_body=10))
    assert [r[0] for r in responses(s.data_to_send())] == [413]
    assert s.closed


def test_chunked_reader_alone_consumes_only_its_body() -> None:
    r = ChunkedReader(100, 100)
    buf = bytearray(chunked(b"abc") + b"NEXT")
    out = bytearray()
    assert r.read(buf, out)
    assert (bytes(out), bytes(buf)) == (b"abc", b"NEXT")
    r = ChunkedReader(100, 100)
    buf = bytearray(b"5\r\nab")
    assert not r.read(buf, None)  # dropped, not collected
    assert (r.pending, bytes(buf)) == (3, b"")


# -- pipelining, splitting, keep-alive ------------------------------------------------------------


def test_three_pipelined_requests_in_one_chunk_are_answered_in_order() -> None:
    handler = Recorder()
    data = req(b"1") + chunked_req(chunked(b"2")) + req(b"3", target="/x?q")
    s = feed(data, handler=handler)
    out = responses(s.data_to_send())
    assert [(st, f[b"x-n"]) for st, f, _ in out] == [(202, b"1"), (202, b"2"), (202, b"3")]
    assert [(r.path, b) for r, b in handler.completed] == [("/e", b"1"), ("/e", b"2"), ("/x", b"3")]
    assert not s.closed


def _run(pieces: list[bytes]) -> tuple[list[tuple[str, bytes]], list[int], bool]:
    handler = Recorder()
    s = H1Session(handler, Limits(), FP, now=0.0)
    out = b""
    for piece in pieces:
        s.receive_data(piece, 0.0)
        out += s.data_to_send()
    statuses = [r[0] for r in responses(out)]
    return [(r.path, b) for r, b in handler.completed], statuses, s.closed


@pytest.mark.parametrize(
    "data",
    [
        req(b'{"a":1}') + chunked_req(chunked(b"ab", b"cd", ext=b";x=1", trailer=b"T: 1\r\n")),
        req(b"xyz", target="/early") + req(b"after"),  # early answer, body discarded
    ],
    ids=["cl-then-chunked", "early-answer-discard"],
)
def test_a_request_split_at_every_byte_boundary_gives_the_same_result(data: bytes) -> None:
    whole = _run([data])
    assert whole[0], "nothing completed"
    for i in range(1, len(data)):
        assert _run([data[:i], data[i:]]) == whole, i
    assert _run([data[i : i + 1] for i in range(len(data))]) == whole  # one byte at a time


def test_keep_alive_rules() -> None:
    s = feed(req(version="1.0", headers=""))
    out = responses(s.data_to_send())
    assert (out[0][1].get(b"connection"), s.closed) == (b"close", True)  # 1.0: close by default
    s = feed(req(version="1.0", headers="Connection: keep-alive\r\n"))
    out = responses(s.data_to_send())
    assert (out[0][1].get(b"connection"), s.closed) == (b"keep-alive", False)
    s = feed(req(headers="Host: t\r\nConnection: close\r\n") + req(b"ignored"))
    out = responses(s.data_to_send())
    assert [r[0] for r in out] == [202]
    assert (out[0][1].get(b"connection"), s.closed) == (b"close", True)
    s = feed(req())
    out = responses(s.data_to_send())
    assert (b"connection" in out[0][1], s.closed) == (False, False)


def test_expect_100_continue() -> None:
    expect = "Host: t\r\nExpect: 100-continue\r\n"
    handler = Recorder()
    s = H1Session(handler, Limits(), FP, now=0.0)
    s.receive_data(req(b"{}", headers=expect)[:-2], 0.0)
    assert s.data_to_send() == b"HTTP/1.1 100 Continue\r\n\r\n"  # head() said go on
    s.receive_data(b"{}", 0.0)
    assert [r[0] for r in responses(s.data_to_send())] == [202]
    s = feed(req(b"{}", headers=expect))  # the body came along: no 100 needed
    assert [r[0] for r in responses(s.data_to_send())] == [202]
    s = feed(req(b"{}", target="/early", headers=expect)[:-2])  # refused: final answer, close
    assert [r[0] for r in responses(s.data_to_send())] == [415]
    assert s.closed
    s = feed(req(b"", headers=expect))  # no body: no 100
    assert [r[0] for r in responses(s.data_to_send())] == [202]


def test_response_framing() -> None:
    s = feed(req(b"{}", target="/early"))
    out = s.data_to_send()
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 415 Unsupported Media Type"
    assert b"content-length: %d" % len(body) in head.split(b"\r\n")
    h = feed(b"HEAD /early HTTP/1.1\r\nHost: t\r\n\r\n").data_to_send()
    assert h.endswith(b"content-length: %d\r\n\r\n" % len(body))  # HEAD: the length, no body


def test_eof_inside_a_request_gets_400_and_between_requests_just_closes() -> None:
    s = feed(req()[:10])
    s.receive_data(b"", 0.0)
    assert ([r[0] for r in responses(s.data_to_send())], s.closed) == ([400], True)
    s = feed(req(b"0123456789")[:-3])
    s.receive_data(b"", 0.0)
    assert ([r[0] for r in responses(s.data_to_send())], s.closed) == ([400], True)
    s = feed(req())
    s.data_to_send()
    s.receive_data(b"", 0.0)
    assert (s.data_to_send(), s.closed) == (b"", True)
    handler = Recorder()
    s = feed(req(b"last") + b"", handler=handler)
    s.receive_data(b"", 0.0)  # a complete request then EOF: answered, then closed
    assert len(handler.completed) == 1 and s.closed


# -- differential: requests h11's client writes parse as h11's server parses them --------------


def _random_request(rng: random.Random) -> tuple[h11.Request, bytes, bool]:
    target = rng.choice(["/e", "/v1/workloads/events", "/a/b?c=d&e=f", "https://h:9/p?q"])
    headers = [(b"Host", rng.choice([b"h", b"example.com:14320", b"[::1]:1"]))]
    for i in range(rng.randrange(0, 8)):
        name = rng.choice(["X-Custom", "Accept", "user-agent", "X-Y_Z", "a!#$%&'*+-.^_`|~"])
        value = "".join(rng.choice('abc ;,=/\t"xyz09\x80\xff') for _ in range(rng.randrange(20)))
        headers.append((f"{name}{i}".encode(), value.strip(" \t").encode("latin-1")))
    body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
    use_chunked = rng.random() < 0.4
    if use_chunked:
        headers.append((b"Transfer-Encoding", b"chunked"))
    else:
        headers.append((b"Content-Length", str(len(body)).encode()))
    method = rng.choice(["POST", "PUT", "PATCH", "X-METHOD"])
    return h11.Request(method=method, target=target, headers=headers), body, use_chunked


def test_differential_against_h11_on_300_generated_requests() -> None:
    rng = random.Random(9)
    wire = b""
    expected: list[tuple[str, str, list[tuple[bytes, bytes]], bytes]] = []
    for _ in range(300):
        request, body, use_chunked = _random_request(rng)
        client = h11.Connection(h11.CLIENT)
        data = client.send(request)
        cuts = sorted(rng.sample(range(len(body) + 1), 2)) if use_chunked else [0, len(body)]
        for part in (body[: cuts[0]], body[cuts[0] : cuts[1]], body[cuts[1] :]):
            if part:
                data += client.send(h11.Data(data=part))
        data += client.send(h11.EndOfMessage())
        wire += data
        server = h11.Connection(h11.SERVER)  # the oracle
        server.receive_data(data)
        ev = server.next_event()
        assert isinstance(ev, h11.Request)
        got = b""
        while not isinstance(d := server.next_event(), h11.EndOfMessage):
            assert isinstance(d, h11.Data)
            got += d.data
        fields = [(bytes(k), bytes(v)) for k, v in ev.headers]
        expected.append((ev.method.decode(), path_of(ev.target), fields, got))

    handler = Recorder()
    s = H1Session(handler, Limits(), FP, now=0.0)
    s.receive_data(wire, 0.0)
    assert [r[0] for r in responses(s.data_to_send())] == [202] * 300
    assert [(r.method, r.path, r.headers, b) for r, b in handler.completed] == expected


def test_shutdown_while_discarding_closes_once_the_body_is_read() -> None:
    handler = Recorder()
    s = feed(req(b"0123456789", target="/early")[:-4], handler=handler)
    assert [r[0] for r in responses(s.data_to_send())] == [415]
    s.shutdown(0.0)
    assert not s.closed  # the rest of the dropped body is still to come
    s.receive_data(b"6789" + req(b"never"), 0.0)
    assert s.closed
    assert handler.completed == []


# -- any bytes: a precise answer or more waiting, never an exception or a 500 ------------------

VALID_WIRE = (
    req(b'{"a":1}')
    + chunked_req(chunked(b"ab", b"cd", ext=b";x=1", trailer=b"T: 1\r\n"))
    + req(b"xyz", target="/early")
    + req(b"", version="1.0", headers="Connection: keep-alive\r\n")
)
ANSWERS = {100, 202, 400, 413, 414, 415, 431, 501, 505}


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(VALID_WIRE)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = draw(st.sampled_from([0, 9, 10, 13, 32, 44, 58, 59, 48, 70, 0x7F, 0xFF, 0x61]))
        if op == "replace":
            data[at] = byte
        elif op == "insert":
            data.insert(at, byte)
        else:
            del data[at]
    return bytes(data)


@settings(max_examples=300, deadline=None)
@given(st.one_of(mutated(), st.binary(max_size=400)), st.integers(0, 400))
def test_any_bytes_get_a_precise_answer_and_a_split_changes_nothing(data: bytes, cut: int) -> None:
    whole = H1Session(Recorder(), Limits(max_header_bytes=256), FP, now=0.0)
    whole.receive_data(data, 0.0)
    whole.receive_data(b"", 0.0)
    out = whole.data_to_send()
    statuses = [r[0] for r in responses(out)]
    assert set(statuses) <= ANSWERS, statuses
    assert whole.closed  # EOF ends every connection
    split = H1Session(Recorder(), Limits(max_header_bytes=256), FP, now=0.0)
    for piece in (data[:cut], data[cut:]):
        if piece:  # (b"" would be EOF)
            split.receive_data(piece, 0.0)
    split.receive_data(b"", 0.0)
    assert split.data_to_send() == out
