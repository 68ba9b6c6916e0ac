"""The HTTP/1.1 session over the real TLS server, driven byte by byte from a stdlib-ssl client.

Timeouts are configured tight (tenths of a second) and each test waits for the server's
reaction (a response or a close), never for the clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from nvpair_wm.clusterdir import cert_fingerprint
from nvpair_wm.http.core import MIB
from nvpair_wm.io.client import open_connection
from nvpair_wm.pins import Identity, PinSet
from tests.conftest import WAIT, HTTPSClient, TLSCluster, WmServer, http_request
from tests.support.frames import event, workload

StartServer = Callable[..., WmServer]
Connect = Callable[..., HTTPSClient]

GOOD = event("workload:submitted")
PATH = "/v1/workloads/events"


def test_keep_alive_two_requests_one_connection(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(http_request(GOOD))
    assert c.response()[0] == 202
    c.send(http_request(event("workload:started", workload(state="running", seq=2))))
    assert c.response()[0] == 202
    assert len([wm.sink.get(), wm.sink.get()]) == 2


def test_pipelined_requests_are_answered_in_order(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(
        http_request(GOOD)
        + http_request(b"", method="GET", content_type=None)
        + http_request(b"{}", path="/nope")
        + http_request(event("workload:started", workload(state="running", seq=2)))
    )
    assert [c.response()[0] for _ in range(4)] == [202, 405, 404, 202]
    first, second = wm.sink.get(), wm.sink.get()
    assert b'"queued"' in first
    assert b'"running"' in second


def test_expect_100_continue_is_sent_only_after_head_says_go_on(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(http_request(GOOD, extra="Expect: 100-continue\r\n")[: -len(GOOD)])
    status, _, _ = c.response()
    assert status == 100  # before any body byte was sent
    c.send(GOOD)
    assert c.response()[0] == 202
    assert wm.sink.get()


def test_expect_100_continue_refused_by_head_gets_final_answer_and_close(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    head = (
        b"POST /v1/workloads/events HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
        b"Content-Length: 5000\r\nExpect: 100-continue\r\n\r\n"
    )
    c.send(head)
    status, headers, _ = c.response()
    assert status == 415  # no 100 first
    assert headers.get("connection") == "close"
    assert c.is_closed_by_peer()


def test_chunked_body(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    half = len(GOOD) // 2
    chunks = [GOOD[:half], GOOD[half:]]
    body = b"".join(b"%x\r\n%s\r\n" % (len(ch), ch) for ch in chunks) + b"0\r\n\r\n"
    c.send(
        b"POST /v1/workloads/events HTTP/1.1\r\nHost: t\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    )
    assert c.response()[0] == 202
    assert b"workloads:upsert" in wm.sink.get()
    c.send(http_request(event("workload:started", workload(state="running", seq=2))))
    assert c.response()[0] == 202  # the connection is still usable


def test_chunked_body_over_the_limit_gets_413_and_close(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(
        b"POST /v1/workloads/events HTTP/1.1\r\nHost: t\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b" " * (256 * 1024)
    for _ in range(4):  # exactly 1 MiB so far: still fine
        c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    c.send(b"1\r\n \r\n")  # one byte over
    status, headers, _ = c.response()
    assert status == 413
    assert headers.get("connection") == "close"
    assert c.is_closed_by_peer()
    assert wm.sink.drain() == []


def test_declared_length_over_limit_gets_413_before_the_body(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(
        b"POST /v1/workloads/events HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {MIB + 1}\r\n\r\n".encode()
    )
    status, headers, body = c.response()  # no body byte sent at all
    assert status == 413
    assert b"exceeds" in body
    assert headers.get("connection") == "close"


@pytest.mark.serial  # a wall-clock bound: run alone (Makefile: test)
def test_slowloris_headers_get_408_after_header_timeout(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server(header_timeout=0.3, idle_timeout=5.0)
    c = https_client(wm.port, tls_cluster.pair("b"))
    started = time.monotonic()
    c.send(b"POST /v1/workloads/events HTTP/1.1\r\nHost: t\r\n")  # and never the blank line
    status, headers, _ = c.response()
    elapsed = time.monotonic() - started
    assert status == 408
    assert headers.get("connection") == "close"
    assert c.is_closed_by_peer()
    assert 0.25 <= elapsed < 3.0


@pytest.mark.serial  # a wall-clock bound: run alone (Makefile: test)
def test_idle_keep_alive_connection_is_closed_after_idle_timeout(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server(idle_timeout=0.3)
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(http_request(GOOD))
    assert c.response()[0] == 202
    started = time.monotonic()
    assert c.is_closed_by_peer()
    assert 0.25 <= time.monotonic() - started < 3.0


def test_slow_body_gets_408_after_body_timeout(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server(body_timeout=0.3)
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(http_request(GOOD)[:-10])  # headers and most of the body
    status, headers, _ = c.response()
    assert status == 408
    assert headers.get("connection") == "close"
    assert wm.sink.drain() == []


def test_early_answer_with_small_body_keeps_the_connection(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(http_request(GOOD, content_type="text/plain"))
    assert c.response()[0] == 415
    c.send(http_request(GOOD))  # same connection: the first body was read and dropped
    assert c.response()[0] == 202


def test_header_block_over_the_limit_gets_431(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server(max_header_bytes=4096)
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(http_request(GOOD, extra="X-Big: " + "a" * 8192 + "\r\n"))
    status, headers, _ = c.response()
    assert status == 431
    assert headers.get("connection") == "close"


def test_malformed_request_gets_400_and_close(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(b"POST /v1/workloads/events HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
    assert c.response()[0] == 400
    assert c.is_closed_by_peer()


def test_handler_crash_gets_500_and_the_server_keeps_serving(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    class Crashing:
        max_body = MIB

        def head(self, req: object) -> None:
            return None

        def complete(self, req: object, body: bytes) -> object:
            raise RuntimeError("boom")

    wm = start_wm_server(handler=Crashing())
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(http_request(GOOD))
    status, headers, _ = c.response()
    assert status == 500
    assert headers.get("connection") == "close"
    c2 = https_client(wm.port, tls_cluster.pair("b"))
    c2.send(http_request(GOOD))
    assert c2.response()[0] == 500


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "HEAD"])
def test_other_methods_get_405_with_allow(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster, method: str
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(http_request(b"", method=method, content_type=None))
    status, headers, body = c.response() if method != "HEAD" else _head_response(c)
    assert status == 405
    assert headers["allow"] == "POST"
    if method == "HEAD":
        assert body == b""


def _head_response(c: HTTPSClient) -> tuple[int, dict[str, str], bytes]:
    """A response to HEAD: its content-length describes a body that is not sent."""
    while b"\r\n\r\n" not in c.buf:
        assert c._fill()
    head, c.buf = c.buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split(" ", 2)[1]), headers, c.buf


def test_graceful_shutdown_finishes_the_request_in_flight(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    idle = https_client(wm.port, tls_cluster.pair("c"))
    request = http_request(GOOD)
    c.send(request[:-10])  # headers and most of the body
    idle.send(http_request(GOOD))
    assert idle.response()[0] == 202
    closing = wm.submit(wm.server.close(5.0))
    assert idle.is_closed_by_peer()  # the idle keep-alive connection closes at once
    idle.close()  # else the server lingers (bounded) for our FIN
    with pytest.raises(ConnectionRefusedError):
        https_client(wm.port, tls_cluster.pair("b"))  # no longer accepting
    c.send(request[-10:])
    status, headers, _ = c.response()
    assert status == 202
    assert headers.get("connection") == "close"
    c.close()
    closing.result(5.0)


def test_bounded_load_many_keep_alive_clients(
    start_wm_server: StartServer, tls_cluster: TLSCluster
) -> None:
    """50 connections x 20 requests each, concurrently, through the broadcaster's client."""
    wm = start_wm_server()
    ident = Identity(tls_cluster.dirs["b"]).current()
    assert ident is not None
    server_fp = cert_fingerprint((tls_cluster.server_dir / "node.crt").read_bytes())
    is_pinned = PinSet(tls_cluster.dirs["b"] / "trusted").is_pinned
    clients, per_client = 50, 20

    async def one_client(n: int) -> list[int]:
        conn = await open_connection(
            "127.0.0.1",
            wm.port,
            identity=ident,
            expected_fingerprint=server_fp,
            is_pinned=is_pinned,
            alpn=(b"http/1.1",),
            handshake_timeout=WAIT,
        )
        statuses: list[int] = []
        try:
            for i in range(per_client):
                body = event("workload:submitted", workload(id=f"{n}-{i}"))
                response = await conn.post(PATH, body, response_timeout=WAIT)
                statuses.append(response.status)
        finally:
            conn.close()
        return statuses

    async def all_clients() -> list[list[int]]:
        async with asyncio.timeout(WAIT):
            return await asyncio.gather(*(one_client(n) for n in range(clients)))

    results = wm.call(all_clients(), timeout=WAIT * 2)
    assert results == [[202] * per_client] * clients
    assert len(wm.sink.drain()) == clients * per_client


