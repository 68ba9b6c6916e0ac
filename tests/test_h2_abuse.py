"""HTTP/2 abuse bounds of ``nvpair_wm.proto.h2`` (through ``nvpair_wm.io.server``), each over a
real loopback TCP socket.

Every attack must end in a GOAWAY (ENHANCE_YOUR_CALM where it fits) or a bounded stream error,
within bounded time and memory, while a well-behaved client on a second connection keeps
getting answers (:func:`served_meanwhile`). Attack loops are bounded in count; every wait is
bounded in time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import h2.settings
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

from tests.support.h2_peers import (
    WAIT,
    EchoHandler,
    H2Client,
    H2TestServer,
    RawPeer,
    fast_limits,
    is_rst,
    run,
    served_meanwhile,
)

CALM = ErrorCodes.ENHANCE_YOUR_CALM
Attack = Callable[[RawPeer], Awaitable[None]]


async def attack_until_goaway(port: int, attack: Attack, **connect: object) -> GoAwayFrame:
    """Run ``attack`` on a fresh connection; return the server's GOAWAY (then EOF)."""
    peer = await RawPeer.connect(port, **connect)  # type: ignore[arg-type]
    try:
        await attack(peer)
        await peer.writer.drain()
    except ConnectionError:
        pass  # the server may close while we are still writing
    try:
        return await peer.goaway()
    finally:
        peer.close()


def goaway_under_attack(
    attack: Attack,
    server: Callable[[], H2TestServer] = H2TestServer,
) -> tuple[GoAwayFrame, H2TestServer]:
    """The GOAWAY an attack earns, checked while a second connection keeps being served."""

    async def main() -> tuple[GoAwayFrame, H2TestServer]:
        async with server() as srv:
            goaway = await served_meanwhile(srv.port, attack_until_goaway(srv.port, attack))
            attacked = srv.sessions[0]
            assert attacked.open_streams <= srv.limits.h2_max_concurrent_streams
            return goaway, srv

    return run(main())


def test_rapid_reset_gets_goaway() -> None:
    """CVE-2023-44487: open a stream, reset it, repeat."""

    async def attack(peer: RawPeer) -> None:
        for batch in range(10):  # up to 2000 open+reset pairs
            frames: list[Frame] = []
            for i in range(100):
                sid = 1 + 2 * (batch * 100 + i)
                frames += [peer.headers_frame(sid, "POST", "/attack", end_stream=False)]
                frames += [RstStreamFrame(sid, error_code=ErrorCodes.CANCEL)]
            peer.send(*frames)
            await peer.writer.drain()

    # One long rate window, so the count below is exact however slow the machine is.
    goaway, server = goaway_under_attack(
        attack, lambda: H2TestServer(limits=fast_limits(h2_rate_window=60.0))
    )
    assert goaway.error_code == CALM
    assert b"reset" in goaway.additional_data
    # Reset before their bodies ended: not one attack request reached complete().
    assert "/attack" not in server.handler.completed_paths
    assert sum(r.path == "/attack" for r in server.handler.requests) <= 201


def test_streams_the_server_must_reset_count_as_resets_too() -> None:
    """'MadeYouReset': frames that make the server reset streams share the reset budget."""

    async def attack(peer: RawPeer) -> None:
        for batch in range(10):
            frames: list[Frame] = []
            for i in range(50):
                sid = 1 + 2 * (batch * 50 + i)
                frames += [peer.headers_frame(sid, end_stream=False)]
                frames += [WindowUpdateFrame(sid, window_increment=2**31 - 1)] * 2
            peer.send(*frames)
            await peer.writer.drain()

    goaway, _ = goaway_under_attack(attack)
    assert goaway.error_code == CALM


def test_continuation_flood_gets_goaway() -> None:
    async def attack(peer: RawPeer) -> None:
        peer.send(peer.headers_frame(1, end_headers=False))
        for _ in range(200):  # never END_HEADERS
            peer.send(ContinuationFrame(1, data=b""))
        await peer.writer.drain()

    goaway, _ = goaway_under_attack(attack)
    assert goaway.error_code == CALM
    assert b"CONTINUATION" in goaway.additional_data


def test_huge_header_block_gets_goaway_before_it_is_buffered() -> None:
    async def attack(peer: RawPeer) -> None:
        peer.send(peer.headers_frame(1, end_headers=False))
        chunk = b"\x00" * 16384
        for _ in range(64):  # 1 MiB of header block, announced frame by frame
            peer.send(ContinuationFrame(1, data=chunk))
        await peer.writer.drain()

    goaway, _ = goaway_under_attack(attack)
    assert goaway.error_code == CALM
    assert b"header block too large" in goaway.additional_data


