"""Issue 3 end to end: a real ``nvpair-wm`` subprocess, real certificates, real clients.

Each test starts ``nvpair-wm --bind 127.0.0.1 --port 0 --cluster-dir <member dir>`` on stdio,
reads its port from ``manager:status``, and talks to it with curl (``--http2`` and
``--http1.1``, ``--cert``/``--key`` from a cluster made by ``nvpair_wm.clusterdir``) or, where a
test must control the bytes, with a small Python client (h11, or raw HTTP/2 frames). The
process's stdout is its broker side: what the endpoint accepted shows up there as
``workloads:upsert`` / ``workloads:remove`` lines.

Synchronisation is by events: a line on stdout or stderr, a response, a frame (``PING`` ack,
``GOAWAY``), a FIFO that curl blocks on. Absence is shown by ordering: after the request that
must not reach the broker, a *fence* event from a pinned peer is sent, and the next stdout
frame must be the fence's. Where no event exists (the moment a pipe is full) the test polls,
bounded by a count, and says so. Nothing sleeps. Every fixture checks on the way out that the
process exits 0 on SIGTERM and that its stdout carried nothing but JSON-RPC frames.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import h11
import hpack
import pytest
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    SettingsFrame,
)

from nvpair_wm.clusterdir import cert_fingerprint, remove_member
from nvpair_wm.http.core import MIB
from tests.conftest import TLSCluster
from tests.support.frames import batch, event, event_frame, workload
from tests.support.nodes import (
    EVENTS,
    JSON_HEADERS,
    PROTOCOLS,
    CurlRun,
    StartNode,
    assert_only_jsonrpc,
    client_ssl,
    curl,
    fence,
    post,
    tls_socket,
    uid,
)
from tests.support.wm_process import WAIT

# The subprocess (Node, the start_node fixture) and the clients are in tests/support/nodes.py.


def connect_refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=WAIT).close()
    except ConnectionRefusedError:
        return True
    except OSError as exc:
        return exc.errno == errno.ECONNREFUSED
    return False


# ---------------------------------------------------------------------------------------------
# Acceptance, refusal, handshake
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_pinned_caller_gets_202_and_the_broker_receives_exactly_one_upsert(
    proto: str, start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    node = start_node(tls_cluster.server_dir)
    sent = workload(id=uid("w"), state="queued", seq=3, prompt="secret-prompt-text")
    r = post(proto, node, event("workload:started", sent), tls_cluster.pair("b"), tmp_path)
    assert (r.status, r.body) == (202, b"")

    line = node.recv_line()
    assert b"prompt" not in line and b"secret-prompt-text" not in line
    frame = json.loads(line)
    assert frame["method"] == "workloads:upsert"
    expected = {k: v for k, v in sent.items() if k != "prompt"}
    expected["state"] = "running"  # the method sets the state; every other field unchanged
    assert frame["params"]["workloadInfo"] == expected
    fence(node, tls_cluster.pair("c"))  # exactly one: the next frame is the fence's


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_unpinned_certificate_gets_403_and_nothing_reaches_the_broker(
    proto: str, start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    node = start_node(tls_cluster.server_dir)
    r = post(
        proto,
        node,
        event("workload:submitted", workload(id=uid("w"))),
        tls_cluster.stranger,
        tmp_path,
    )
    assert r.status == 403
    assert "not pinned" in json.loads(r.body)["error"]
    fence(node, tls_cluster.pair("b"))


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_no_client_certificate_fails_the_handshake(
    proto: str, start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    node = start_node(tls_cluster.server_dir, "--log-level", "debug")
    body = tmp_path / "body.json"
    body.write_bytes(event("workload:submitted", workload(id=uid("w"))))
    run = curl(proto, [node.url()], pair=None, data=body)
    # curl's exit code depends on when it notices (35 in the handshake; with TLS 1.3 the
    # client finishes first and the certificate_required alert arrives later: 55 or 56).
    assert run.code != 0 and [r.status for r in run.results] == [0], run
    assert "certificate" in node.wait_stderr("TLS handshake with")  # the server's side of it
    fence(node, tls_cluster.pair("b"))  # the listener is unaffected, nothing was accepted


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_pin_removed_between_two_requests_on_one_open_connection_gets_403(
    proto: str, start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    node = start_node(tls_cluster.server_dir)
    first_id, second_id = uid("w"), uid("w")
    first = tmp_path / "first.json"
    first.write_bytes(event("workload:submitted", workload(id=first_id)))
    second = tmp_path / "second.fifo"
    os.mkfifo(second)
    result: list[CurlRun] = []
    # curl opens the second upload only when the first transfer is done, and blocks on the
    # FIFO until we open it: the revocation lands exactly between the two requests.
    runner = threading.Thread(
        target=lambda: result.append(
            curl(
                proto, [node.url(), node.url()], pair=tls_cluster.pair("b"), uploads=[first, second]
            )
        ),
        daemon=True,
    )

    def feed_second() -> None:
        # Opening blocks until curl opens its end. The 403 comes before the body is read, so
        # curl may already have its answer and have closed the FIFO: a broken pipe is fine.
        with contextlib.suppress(BrokenPipeError), open(second, "wb") as fifo:
            fifo.write(event("workload:submitted", workload(id=second_id)))

    feeder = threading.Thread(target=feed_second, daemon=True)
    runner.start()
    try:
        assert node.upsert()["id"] == first_id  # the first request was accepted
        remove_member(tls_cluster.root, "b")
    finally:
        feeder.start()  # whatever happened above: curl must not wait for the FIFO forever
        runner.join(WAIT * 2)  # curl itself is bounded by its subprocess timeout
        if feeder.is_alive():  # curl never opened the FIFO: a reader of ours releases feeder
            os.close(os.open(second, os.O_RDONLY | os.O_NONBLOCK))
        feeder.join(WAIT)
    assert not runner.is_alive() and not feeder.is_alive()
    [run] = result
    assert run.code == 0, run.stderr
    assert [r.status for r in run.results] == [202, 403]
    assert [r.new_connections for r in run.results] == [1, 0]  # the second reused it
    assert "not pinned" in json.loads(run.results[1].body)["error"]
    fence(node, tls_cluster.pair("c"))  # the refused event never reached the broker


def _install_identity(src: Path, dst: Path) -> None:
    """Copy node.crt/node.key in atomically (temp file + rename), key first."""
    for name in ("node.key", "node.crt"):
        tmp = dst / f".{name}.tmp"
        shutil.copyfile(src / name, tmp)
        os.replace(tmp, dst / name)


def test_no_identity_at_start_port_bound_then_files_copied_in_same_process(
    start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    late = tmp_path / "late"
    shutil.copytree(tls_cluster.server_dir / "trusted", late / "trusted")
    node = start_node(late)
    pid, port = node.proc.pid, node.port
    node.wait_stderr("no cluster identity")

    socket.create_connection(("127.0.0.1", port), timeout=WAIT).close()  # the port is bound
    body = tmp_path / "body.json"
    for proto in PROTOCOLS:
        body.write_bytes(event("workload:submitted", workload(id=uid("w"))))
        run = curl(proto, [node.url()], pair=tls_cluster.pair("b"), data=body)
        assert run.code != 0 and [r.status for r in run.results] == [0], run

    _install_identity(tls_cluster.server_dir, late)
    for proto in PROTOCOLS:  # the very next handshake succeeds: no restart, no rebind
        wid = uid("w")
        r = post(
            proto,
            node,
            event("workload:submitted", workload(id=wid)),
            tls_cluster.pair("b"),
            tmp_path,
        )
        assert r.status == 202
        assert node.upsert()["id"] == wid
    status = node.status()
    assert status["hasIdentity"] is True
    assert status["fingerprint"] == cert_fingerprint((late / "node.crt").read_bytes())
    assert (node.proc.pid, node.proc.poll(), status["port"]) == (pid, None, port)


# ---------------------------------------------------------------------------------------------
# Deduplication, batches, limits
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_duplicate_from_two_pinned_peers_reaches_the_broker_once(
    proto: str, start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    node = start_node(tls_cluster.server_dir)
    wid = uid("w")
    body = event("workload:submitted", workload(id=wid, originatedFrom="node-x"))
    assert post(proto, node, body, tls_cluster.pair("b"), tmp_path).status == 202
    assert post(proto, node, body, tls_cluster.pair("c"), tmp_path).status == 202
    assert node.upsert()["id"] == wid
    fence(node, tls_cluster.pair("b"))  # the duplicate did not follow


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_batch_mixing_good_and_bad_frames_gets_400_naming_the_bad_index(
    proto: str, start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    node = start_node(tls_cluster.server_dir)
    good, bad, later = uid("good"), uid("bad"), uid("good")
    body = batch(
        event_frame("workload:submitted", workload(id=good)),
        event_frame("workload:started", workload(id=bad, state="running", seq="not-a-number")),
        event_frame("workload:submitted", workload(id=later)),
    )
    r = post(proto, node, body, tls_cluster.pair("b"), tmp_path)
    assert r.status == 400
    assert r.headers["content-type"].startswith("application/json")
    [error] = json.loads(r.body)  # notifications are not answered: only the bad frame is
    assert error["id"] is None
    data = error["error"]["data"]
    assert data["index"] == 1
    assert "seq" in data["path"] and data["reason"], data
    assert [node.upsert()["id"], node.upsert()["id"]] == [good, later]
    fence(node, tls_cluster.pair("c"))  # the bad frame never reached the broker


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_batch_with_a_frame_nested_1000_deep_gets_400_for_it_and_the_rest_applied_once(
    proto: str, start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    """Issue 9: one unprocessable frame is that frame's error in the 400, never a 500; issue 10:
    nesting beyond the bound (and beyond msgspec's own) is a parse error naming the bound."""
    node = start_node(tls_cluster.server_dir)
    good, later = uid("good"), uid("good")
    deep = json.dumps(event_frame("workload:submitted", workload(id=uid("deep"), x="HOLE")))
    deep_frame = deep.replace('"HOLE"', "[" * 1000 + "]" * 1000).encode()
    body = b"[%s,%s,%s]" % (
        json.dumps(event_frame("workload:submitted", workload(id=good))).encode(),
        deep_frame,
        json.dumps(event_frame("workload:submitted", workload(id=later))).encode(),
    )
    r = post(proto, node, body, tls_cluster.pair("b"), tmp_path)
    assert r.status == 400, r
    [error] = json.loads(r.body)
    assert error["id"] is None and error["error"]["code"] == -32700
    assert error["error"]["data"]["index"] == 1
    assert "deeper than 64 levels" in error["error"]["data"]["reason"]
    assert [node.upsert()["id"], node.upsert()["id"]] == [good, later]
    fence(node, tls_cluster.pair("c"))  # each valid frame reached the broker exactly once
    # The same frame alone: 400 with its error, and the endpoint goes on.
    r = post(proto, node, deep_frame, tls_cluster.pair("b"), tmp_path)
    assert r.status == 400 and json.loads(r.body)["error"]["code"] == -32700, r
    fence(node, tls_cluster.pair("c"))


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_batch_breaking_i_json_in_unknown_members_gets_400_for_those_frames_only(
    proto: str, start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    """Every member is held to I-JSON, also one nothing reads: each offending frame is its own
    -32700 with a reason saying what was wrong; the valid frames around them are applied."""
    node = start_node(tls_cluster.server_dir)
    good, later = uid("good"), uid("good")
    template = json.dumps(event_frame("workload:submitted", workload(id=uid("bad"), x="HOLE")))
    bad = {
        b"1e400": "beyond every finite IEEE 754 double",
        b'"\\ud800"': "lone surrogate \\ud800",
        b'"\xff"': "invalid UTF-8",
    }
    frames = [json.dumps(event_frame("workload:submitted", workload(id=good))).encode()]
    frames += [template.encode().replace(b'"HOLE"', raw) for raw in bad]
    frames.append(json.dumps(event_frame("workload:submitted", workload(id=later))).encode())
    r = post(proto, node, b"[" + b",".join(frames) + b"]", tls_cluster.pair("b"), tmp_path)
    assert r.status == 400, r
    errors = json.loads(r.body)
    assert [e["error"]["data"]["index"] for e in errors] == [1, 2, 3]
    for error, why in zip(errors, bad.values(), strict=True):
        assert error["error"]["code"] == -32700 and why in error["error"]["data"]["reason"], error
    assert [node.upsert()["id"], node.upsert()["id"]] == [good, later]
    fence(node, tls_cluster.pair("c"))


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_body_of_1_mib_plus_1_byte_gets_413(
    proto: str, start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    node = start_node(tls_cluster.server_dir)
    frame = event("workload:submitted", workload(id=uid("w")))
    body = frame + b" " * (MIB + 1 - len(frame))
    assert len(body) == MIB + 1
    r = post(proto, node, body, tls_cluster.pair("b"), tmp_path)
    assert r.status == 413
    fence(node, tls_cluster.pair("c"))


# ---------------------------------------------------------------------------------------------
# Backpressure: a broker that stops reading
# ---------------------------------------------------------------------------------------------


def _events(ids: list[str]) -> bytes:
    return batch(*(event_frame("workload:submitted", workload(id=i)) for i in ids))


def test_backpressure_503_with_retry_after_then_nothing_lost(
    start_node: StartNode, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    node = start_node(tls_cluster.server_dir, "--broker-queue", "5")
    node.reading.clear()  # the broker stops reading stdout
    accepted: list[str] = []
    refused: tuple[bytes, list[str]] | None = None
    conn = http.client.HTTPSConnection(
        "127.0.0.1", node.port, timeout=WAIT, context=client_ssl(tls_cluster.pair("b"), "http/1.1")
    )
    try:
        # ~280 KB of upserts: more than the pipe and the node's write buffer hold together.
        ids = [uid("bulk") for _ in range(1000)]
        conn.request("POST", EVENTS, _events(ids), JSON_HEADERS)
        response = conn.getresponse()
        assert (response.status, response.read()) == (202, b"")
        accepted += ids
        # No event says "the pipe is full now": post small batches until the first 503,
        # bounded by count (each POST waits for its answer).
        for _ in range(200):
            ids = [uid("small") for _ in range(5)]
            body = _events(ids)
            conn.request("POST", EVENTS, body, JSON_HEADERS)
            response = conn.getresponse()
            payload = response.read()
            if response.status == 503:
                assert response.getheader("Retry-After") == "1"
                assert "full" in json.loads(payload)["error"]
                refused = (body, ids)
                break
            assert (response.status, payload) == (202, b"")
            accepted += ids
        assert refused is not None, "no 503 after 200 POSTs into a full pipe"

        # Still full while nobody reads: curl gets the same answer over both protocols.
        body_file = tmp_path / "refused.json"
        body_file.write_bytes(refused[0])
        for proto in PROTOCOLS:
            r = curl(proto, [node.url()], pair=tls_cluster.pair("c"), data=body_file).one
            assert (r.status, r.headers.get("retry-after")) == (503, "1")

        node.reading.set()  # the broker reads again: everything accepted arrives, in order
        arrived = [node.upsert()["id"] for _ in accepted]
        assert arrived == accepted
        # The last accepted frame was written, so the queue is empty: new POSTs get 202, and
        # the refused batch, sent again, is accepted now (a 503 consumed nothing).
        conn.request("POST", EVENTS, refused[0], JSON_HEADERS)
        response = conn.getresponse()
        assert (response.status, response.read()) == (202, b"")
    finally:
        node.reading.set()
        conn.close()
    assert [node.upsert()["id"] for _ in refused[1]] == refused[1]
    for proto in PROTOCOLS:
        wid = uid("after")
        r = post(
            proto,
            node,
            event("workload:submitted", workload(id=wid)),
            tls_cluster.pair("b"),
            tmp_path,
        )
        assert r.status == 202
        assert node.upsert()["id"] == wid
    fence(node, tls_cluster.pair("c"))  # and nothing twice


# ---------------------------------------------------------------------------------------------
# SIGTERM with a request in flight
# ---------------------------------------------------------------------------------------------


def _h11_next(conn: h11.Connection, sock: ssl.SSLSocket) -> Any:
    while True:
        ev = conn.next_event()
        if ev is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
            continue
        return ev


def test_sigterm_with_an_http1_upload_in_flight_completes_it_and_exits_0(
    start_node: StartNode, tls_cluster: TLSCluster
) -> None:
    node = start_node(tls_cluster.server_dir)
    wid = uid("inflight")
    body = event("workload:submitted", workload(id=wid))
    half = len(body) // 2
    with (
        tls_socket(node.port, tls_cluster.pair("c"), "http/1.1") as idle,
        tls_socket(node.port, tls_cluster.pair("b"), "http/1.1") as sock,
    ):
        # A second connection, idle between requests: the server closes such a connection as
        # soon as it begins shutting down, which is the event this test waits for below.
        probe = h11.Connection(h11.CLIENT)
        get = h11.Request(method="GET", target="/elsewhere", headers=[("host", "node-a")])
        idle.sendall(probe.send(get) + probe.send(h11.EndOfMessage()))
        assert _h11_next(probe, idle).status_code == 404
        while not isinstance(_h11_next(probe, idle), h11.EndOfMessage):
            pass  # the short JSON reason

        client = h11.Connection(h11.CLIENT)
        head = h11.Request(
            method="POST",
            target=EVENTS,
            headers=[
                ("host", "node-a"),
                ("content-type", "application/json"),
                ("transfer-encoding", "chunked"),
                ("expect", "100-continue"),
            ],
        )
        sock.sendall(client.send(head))
        # 100 Continue: the server read the head, accepted the caller and waits for the body.
        ev = _h11_next(client, sock)
        assert isinstance(ev, h11.InformationalResponse) and ev.status_code == 100
        sock.sendall(client.send(h11.Data(data=body[:half])))

        node.terminate(signal.SIGTERM)
        # Shutdown began: the listener is closed first, then every connection is asked to
        # finish; the idle one ends at once (EOF), the busy one must still be served.
        assert idle.recv(1) == b""
        assert connect_refused(node.port)

        sock.sendall(client.send(h11.Data(data=body[half:])) + client.send(h11.EndOfMessage()))
        response = _h11_next(client, sock)
        assert isinstance(response, h11.Response) and response.status_code == 202
        assert (b"connection", b"close") in response.headers
        assert isinstance(_h11_next(client, sock), h11.EndOfMessage)
    assert node.upsert()["id"] == wid  # flushed to the broker before exiting
    assert node.wait(WAIT) == 0
    node.wait_stderr("stopped")


class RawH2:
    """A minimal HTTP/2 client on raw frames (hyperframe + hpack).

    The ``h2`` library cannot be used here: it closes its state machine on receiving GOAWAY
    (python-hyper/h2#1181), but a graceful GOAWAY still lets open streams finish, which is
    what this test sends.
    """

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        self.buf = b""
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + SettingsFrame(0).serialize())

    def send(self, *frames: Frame) -> None:
        self.sock.sendall(b"".join(f.serialize() for f in frames))

    def headers(self, sid: int, headers: list[tuple[str, str]]) -> HeadersFrame:
        frame = HeadersFrame(sid, self.encoder.encode(headers))
        frame.flags.add("END_HEADERS")
        return frame

    def next_frame(self) -> Frame:
        """The next frame from the server (SETTINGS are acknowledged on the way)."""
        while True:
            if len(self.buf) >= 9:
                frame, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
                if len(self.buf) >= 9 + length:
                    frame.parse_body(memoryview(self.buf[9 : 9 + length]))
                    self.buf = self.buf[9 + length :]
                    if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                        self.send(SettingsFrame(0, flags=["ACK"]))
                    return frame
            data = self.sock.recv(65536)
            assert data, "server closed the connection"
            self.buf += data

    def until(self, kind: type[Frame], *, sid: int | None = None) -> Any:
        while True:
            frame = self.next_frame()
            if isinstance(frame, kind) and (sid is None or frame.stream_id == sid):
                return frame


def test_sigterm_with_an_http2_upload_in_flight_gets_goaway_completes_it_and_exits_0(
    start_node: StartNode, tls_cluster: TLSCluster
) -> None:
    node = start_node(tls_cluster.server_dir)
    wid = uid("inflight")
    body = event("workload:submitted", workload(id=wid))
    half = len(body) // 2
    with tls_socket(node.port, tls_cluster.pair("b"), "h2") as sock:
        h2c = RawH2(sock)
        head = h2c.headers(
            1,
            [
                (":method", "POST"),
                (":scheme", "https"),
                (":authority", "node-a"),
                (":path", EVENTS),
                ("content-type", "application/json"),
            ],
        )
        # The PING goes after the stream's first bytes: its ACK proves the server has them.
        h2c.send(head, DataFrame(1, body[:half]), PingFrame(0, b"inflight"))
        ack = h2c.until(PingFrame)
        assert "ACK" in ack.flags and ack.opaque_data == b"inflight"

        node.terminate(signal.SIGTERM)
        goaway = h2c.until(GoAwayFrame)
        assert (goaway.error_code, goaway.last_stream_id) == (0, 1)  # NO_ERROR, stream 1 stays
        assert connect_refused(node.port)  # it stopped accepting before saying GOAWAY

        h2c.send(DataFrame(1, body[half:], flags=["END_STREAM"]))
        response = h2c.until(HeadersFrame, sid=1)
        assert dict(h2c.decoder.decode(response.data, raw=True))[b":status"] == b"202"
        assert "END_STREAM" in response.flags
    assert node.upsert()["id"] == wid  # flushed to the broker before exiting
    assert node.wait(WAIT) == 0
    node.wait_stderr("stopped")


def test_stdout_checker_rejects_anything_but_jsonrpc() -> None:
    """The teardown check of every test above really checks something."""
    assert_only_jsonrpc(
        [
            b'{"jsonrpc":"2.0","method":"ready","params":{}}\n',
            b'[{"jsonrpc":"2.0","id":1,"result":{}}]\n',
        ]
    )
    for bad in (
        b"hello\n",
        b'{"jsonrpc":"2.0"}\n',
        b'{"method":"x"}\n',
        b'{"jsonrpc":"2.0","id":1}',
    ):
        with pytest.raises((AssertionError, ValueError)):
            assert_only_jsonrpc([bad])
