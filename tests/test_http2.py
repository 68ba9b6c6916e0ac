"""HTTP/2 server session (``nvpair_wm.proto.h2``) over a real loopback TCP socket.

The server side is the real connection driver (``nvpair_wm.io.server``) in plaintext mode
(prior-knowledge h2, no TLS); clients are the ``h2`` library (:class:`H2Client`), raw frames
built with hyperframe + hpack (:class:`RawPeer`, for the protocol rules and the abuse cases in
``test_h2_abuse.py``), both in ``tests/support/h2_peers.py``, and ``curl
--http2-prior-knowledge``.

The ``TestConformance`` cases follow the RFC 9113 rules that h2spec checks (h2spec itself could
not be installed here); each names the section it exercises.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from nvpair_wm.http.core import Limits
from nvpair_wm.proto.h2 import DISCARD_PAST_LIMIT_BYTES, H2_PREFACE
from tests.support.h2_peers import (
    FINGERPRINT,
    MIB,
    WAIT,
    EchoHandler,
    H2Client,
    H2TestServer,
    RawPeer,
    Reply,
    fast_limits,
    is_rst,
    run,
)

# -- behaviour -------------------------------------------------------------------------------------


def test_get_and_post_round_trip() -> None:
    async def main() -> None:
        async with H2TestServer() as server:
            client = await H2Client.connect(server.port)
            get = await client.request("GET", "/hello?x=1")
            post = await client.request("POST", "/echo", b"payload")
            client.close()
        assert (get.status, bytes(get.body)) == (200, b"hello")
        assert get.headers[b"content-length"] == b"5"
        assert b"connection" not in get.headers  # connection-specific: dropped for HTTP/2
        assert (post.status, bytes(post.body)) == (200, b"payload")
        first, second = server.handler.requests
        assert (first.method, first.path, first.protocol) == ("GET", "/hello", "h2")
        assert first.peer_fingerprint == FINGERPRINT
        assert (b"host", b"localhost") in first.headers
        assert not any(name.startswith(b":") for name, _ in first.headers)
        assert (second.method, second.content_length) == ("POST", 7)

    run(main())


def test_server_settings_are_advertised() -> None:
    async def main() -> dict[int, int]:
        async with H2TestServer(limits=fast_limits(h2_max_concurrent_streams=7)) as server:
            peer = await RawPeer.connect(server.port)
            peer.close()
            return peer.server_settings

    settings = run(main())
    codes = h2.settings.SettingCodes
    assert settings[codes.MAX_CONCURRENT_STREAMS] == 7
    assert settings[codes.MAX_FRAME_SIZE] == 16384
    assert settings[codes.MAX_HEADER_LIST_SIZE] == Limits().max_header_bytes
    assert settings[codes.INITIAL_WINDOW_SIZE] == Limits().h2_initial_window_size
    assert settings.get(codes.ENABLE_PUSH, 0) == 0


def test_hundred_concurrent_streams_on_one_connection() -> None:
    async def main() -> None:
        async with H2TestServer() as server:
            client = await H2Client.connect(server.port)
            sids = [client.start("POST", "/echo", b"body-%03d" % i) for i in range(100)]
            replies = await client.wait(*sids)
            client.close()
        assert [bytes(r.body) for r in replies] == [b"body-%03d" % i for i in range(100)]
        assert all(r.status == 200 for r in replies)

    run(main())


def test_large_request_body_through_a_small_server_window() -> None:
    body = bytes(range(256)) * (MIB // 256 - 4)  # just under 1 MiB

    async def main() -> None:
        limits = fast_limits(h2_initial_window_size=16 * 1024, h2_connection_window=32 * 1024)
        async with H2TestServer(limits=limits) as server:
            client = await H2Client.connect(server.port)
            reply = await client.request("POST", "/echo", body)
            client.close()
        assert reply.status == 200
        assert reply.headers[b"x-body-length"] == str(len(body)).encode()
        assert bytes(reply.body) == body

    run(main())


def test_concurrent_bodies_over_the_buffer_budget_all_complete() -> None:
    """Past h2_body_buffer_budget the server withholds WINDOW_UPDATEs, yet the oldest body
    always progresses: no deadlock, every upload completes."""
    bodies = [bytes([65 + i]) * 300_000 for i in range(6)]  # 1.8 MB against a 200 KB budget

    async def main() -> list[Reply]:
        budget = fast_limits(h2_body_buffer_budget=200_000, h2_connection_window=256 * 1024)
        async with H2TestServer(limits=budget) as server:
            client = await H2Client.connect(server.port)
            sids = [client.start("POST", "/echo", body) for body in bodies]
            replies = await client.wait(*sids)
            client.close()
            return replies

    replies = run(main())
    assert [bytes(r.body) for r in replies] == bodies


def test_large_response_respects_a_small_client_window() -> None:
    size = MIB - 1000

    async def main() -> None:
        async with H2TestServer() as server:
            window = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE
            client = await H2Client.connect(server.port, settings={window: 1000})
            reply = await client.request("GET", f"/big/{size}")
            client.close()
            # h2 (the client) raises FlowControlError if the server overran a window.
            assert client.max_data_frame <= 1000
        assert reply.status == 200 and len(reply.body) == size

    run(main())


def test_body_over_the_limit_gets_413_and_a_reset() -> None:
    async def main() -> None:
        async with H2TestServer(handler=EchoHandler(max_body=1000)) as server:
            client = await H2Client.connect(server.port)
            streamed = await client.request("POST", "/echo", b"x" * 5000, content_length=False)
            declared = await client.request("POST", "/echo", b"y" * 1001)
            fine = await client.request("POST", "/echo", b"z" * 1000)
            client.close()
        assert streamed.status == 413 and streamed.reset in (None, ErrorCodes.NO_ERROR)
        assert declared.status == 413 and declared.reset in (None, ErrorCodes.NO_ERROR)
        assert fine.status == 200 and len(fine.body) == 1000
        assert server.handler.completed == 1

    run(main())


def test_early_answer_from_head_then_the_body_is_dropped_or_cut() -> None:
    over_cap = MIB + DISCARD_PAST_LIMIT_BYTES + 100_000  # well over max_body + that

    async def main() -> None:
        async with H2TestServer() as server:
            client = await H2Client.connect(server.port)
            small = await client.request("POST", "/forbidden", b"s" * 300_000)
            declared_sid = client.start("POST", "/forbidden", b"D" * over_cap)
            streamed_sid = client.start("POST", "/forbidden", b"S" * over_cap, content_length=False)
            # RFC 9113 §8.1: a complete answer, then "stop sending" as RST_STREAM NO_ERROR.
            assert await client.wait_reset(declared_sid) == ErrorCodes.NO_ERROR
            assert await client.wait_reset(streamed_sid) == ErrorCodes.NO_ERROR
            declared, streamed_reply = await client.wait(declared_sid, streamed_sid)
            after = await client.request("POST", "/echo", b"still usable")
            client.close()
        for reply in (small, declared, streamed_reply):
            assert (reply.status, bytes(reply.body)) == (403, b"not pinned")
        assert small.reset is None  # read and dropped: the upload ends normally
        assert bytes(after.body) == b"still usable"
        assert server.handler.completed == 1

    run(main())


def test_handler_crash_gets_500_and_the_connection_goes_on() -> None:
    async def main() -> None:
        async with H2TestServer() as server:
            client = await H2Client.connect(server.port)
            crash = await client.request("POST", "/crash", b"x")
            crash_head = await client.request("GET", "/crash-head")
            bad_header = await client.request("GET", "/bad-header")
            ok = await client.request("GET", "/")
            client.close()
        assert crash.status == 500 and crash_head.status == 500 and ok.status == 200
        assert (bad_header.status, bytes(bad_header.body)) == (500, b'{"error":"internal error"}')

    run(main())


def test_head_request_gets_no_body() -> None:
    async def main() -> None:
        async with H2TestServer() as server:
            peer = await RawPeer.connect(server.port)
            peer.send(peer.headers_frame(1, "HEAD", "/"))
            status, body = await peer.response(1)
            peer.close()
        assert (status, body) == (200, b"")

    run(main())


def test_header_list_over_the_advertised_limit_gets_431() -> None:
    async def main() -> tuple[tuple[int, bytes], tuple[int, bytes]]:
        async with H2TestServer(limits=fast_limits(max_header_bytes=4096)) as server:
            peer = await RawPeer.connect(server.port)
            big = [("x-big", "v" * 5000)]
            peer.send(peer.headers_frame(1, extra=big))
            first = await peer.response(1)
            peer.send(peer.headers_frame(3))
            second = await peer.response(3)
            peer.close()
            return first, second

    (status, _), (status_after, _) = run(main())
    assert status == 431
    assert status_after == 200  # HPACK state intact: the connection goes on


def test_content_length_mismatch_resets_only_that_stream() -> None:
    async def main() -> None:
        async with H2TestServer() as server:
            peer = await RawPeer.connect(server.port)
            cl = [("content-length", "1")]
            peer.send(peer.headers_frame(1, "POST", "/echo", extra=cl, end_stream=False))
            peer.send(DataFrame(1, data=b"test", flags=["END_STREAM"]))
            await peer.wait_for(is_rst(1, ErrorCodes.PROTOCOL_ERROR))
            cl = [("content-length", "10")]
            peer.send(peer.headers_frame(3, "POST", "/echo", extra=cl, end_stream=False))
            peer.send(DataFrame(3, data=b"short", flags=["END_STREAM"]))
            await peer.wait_for(is_rst(3, ErrorCodes.PROTOCOL_ERROR))
            peer.send(peer.headers_frame(5, "POST", "/echo", extra=cl, end_stream=False))
            peer.send(DataFrame(5, data=b"0123456789", flags=["END_STREAM"]))
            status, body = await peer.response(5)
            peer.close()
        assert (status, body) == (200, b"0123456789")
        assert server.handler.completed == 1

    run(main())


def test_preface_already_read_by_the_server_is_passed_in() -> None:
    async def main() -> None:
        async with H2TestServer(sniff_preface=True) as server:
            client = await H2Client.connect(server.port)
            reply = await client.request("POST", "/echo", b"sniffed")
            client.close()
        assert bytes(reply.body) == b"sniffed"

    run(main())


def test_graceful_goaway_finishes_in_flight_streams_and_refuses_new_ones() -> None:
    async def main() -> None:
        async with H2TestServer() as server:
            peer = await RawPeer.connect(server.port)
            peer.send(peer.headers_frame(1, "POST", "/echo", end_stream=False))
            peer.send(DataFrame(1, data=b"part one, "))
            # A PING round trip proves the server has seen stream 1 before we shut down.
            peer.send(PingFrame(0, opaque_data=b"12345678"))
            await peer.wait_for(lambda f: isinstance(f, PingFrame))
            server.conns[0].shutdown()
            goaway = await peer.wait_for(lambda f: isinstance(f, GoAwayFrame))
            assert isinstance(goaway, GoAwayFrame)
            assert (goaway.error_code, goaway.last_stream_id) == (ErrorCodes.NO_ERROR, 1)
            peer.send(peer.headers_frame(3))  # opened after the GOAWAY: refused
            await peer.wait_for(is_rst(3, ErrorCodes.REFUSED_STREAM))
            peer.send(DataFrame(1, data=b"part two", flags=["END_STREAM"]))
            status, body = await peer.response(1)
            assert (status, body) == (200, b"part one, part two")
            final = await peer.goaway()
            assert (final.error_code, final.last_stream_id) == (ErrorCodes.NO_ERROR, 1)
            peer.close()

    run(main())


def test_server_close_is_a_graceful_goaway() -> None:
    async def main() -> None:
        async with H2TestServer() as server:
            client = await H2Client.connect(server.port)
            assert (await client.request("GET", "/")).status == 200
            sid = client.start("POST", "/echo", b"x" * 10, content_length=True)
            await client.wait(sid)
            closing = asyncio.create_task(server.server.close(grace=WAIT))
            async with asyncio.timeout(WAIT):
                while await client.pump():
                    pass
            await closing
            assert client.goaway is not None
            assert client.goaway.error_code == ErrorCodes.NO_ERROR
            assert client.goaway.last_stream_id == sid
            client.close()

    run(main())


def test_idle_connection_gets_goaway_after_idle_timeout() -> None:
    async def main() -> None:
        async with H2TestServer(limits=fast_limits(idle_timeout=0.3)) as server:
            peer = await RawPeer.connect(server.port)
            peer.send(peer.headers_frame(1))
            await peer.response(1)
            loop = asyncio.get_running_loop()
            started = loop.time()
            goaway = await peer.goaway(within=5)
            assert goaway.error_code == ErrorCodes.NO_ERROR
            assert loop.time() - started >= 0.25
            peer.close()

    run(main())


async def curl(*args: str, stdin: bytes = b"") -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        "curl",
        "--silent",
        "--show-error",
        "--http2-prior-knowledge",
        "--max-time",
        "20",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out, err


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_http2_prior_knowledge() -> None:
    # One request per curl run: curl 7.88 fails to reuse a prior-knowledge connection
    # ("Error in the HTTP2 framing layer", against any server), so no --next here.
    body = b'{"jsonrpc":"2.0","method":"workload:started"}' * 1000
    write_out = "\n%{http_version} %{response_code}"

    async def main() -> list[tuple[int, bytes, bytes]]:
        async with H2TestServer() as server:
            base = f"http://127.0.0.1:{server.port}"
            post = await curl(
                "--data-binary", "@-", "-H", "content-type: application/json",
                "-w", write_out, f"{base}/echo", stdin=body,
            )  # fmt: skip
            early = await curl("-w", write_out, f"{base}/forbidden")
            too_big = await curl(
                "--data-binary", "@-", "-w", write_out, f"{base}/echo", stdin=b"x" * (MIB + 1)
            )  # fmt: skip
            return [post, early, too_big]

    (code, out, err), (code2, out2, err2), (code3, out3, err3) = run(main())
    assert code == 0, err
    assert out == body + b"\n2 200"
    assert code2 == 0, err2
    assert out2 == b"not pinned\n2 403"
    assert code3 == 0, err3
    assert out3.endswith(b"\n2 413")


# -- RFC 9113 rules (the h2spec cases, raw frames) -------------------------------------------------

Step = Callable[[RawPeer], Awaitable[None]]


async def _get(peer: RawPeer, sid: int = 1, **kw: Any) -> None:
    peer.send(peer.headers_frame(sid, **kw))


def _conformance_cases() -> dict[str, tuple[Step, str, tuple[ErrorCodes, ...]]]:
    """name → (what the client does, expected "stream"/"connection" error, allowed codes)."""
    proto = (ErrorCodes.PROTOCOL_ERROR,)
    size = (ErrorCodes.FRAME_SIZE_ERROR,)
    closed = (ErrorCodes.STREAM_CLOSED,)
    flow = (ErrorCodes.FLOW_CONTROL_ERROR,)
    hpack_err = (ErrorCodes.COMPRESSION_ERROR,)  # RFC 9113 §4.3

    async def data_on_idle(p: RawPeer) -> None:
        p.send(DataFrame(1, data=b"test", flags=["END_STREAM"]))

    async def rst_on_idle(p: RawPeer) -> None:
        p.send(RstStreamFrame(1, error_code=ErrorCodes.CANCEL))

    async def window_update_on_idle(p: RawPeer) -> None:
        p.send(WindowUpdateFrame(1, window_increment=100))

    async def continuation_on_idle(p: RawPeer) -> None:
        p.send(ContinuationFrame(1, data=p.block(p.request_headers()), flags=["END_HEADERS"]))

    async def data_half_closed(p: RawPeer) -> None:
        await _get(p)
        p.send(DataFrame(1, data=b"test", flags=["END_STREAM"]))

    async def headers_half_closed(p: RawPeer) -> None:
        await _get(p)
        await _get(p)

    async def data_after_rst(p: RawPeer) -> None:
        await _get(p, end_stream=False)
        p.send(RstStreamFrame(1, error_code=ErrorCodes.CANCEL))
        p.send(DataFrame(1, data=b"test", flags=["END_STREAM"]))

    async def data_after_close(p: RawPeer) -> None:
        await _get(p)
        await p.response(1)
        p.send(DataFrame(1, data=b"test", flags=["END_STREAM"]))

    async def headers_after_close(p: RawPeer) -> None:
        await _get(p)
        await p.response(1)
        await _get(p)

    async def window_update_bad_length(p: RawPeer) -> None:
        p.send_raw(b"\x00\x00\x03\x08\x00\x00\x00\x00\x00" + b"\x00\x00\x01")

    async def priority_bad_length(p: RawPeer) -> None:
        await _get(p, end_stream=False)
        p.send_raw(b"\x00\x00\x04\x02\x00\x00\x00\x00\x01" + b"\x00\x00\x00\x00")

    async def even_stream_id(p: RawPeer) -> None:
        await _get(p, 2)

    async def decreasing_stream_id(p: RawPeer) -> None:
        await _get(p, 5)
        await _get(p, 3)

    async def oversized_data(p: RawPeer) -> None:
        await _get(p, method="POST", end_stream=False)
        p.send(DataFrame(1, data=b"x" * 16385, flags=["END_STREAM"]))

    async def oversized_headers(p: RawPeer) -> None:
        extra = [(f"x-dummy{i}", "x" * 4000) for i in range(5)]
        await _get(p, extra=extra)

    async def continuation_interleaved(p: RawPeer) -> None:
        await _get(p, method="POST", end_stream=False, end_headers=False)
        p.send(DataFrame(1, data=b"test", flags=["END_STREAM"]))

    async def continuation_stream_zero(p: RawPeer) -> None:
        await _get(p, end_headers=False)
        block = p.block([("x-a", "b")])
        p.send_raw(len(block).to_bytes(3, "big") + b"\x09\x04\x00\x00\x00\x00" + block)

    async def continuation_after_end_headers(p: RawPeer) -> None:
        await _get(p)
        p.send(ContinuationFrame(1, data=p.block([("x-a", "b")]), flags=["END_HEADERS"]))

    async def settings_ack_with_payload(p: RawPeer) -> None:
        p.send_raw(b"\x00\x00\x06\x04\x01\x00\x00\x00\x00" + b"\x00\x03\x00\x00\x00\x64")

    async def settings_bad_length(p: RawPeer) -> None:
        p.send_raw(b"\x00\x00\x03\x04\x00\x00\x00\x00\x00" + b"\x00\x03\x00")

    async def settings_on_stream(p: RawPeer) -> None:
        p.send_raw(b"\x00\x00\x06\x04\x00\x00\x00\x00\x01" + b"\x00\x03\x00\x00\x00\x64")

    async def settings_push_invalid(p: RawPeer) -> None:
        p.send(SettingsFrame(0, settings={h2.settings.SettingCodes.ENABLE_PUSH: 2}))

    async def settings_window_too_big(p: RawPeer) -> None:
        p.send_raw(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00" + b"\x00\x04\x80\x00\x00\x00")

    async def settings_frame_size_too_small(p: RawPeer) -> None:
        p.send(SettingsFrame(0, settings={h2.settings.SettingCodes.MAX_FRAME_SIZE: 16383}))

    async def ping_on_stream(p: RawPeer) -> None:
        p.send_raw(b"\x00\x00\x08\x06\x00\x00\x00\x00\x01" + b"12345678")

    async def ping_bad_length(p: RawPeer) -> None:
        p.send_raw(b"\x00\x00\x06\x06\x00\x00\x00\x00\x00" + b"123456")

    async def goaway_on_stream(p: RawPeer) -> None:
        p.send_raw(b"\x00\x00\x08\x07\x00\x00\x00\x00\x01" + b"\x00" * 8)

    async def window_update_zero(p: RawPeer) -> None:
        p.send_raw(b"\x00\x00\x04\x08\x00\x00\x00\x00\x00" + b"\x00\x00\x00\x00")

    async def window_overflow_connection(p: RawPeer) -> None:
        p.send(WindowUpdateFrame(0, window_increment=2**31 - 1))
        p.send(WindowUpdateFrame(0, window_increment=2**31 - 1))

    async def window_overflow_stream(p: RawPeer) -> None:
        await _get(p, end_stream=False)
        p.send(WindowUpdateFrame(1, window_increment=2**31 - 1))
        p.send(WindowUpdateFrame(1, window_increment=2**31 - 1))

    async def rst_bad_length(p: RawPeer) -> None:
        await _get(p, end_stream=False)
        p.send_raw(b"\x00\x00\x03\x03\x00\x00\x00\x00\x01" + b"\x00\x00\x00")

    async def priority_self_dependency(p: RawPeer) -> None:
        p.send(PriorityFrame(1, depends_on=1, stream_weight=16))

    async def push_promise_from_client(p: RawPeer) -> None:
        await _get(p, end_stream=False)
        body = b"\x00\x00\x00\x02" + p.block(p.request_headers())
        p.send_raw(len(body).to_bytes(3, "big") + b"\x05\x04\x00\x00\x00\x01" + body)

    def bad_headers(extra: list[tuple[str, str]], drop: str | None = None) -> Step:
        async def step(p: RawPeer) -> None:
            fields = [(k, v) for k, v in p.request_headers() if k != drop] + extra
            p.send(HeadersFrame(1, data=p.block(fields), flags=["END_STREAM", "END_HEADERS"]))

        return step

    async def pseudo_after_regular(p: RawPeer) -> None:
        fields = [("x-test", "ok"), *p.request_headers()]
        p.send(HeadersFrame(1, data=p.block(fields), flags=["END_STREAM", "END_HEADERS"]))

    async def pseudo_in_trailers(p: RawPeer) -> None:
        await _get(p, method="POST", end_stream=False)
        p.send(DataFrame(1, data=b"test"))
        trailers = p.block([(":method", "POST")])
        p.send(HeadersFrame(1, data=trailers, flags=["END_STREAM", "END_HEADERS"]))

    async def trailers_without_end_stream(p: RawPeer) -> None:
        await _get(p, method="POST", end_stream=False)
        p.send(DataFrame(1, data=b"test"))
        p.send(HeadersFrame(1, data=p.block([("x-test", "ok")]), flags=["END_HEADERS"]))

    def bad_block(tail: bytes, *, before: bool = False) -> Step:
        async def step(p: RawPeer) -> None:
            block = p.block(p.request_headers())
            block = tail + block if before else block + tail
            p.send(HeadersFrame(1, data=block, flags=["END_STREAM", "END_HEADERS"]))

        return step

    return {
        "5.1 idle: DATA": (data_on_idle, "connection", proto),
        "5.1 idle: RST_STREAM": (rst_on_idle, "connection", proto),
        "5.1 idle: WINDOW_UPDATE": (window_update_on_idle, "connection", proto),
        "5.1 idle: CONTINUATION": (continuation_on_idle, "connection", proto),
        "5.1 half-closed (remote): DATA": (data_half_closed, "stream", closed),
        "5.1 half-closed (remote): HEADERS": (headers_half_closed, "stream", closed),
        "5.1 closed: DATA after RST_STREAM": (data_after_rst, "stream", closed),
        "5.1 closed: DATA after END_STREAM": (data_after_close, "connection", closed),
        "5.1 closed: HEADERS after END_STREAM": (headers_after_close, "connection", closed),
        "5.1.1 even stream id": (even_stream_id, "connection", proto),
        "5.1.1 decreasing stream id": (decreasing_stream_id, "connection", proto),
        "4.2 DATA over SETTINGS_MAX_FRAME_SIZE": (oversized_data, "stream", size),
        "4.2 HEADERS over SETTINGS_MAX_FRAME_SIZE": (oversized_headers, "connection", size),
        "6.10 frame inside a header block": (continuation_interleaved, "connection", proto),
        "6.10 CONTINUATION on stream 0": (continuation_stream_zero, "connection", proto),
        "6.10 CONTINUATION after END_HEADERS": (
            continuation_after_end_headers,
            "connection",
            proto,
        ),
        "6.5 SETTINGS ACK with payload": (settings_ack_with_payload, "connection", size),
        "6.5 SETTINGS length not a multiple of 6": (settings_bad_length, "connection", size),
        "6.5 SETTINGS on a stream": (settings_on_stream, "connection", proto),
        "6.5.2 ENABLE_PUSH=2": (settings_push_invalid, "connection", proto),
        "6.5.2 INITIAL_WINDOW_SIZE over 2^31-1": (settings_window_too_big, "connection", flow),
        "6.5.2 MAX_FRAME_SIZE under 2^14": (settings_frame_size_too_small, "connection", proto),
        "6.7 PING on a stream": (ping_on_stream, "connection", proto),
        "6.7 PING of 6 octets": (ping_bad_length, "connection", size),
        "6.8 GOAWAY on a stream": (goaway_on_stream, "connection", proto),
        "6.9 WINDOW_UPDATE of 0": (window_update_zero, "connection", proto),
        "6.9 WINDOW_UPDATE of 3 octets": (window_update_bad_length, "connection", size),
        "6.3 PRIORITY of 4 octets": (priority_bad_length, "stream", size),
        "6.9.1 connection window over 2^31-1": (window_overflow_connection, "connection", flow),
        "6.9.1 stream window over 2^31-1": (window_overflow_stream, "stream", flow),
        "6.4 RST_STREAM of 3 octets": (rst_bad_length, "stream", size),
        "5.3.1 stream depends on itself": (priority_self_dependency, "stream", proto),
        "8.4 PUSH_PROMISE from a client": (push_promise_from_client, "connection", proto),
        "8.1.2 uppercase field name": (bad_headers([("X-Upper", "a")]), "stream", proto),
        "8.1.2.1 unknown pseudo-header": (bad_headers([(":test", "ok")]), "stream", proto),
        "8.1.2.1 response pseudo-header": (bad_headers([(":status", "200")]), "stream", proto),
        "8.1.2.1 pseudo-header after a field": (pseudo_after_regular, "stream", proto),
        "8.1.2.1 pseudo-header in trailers": (pseudo_in_trailers, "stream", proto),
        "8.1.2.2 connection header": (
            bad_headers([("connection", "keep-alive")]),
            "stream",
            proto,
        ),
        "8.1.2.2 TE other than trailers": (bad_headers([("te", "gzip")]), "stream", proto),
        "8.1.2.3 empty :path": (_empty_path, "stream", proto),
        "8.1.2.3 no :method": (bad_headers([], ":method"), "stream", proto),
        "8.1.2.3 no :scheme": (bad_headers([], ":scheme"), "stream", proto),
        "8.1.2.3 no :path": (bad_headers([], ":path"), "stream", proto),
        "8.1.2.3 duplicate :method": (bad_headers([(":method", "GET")]), "stream", proto),
        "8.1 trailers without END_STREAM": (trailers_without_end_stream, "stream", proto),
        "hpack 2.3.3 index past both tables": (bad_block(b"\xfe"), "connection", hpack_err),
        "hpack 4.2 table size update at the end": (bad_block(b"\x21"), "connection", hpack_err),
        "hpack 5.2 Huffman padding over 7 bits": (
            bad_block(b"\x00\x85\xf2\xb2\x4a\x84\xff\x84\x49\x50\x9f\xff"),
            "connection",
            hpack_err,
        ),
        "hpack 5.2 Huffman padded with zeros": (
            bad_block(b"\x00\x85\xf2\xb2\x4a\x84\xff\x83\x49\x50\x90"),
            "connection",
            hpack_err,
        ),
        "hpack 5.2 Huffman with EOS": (
            bad_block(b"\x00\x85\xf2\xb2\x4a\x87\xff\xff\xff\xfd\x25\x42\x7f"),
            "connection",
            hpack_err,
        ),
        "hpack 6.1 index 0": (bad_block(b"\x80"), "connection", hpack_err),
        "hpack 6.3 table size over SETTINGS": (
            bad_block(b"\x3f\xe2\x1f", before=True),
            "connection",
            hpack_err,
        ),
    }


async def _empty_path(p: RawPeer) -> None:
    fields = [(k, "" if k == ":path" else v) for k, v in p.request_headers()]
    p.send(HeadersFrame(1, data=p.block(fields), flags=["END_STREAM", "END_HEADERS"]))


CASES = _conformance_cases()


class TestConformance:
    @pytest.mark.parametrize("name", list(CASES))
    def test_error_case(self, name: str) -> None:
        step, kind, codes = CASES[name]

        async def main() -> None:
            async with H2TestServer() as server:
                peer = await RawPeer.connect(server.port)
                await step(peer)
                if kind == "connection":
                    goaway = await peer.goaway()
                    assert goaway.error_code in codes, (name, goaway.error_code)
                else:
                    # A stream error; a connection error of the same code is allowed too.
                    frame = await peer.wait_for(
                        lambda f: (
                            isinstance(f, RstStreamFrame | GoAwayFrame) and f.error_code in codes
                        )
                    )
                    if isinstance(frame, GoAwayFrame):
                        await peer.read_until_closed()
                peer.close()

        run(main())

    def test_invalid_preface_closes_the_connection(self) -> None:
        async def main() -> None:
            async with H2TestServer() as server:
                peer = await RawPeer.connect(server.port, handshake=False)
                peer.send_raw(b"INVALID CONNECTION PREFACE\r\n\r\n")
                await peer.read_until_closed()
                peer.close()

        run(main())

    def test_server_preface_is_a_settings_frame_first(self) -> None:
        async def main() -> Frame | None:
            async with H2TestServer() as server:
                peer = await RawPeer.connect(server.port, handshake=False)
                peer.send_raw(H2_PREFACE)
                peer.send(SettingsFrame(0))
                first = await peer.next_frame()
                peer.close()
                return first

        first = run(main())
        assert isinstance(first, SettingsFrame) and "ACK" not in first.flags

    def test_ping_is_acknowledged_with_the_same_payload(self) -> None:
        async def main() -> None:
            async with H2TestServer() as server:
                peer = await RawPeer.connect(server.port)
                peer.send(PingFrame(0, opaque_data=b"h2spec!!", flags=["ACK"]))  # ignored
                peer.send(PingFrame(0, opaque_data=b"abcdefgh"))
                pong = await peer.wait_for(lambda f: isinstance(f, PingFrame))
                assert "ACK" in pong.flags and pong.opaque_data == b"abcdefgh"  # type: ignore[attr-defined]
                peer.close()

        run(main())

    def test_unknown_frames_and_settings_are_ignored(self) -> None:
        async def main() -> None:
            async with H2TestServer() as server:
                peer = await RawPeer.connect(server.port)
                peer.send_raw(b"\x00\x00\x04\xfa\x00\x00\x00\x00\x00" + b"abcd")
                peer.send(SettingsFrame(0, settings={0x99: 1}))
                peer.send(PriorityFrame(7, depends_on=0, stream_weight=255))  # idle: fine
                await _get(peer)
                assert (await peer.response(1))[0] == 200
                peer.close()

        run(main())

    def test_request_spread_over_continuation_frames(self) -> None:
        async def main() -> None:
            async with H2TestServer() as server:
                peer = await RawPeer.connect(server.port)
                block = peer.block([*peer.request_headers(), ("x-dummy0", "x" * 4000)])
                third = len(block) // 3
                peer.send(HeadersFrame(1, data=block[:third], flags=["END_STREAM"]))
                peer.send(ContinuationFrame(1, data=block[third : 2 * third]))
                peer.send(ContinuationFrame(1, data=block[2 * third :], flags=["END_HEADERS"]))
                assert (await peer.response(1))[0] == 200
                peer.close()

        run(main())

    def test_padded_data_and_trailers_are_accepted(self) -> None:
        async def main() -> tuple[int, bytes]:
            async with H2TestServer() as server:
                peer = await RawPeer.connect(server.port)
                await _get(peer, method="POST", path="/echo", end_stream=False)
                peer.send(DataFrame(1, data=b"pad", pad_length=40, flags=["PADDED"]))
                trailers = peer.block([("x-trailer", "ok")])
                peer.send(HeadersFrame(1, data=trailers, flags=["END_STREAM", "END_HEADERS"]))
                got = await peer.response(1)
                peer.close()
                return got

        assert run(main()) == (200, b"pad")

    def test_window_changes_from_settings_are_applied(self) -> None:
        """RFC 9113 §6.9.2: a SETTINGS change of the initial window moves open streams."""
        window = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE

        async def main() -> list[int]:
            async with H2TestServer() as server:
                peer = await RawPeer.connect(server.port, settings={window: 0})
                await _get(peer, path="/big/5")
                await peer.wait_for(lambda f: isinstance(f, HeadersFrame))
                peer.send(SettingsFrame(0, settings={window: 3}))
                first = await peer.wait_for(lambda f: isinstance(f, DataFrame))
                peer.send(SettingsFrame(0, settings={window: 2}))  # window now -1
                peer.send(WindowUpdateFrame(1, window_increment=2))
                second = await peer.wait_for(lambda f: isinstance(f, DataFrame))
                peer.close()
                return [len(first.data), len(second.data)]  # type: ignore[attr-defined]

        assert run(main()) == [3, 1]

    def test_concurrency_limit_refuses_the_extra_stream(self) -> None:
        """RFC 9113 §5.1.2: the stream over MAX_CONCURRENT_STREAMS gets REFUSED_STREAM."""
        window = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE

        async def main() -> None:
            limits = fast_limits(h2_max_concurrent_streams=5)
            async with H2TestServer(limits=limits) as server:
                peer = await RawPeer.connect(server.port, settings={window: 0})
                for sid in range(1, 13, 2):  # six streams; responses stuck on window 0
                    await _get(peer, sid)
                await peer.wait_for(is_rst(11, ErrorCodes.REFUSED_STREAM))
                resets = [f for f in peer.received if isinstance(f, RstStreamFrame | GoAwayFrame)]
                assert [f.stream_id for f in resets] == [11]  # the others stay open
                peer.close()

        run(main())


# -- plaintext harness for scripts/h2spec.sh ------------------------------------------------------


async def serve_plaintext(port: int) -> None:
    """The plaintext server with default Limits on 127.0.0.1:``port`` until cancelled."""
    async with H2TestServer(limits=Limits(), port=port) as server:
        print(f"h2 harness on 127.0.0.1:{server.port}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    import sys

    asyncio.run(serve_plaintext(int(sys.argv[1]) if len(sys.argv) > 1 else 18443))