def test_header_block_that_never_ends_gets_goaway_after_header_timeout() -> None:
    async def main() -> tuple[GoAwayFrame, float]:
        async with H2TestServer(limits=fast_limits(header_timeout=0.3)) as srv:
            peer = await RawPeer.connect(srv.port)
            loop = asyncio.get_running_loop()
            started = loop.time()
            peer.send(peer.headers_frame(1, end_headers=False))  # ... and nothing more

            async def wait() -> GoAwayFrame:
                return await peer.goaway()

            goaway = await served_meanwhile(srv.port, wait())
            peer.close()
            return goaway, loop.time() - started

    goaway, elapsed = run(main())
    assert goaway.error_code == CALM
    assert 0.25 <= elapsed < WAIT


def test_hpack_bomb_gets_goaway() -> None:
    """A 4 KB dynamic-table entry referenced 200 times: 800 KB decoded from 200 bytes."""

    async def attack(peer: RawPeer) -> None:
        block = peer.block([*peer.request_headers(), ("x-bomb", "b" * 4000)])
        block += b"\xbe" * 200  # indexed field 62: the newest dynamic entry, x-bomb
        peer.send(HeadersFrame(1, data=block, flags=["END_STREAM", "END_HEADERS"]))

    goaway, _ = goaway_under_attack(attack)
    assert goaway.error_code == CALM


def test_settings_flood_gets_goaway() -> None:
    async def attack(peer: RawPeer) -> None:
        window = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE
        for i in range(1000):
            peer.send(SettingsFrame(0, settings={window: 65535 + i % 2}))
        await peer.writer.drain()

    goaway, _ = goaway_under_attack(attack)
    assert goaway.error_code == CALM


def test_ping_flood_gets_goaway_even_when_nobody_reads_the_acks() -> None:
    async def attack(peer: RawPeer) -> None:
        peer.send(*[PingFrame(0, opaque_data=i.to_bytes(8, "big")) for i in range(2000)])
        await peer.writer.drain()

    goaway, _ = goaway_under_attack(attack)
    assert goaway.error_code == CALM


def test_empty_data_priority_and_dead_stream_data_floods_get_goaway() -> None:
    async def empty_data(peer: RawPeer) -> None:
        peer.send(peer.headers_frame(1, "POST", "/echo", end_stream=False))
        peer.send(*[DataFrame(1, data=b"") for _ in range(2000)])
        await peer.writer.drain()

    async def priority(peer: RawPeer) -> None:
        frames = [PriorityFrame(2 * i + 1, depends_on=0, stream_weight=16) for i in range(2000)]
        peer.send(*frames)
        await peer.writer.drain()

    async def data_on_a_reset_stream(peer: RawPeer) -> None:
        peer.send(peer.headers_frame(1, "POST", "/echo", end_stream=False))
        peer.send(RstStreamFrame(1, error_code=ErrorCodes.CANCEL))
        peer.send(*[DataFrame(1, data=b"x") for _ in range(2000)])  # each earns an RST_STREAM
        await peer.writer.drain()

    for attack in (empty_data, priority, data_on_a_reset_stream):
        goaway, _ = goaway_under_attack(attack)
        assert goaway.error_code == CALM


def test_streams_over_the_limit_are_refused_then_goaway() -> None:
    limits = fast_limits(
        h2_max_concurrent_streams=4, h2_rate_window=60.0, h2_max_refused_per_window=20
    )

    async def main() -> tuple[int, GoAwayFrame]:
        async with H2TestServer(limits=limits) as srv:
            peer = await RawPeer.connect(srv.port)
            for sid in (1, 3, 5, 7):  # four open request bodies: the limit
                peer.send(peer.headers_frame(sid, "POST", "/echo", end_stream=False))
            peer.send(peer.headers_frame(9))
            await peer.wait_for(is_rst(9, ErrorCodes.REFUSED_STREAM))
            refused = 1

            async def keep_opening() -> GoAwayFrame:
                frames = [peer.headers_frame(11 + 2 * i) for i in range(200)]
                peer.send(*frames)
                return await peer.goaway()

            goaway = await served_meanwhile(srv.port, keep_opening())
            refused += sum(
                1
                for f in peer.received
                if isinstance(f, RstStreamFrame) and f.error_code == ErrorCodes.REFUSED_STREAM
            )
            assert srv.sessions[0].open_streams <= 4
            peer.close()
            return refused, goaway

    refused, goaway = run(main())
    assert goaway.error_code == CALM
    assert 20 <= refused <= 22