# -- RFC 9112 defects found under attack (issue 9) ---------------------------------------------


def test_content_length_with_transfer_encoding_gets_400_then_close_and_nothing_behind_it(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    chunked = f"{len(GOOD):x}\r\n".encode() + GOOD + b"\r\n0\r\n\r\n"
    smuggler = http_request(GOOD, extra="Transfer-Encoding: chunked\r\n")
    smuggler = smuggler.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n" + chunked
    c.send(smuggler + http_request(event("workload:started", workload(state="running", seq=2))))
    status, headers, _ = c.response()
    assert status == 400
    assert headers.get("connection") == "close"
    assert c.is_closed_by_peer()  # RFC 9112 §6.1: the server closes after such a request
    assert wm.sink.drain() == []  # neither it nor the request pipelined behind it applied


def test_absolute_form_target_is_accepted(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(http_request(GOOD, path=f"https://test:{wm.port}/v1/workloads/events"))
    assert c.response()[0] == 202  # RFC 9112 §3.2.2
    assert wm.sink.get()


def test_http_2_0_in_a_request_line_gets_505(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(http_request(GOOD).replace(b"HTTP/1.1", b"HTTP/2.0", 1))
    assert c.response()[0] == 505
    assert c.is_closed_by_peer()
    assert wm.sink.drain() == []


@pytest.mark.parametrize("whole", [True, False], ids=["with-headers", "line-only"])
def test_100_kb_request_line_gets_414(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster, whole: bool
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    path = "/v1/workloads/events?" + "x" * 100_000
    request = http_request(GOOD, path=path)
    c.send(request if whole else request[: len(path) + 10])  # the line, still unfinished
    assert c.response()[0] == 414
    assert c.is_closed_by_peer()


def test_http_1_0_keep_alive_is_honoured_and_its_absence_closes(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    keep = http_request(GOOD, extra="Connection: keep-alive\r\n").replace(b"HTTP/1.1", b"HTTP/1.0")
    c.send(keep)
    status, headers, _ = c.response()
    assert (status, headers.get("connection")) == (202, "keep-alive")
    second = http_request(event("workload:started", workload(state="running", seq=2)))
    c.send(second.replace(b"HTTP/1.1", b"HTTP/1.0", 1))  # no keep-alive this time
    status, headers, _ = c.response()
    assert (status, headers.get("connection")) == (202, "close")
    assert c.is_closed_by_peer()
    assert len([wm.sink.get(), wm.sink.get()]) == 2


def test_a_transfer_coding_before_chunked_gets_501_and_close(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"))
    c.send(
        b"POST /v1/workloads/events HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + http_request(GOOD)
    )
    status, headers, _ = c.response()
    assert (status, headers.get("connection")) == (501, "close")
    assert c.is_closed_by_peer()
    assert wm.sink.drain() == []