def test_oversized_frame_is_refused_from_its_header() -> None:
    """A frame header announcing 16 MiB: GOAWAY at once, no 16 MiB buffered first."""

    async def attack(peer: RawPeer) -> None:
        peer.send(peer.headers_frame(1, "POST", "/echo", end_stream=False))
        peer.send_raw(b"\xff\xff\xff\x00\x00\x00\x00\x00\x01")  # DATA, length 2^24-1

    goaway, _ = goaway_under_attack(attack)
    assert goaway.error_code == ErrorCodes.FRAME_SIZE_ERROR


def test_silent_connection_is_closed_after_header_timeout() -> None:
    async def main() -> list[object]:
        async with H2TestServer(limits=fast_limits(header_timeout=0.3)) as srv:
            silent = await RawPeer.connect(srv.port, handshake=False)
            preface_only = await RawPeer.connect(srv.port, handshake=False)
            preface_only.send_raw(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

            async def both() -> list[object]:
                return [await silent.read_until_closed(), await preface_only.read_until_closed()]

            frames = await served_meanwhile(srv.port, both())
            silent.close()
            preface_only.close()
            return frames

    for frames in run(main()):
        assert isinstance(frames, list)
        goaways = [f for f in frames if isinstance(f, GoAwayFrame)]
        assert [g.error_code for g in goaways] == [ErrorCodes.PROTOCOL_ERROR]


def test_slow_body_gets_408_after_body_timeout() -> None:
    async def main() -> tuple[int, int]:
        async with H2TestServer(limits=fast_limits(body_timeout=0.3)) as srv:
            peer = await RawPeer.connect(srv.port)
            peer.send(peer.headers_frame(1, "POST", "/slow", end_stream=False))
            peer.send(DataFrame(1, data=b"some but not all"))

            async def answer() -> tuple[int, int]:
                status = 0
                async with asyncio.timeout(WAIT):
                    while True:
                        frame = await peer.next_frame()
                        assert frame is not None
                        if isinstance(frame, HeadersFrame) and frame.stream_id == 1:
                            status = int(dict(frame.decoded)[b":status"])  # type: ignore[attr-defined]
                        if isinstance(frame, RstStreamFrame) and frame.stream_id == 1:
                            return status, frame.error_code

            got = await served_meanwhile(srv.port, answer())
            assert srv.sessions[0].open_streams == 0
            assert "/slow" not in srv.handler.completed_paths
            peer.close()
            return got

    status, code = run(main())
    assert status == 408
    assert code == ErrorCodes.NO_ERROR


def test_response_stuck_on_a_closed_window_is_cancelled() -> None:
    async def main() -> None:
        async with H2TestServer(limits=fast_limits(write_timeout=0.3)) as srv:
            window = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE
            peer = await RawPeer.connect(srv.port, settings={window: 0})
            peer.send(peer.headers_frame(1, path="/big/100000"))

            async def cancelled() -> None:
                await peer.wait_for(is_rst(1, ErrorCodes.CANCEL))

            await served_meanwhile(srv.port, cancelled())
            assert srv.sessions[0].open_streams == 0
            peer.close()

    run(main())


def test_client_that_never_reads_cannot_pin_the_server() -> None:
    """Big responses to a client that reads nothing: the write timeout ends the connection."""

    async def main() -> None:
        limits = fast_limits(write_timeout=0.5)
        async with H2TestServer(handler=EchoHandler(), limits=limits) as srv:
            window = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE
            hog = await H2Client.connect(srv.port, settings={window: 2**31 - 1})
            hog.conn.increment_flow_control_window(2**31 - 1 - 65535)
            for _ in range(8):
                hog.start("GET", "/big/1048576")  # never pumped: nothing is read

            await served_meanwhile(srv.port, asyncio.wait_for(srv.connection_done.wait(), WAIT))
            hog.close()

    run(main())


def test_a_busy_but_well_behaved_client_trips_no_limit() -> None:
    """A client that stays under every limit keeps its connection (no false positives)."""

    async def main() -> None:
        async with H2TestServer() as srv:
            client = await H2Client.connect(srv.port)
            for round_ in range(5):
                sids = [client.start("POST", "/echo", b"r%d-%d" % (round_, i)) for i in range(90)]
                replies = await client.wait(*sids)
                assert all(r.status == 200 for r in replies)
            client.conn.ping(b"12345678")
            client.flush()
            assert (await client.request("GET", "/")).status == 200
            assert client.goaway is None
            client.close()

    run(main())
