"""TLS layer of the inter-node server: real certificates from nvpair_wm.clusterdir, real
handshakes from stdlib-ssl and pyOpenSSL clients, identity resolved per handshake."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import socket
import ssl
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest
from OpenSSL import SSL

from nvpair_wm.clusterdir import cert_fingerprint, make_self_signed
from nvpair_wm.errors import PinRefused
from nvpair_wm.io.client import PeerConnection, open_connection
from nvpair_wm.pins import Identity, PinSet
from nvpair_wm.tls_contexts import ALPN_PROTOCOLS, ServerTLS, client_context
from tests.conftest import HAS_IPV6, WAIT, CertPair, HTTPSClient, TLSCluster, WmServer, http_request
from tests.support.frames import event

StartServer = Callable[..., WmServer]
Connect = Callable[..., HTTPSClient]

GOOD = event("workload:submitted")


def _refused(connect: Connect, port: int, pair: CertPair | None, host: str = "127.0.0.1") -> bool:
    """True if the TLS connection cannot carry a request: the handshake or first read fails."""
    try:
        c = connect(port, pair, host=host)
        c.send(http_request(GOOD))
        return c.is_closed_by_peer() and not c.buf
    except (ssl.SSLError, ConnectionError):
        return True


def _served(connect: Connect, port: int, pair: CertPair, host: str = "127.0.0.1") -> bool:
    c = connect(port, pair, host=host)
    c.send(http_request(GOOD))
    return c.response()[0] == 202


def _server_fingerprint(port: int, pair: CertPair) -> str:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(pair.cert, pair.key)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=WAIT) as raw,
        ctx.wrap_socket(raw) as s,
    ):
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def _install(src: Path, dst: Path) -> None:
    """Copy node.crt/node.key atomically (temp file + rename), key first."""
    for name in ("node.key", "node.crt"):
        tmp = dst / f".{name}.tmp"
        shutil.copyfile(src / name, tmp)
        os.replace(tmp, dst / name)


def test_pinned_client_is_served(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    assert _served(https_client, wm.port, tls_cluster.pair("b"))
    assert _server_fingerprint(wm.port, tls_cluster.pair("b")) == cert_fingerprint(
        (tls_cluster.server_dir / "node.crt").read_bytes()
    )


def test_client_without_certificate_fails_the_handshake(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    assert _refused(https_client, wm.port, None)
    assert _served(https_client, wm.port, tls_cluster.pair("b"))  # the listener is unaffected


def test_unpinned_certificate_completes_the_handshake_and_gets_403(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.stranger)
    c.send(http_request(GOOD))
    status, _, body = c.response()
    assert status == 403
    assert b"not pinned" in body
    assert wm.sink.drain() == []


def test_no_identity_at_start_then_files_appear_then_rotation(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    late = tmp_path / "late"
    shutil.copytree(tls_cluster.server_dir / "trusted", late / "trusted")
    wm = start_wm_server(cluster_dir=late)

    # Port bound, but nothing to present: the handshake fails, the listener stays up.
    with socket.create_connection(("127.0.0.1", wm.port), timeout=WAIT):
        pass
    assert _refused(https_client, wm.port, tls_cluster.pair("b"))
    assert _refused(https_client, wm.port, tls_cluster.pair("b"))

    # The node joins: the very next handshake succeeds, same process, same socket.
    _install(tls_cluster.server_dir, late)
    assert _served(https_client, wm.port, tls_cluster.pair("b"))
    old_fp = cert_fingerprint((late / "node.crt").read_bytes())
    assert _server_fingerprint(wm.port, tls_cluster.pair("b")) == old_fp

    # Rotation: the next handshake presents the new certificate.
    cert, key = make_self_signed("a")
    staging = tmp_path / "rotated"
    staging.mkdir()
    (staging / "node.crt").write_bytes(cert)
    (staging / "node.key").write_bytes(key)
    _install(staging, late)
    assert _server_fingerprint(wm.port, tls_cluster.pair("b")) == cert_fingerprint(cert)
    assert _served(https_client, wm.port, tls_cluster.pair("b"))


def test_mismatched_key_fails_handshakes_and_listener_survives(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    node = tmp_path / "node"
    shutil.copytree(tls_cluster.server_dir, node)
    wm = start_wm_server(cluster_dir=node)
    assert _served(https_client, wm.port, tls_cluster.pair("b"))
    _, other_key = make_self_signed("x")
    tmp = node / ".node.key.tmp"
    tmp.write_bytes(other_key)
    os.replace(tmp, node / "node.key")
    assert _refused(https_client, wm.port, tls_cluster.pair("b"))
    shutil.copyfile(tls_cluster.server_dir / "node.key", tmp)
    os.replace(tmp, node / "node.key")
    assert _served(https_client, wm.port, tls_cluster.pair("b"))


@pytest.mark.serial  # a wall-clock bound: run alone (Makefile: test)
def test_handshake_timeout_closes_a_silent_connection(start_wm_server: StartServer) -> None:
    wm = start_wm_server(handshake_timeout=0.3)
    with socket.create_connection(("127.0.0.1", wm.port), timeout=WAIT) as raw:
        started = time.monotonic()
        assert raw.recv(1) == b""  # the server closes; we only wait for that
        assert 0.25 <= time.monotonic() - started < 3.0


@pytest.mark.serial  # a wall-clock bound: run alone (Makefile: test)
def test_connection_cap_evicts_the_oldest_stranger(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    """Over the cap, a newcomer evicts the oldest unauthenticated connection at once."""
    wm = start_wm_server(max_connections=2, handshake_timeout=0.5)
    held = [socket.create_connection(("127.0.0.1", wm.port), timeout=WAIT) for _ in range(2)]
    try:
        with socket.create_connection(("127.0.0.1", wm.port), timeout=WAIT):
            with contextlib.suppress(ConnectionResetError):  # an abort may reset
                started = time.monotonic()
                assert held[0].recv(1) == b""  # evicted at once, not after the timeout
                assert time.monotonic() - started < 0.4
            assert wm.server.evicted >= 1
            assert wm.server.refused_over_cap == 0
    finally:
        for raw in held:
            raw.close()
    assert _served(https_client, wm.port, tls_cluster.pair("b"))


def test_connection_cap_refuses_when_full_of_pinned_peers(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server(max_connections=2, handshake_timeout=0.5)
    peers = [https_client(wm.port, tls_cluster.pair("b")) for _ in range(2)]
    for peer in peers:  # a request each: the server has seen their pinned certificates
        peer.send(http_request(GOOD))
        assert peer.response()[0] == 202
    with (
        socket.create_connection(("127.0.0.1", wm.port), timeout=WAIT) as third,
        contextlib.suppress(ConnectionResetError),  # an abort may reset
    ):
        assert third.recv(1) == b""  # closed at once, not after the handshake timeout
    assert wm.server.refused_over_cap >= 1
    peers[0].send(http_request(GOOD))  # the peers' connections were left alone
    assert peers[0].response()[0] == 202


def test_tls_1_1_is_refused(start_wm_server: StartServer, tls_cluster: TLSCluster) -> None:
    wm = start_wm_server()
    ctx = SSL.Context(SSL.TLS_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_VERSION)
    ctx.set_max_proto_version(SSL.TLS1_1_VERSION)
    ctx.set_cipher_list(b"DEFAULT:@SECLEVEL=0")
    ctx.use_certificate_chain_file(str(tls_cluster.pair("b").cert))
    ctx.use_privatekey_file(str(tls_cluster.pair("b").key))
    with socket.create_connection(("127.0.0.1", wm.port), timeout=WAIT) as raw:
        conn = SSL.Connection(ctx, raw)
        conn.set_connect_state()
        with pytest.raises(SSL.Error):
            conn.do_handshake()


def test_server_context_disables_renegotiation_and_resumption(tls_cluster: TLSCluster) -> None:
    server = ServerTLS(Identity(tls_cluster.server_dir))
    # The certificate-less fallback and the Context of the identity (not yet used: a used
    # Context cannot be asked for its options, set_options(0) mutates).
    for ctx in (server.context, server.current_context()):
        assert ctx is not None
        options = ctx.set_options(0)  # returns the options in force
        assert options & SSL.OP_NO_RENEGOTIATION
        assert options & SSL.OP_NO_TICKET
        assert ctx.get_session_cache_mode() == SSL.SESS_CACHE_OFF
        assert ctx.get_verify_mode() == SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT


def test_one_context_per_identity_no_deprecation_and_one_load_log(
    tls_cluster: TLSCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = tmp_path / "node"
    shutil.copytree(tls_cluster.server_dir, node)
    with warnings.catch_warnings(), caplog.at_level(logging.INFO):
        # pyOpenSSL >= 24.3 deprecates X509/PKey objects: cryptography objects are used.
        warnings.simplefilter("error", DeprecationWarning)
        server = ServerTLS(Identity(node))
        first = server.new_connection().get_context()
        assert first is server.current_context()
        assert server.new_connection().get_context() is first  # loaded once, not per handshake
        cert, key = make_self_signed("a")
        staging = tmp_path / "rotated"
        staging.mkdir()
        (staging / "node.crt").write_bytes(cert)
        (staging / "node.key").write_bytes(key)
        _install(staging, node)
        rotated = server.new_connection().get_context()
        assert rotated is not first
        assert server.new_connection().get_context() is rotated
        ident = Identity(tls_cluster.dirs["b"]).current()
        assert ident is not None
        client_context(ident, lambda fp: True)
    loaded = [r for r in caplog.records if "identity loaded" in r.getMessage()]
    # One line per identity (pins logs it; tls_contexts.py does not repeat it): node, rotated, "b".
    assert len(loaded) == 3, [r.getMessage() for r in loaded]


@pytest.mark.parametrize(
    ("offered", "selected"),
    [(["h2", "http/1.1"], "h2"), (["http/1.1"], "http/1.1"), (["spdy/3"], None)],
)
def test_alpn_selection(
    start_wm_server: StartServer, tls_cluster: TLSCluster, offered: list[str], selected: str | None
) -> None:
    wm = start_wm_server()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(tls_cluster.pair("b").cert, tls_cluster.pair("b").key)
    ctx.set_alpn_protocols(offered)
    with (
        socket.create_connection(("127.0.0.1", wm.port), timeout=WAIT) as raw,
        ctx.wrap_socket(raw) as s,
    ):
        assert s.selected_alpn_protocol() == selected


def test_no_alpn_http1_is_sniffed(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"), alpn=None)
    c.send(http_request(GOOD))
    assert c.response()[0] == 202


@pytest.mark.skipif(not HAS_IPV6, reason="no IPv6 loopback on this machine")
def test_ipv4_and_ipv6_share_the_port(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    assert {port for _, port in wm.server.addresses} == {wm.port}
    assert _served(https_client, wm.port, tls_cluster.pair("b"), host="127.0.0.1")
    assert _served(https_client, wm.port, tls_cluster.pair("b"), host="::1")


def test_client_side_verifies_the_server_by_pin(
    start_wm_server: StartServer, tls_cluster: TLSCluster
) -> None:
    """The broadcaster's half: client_context inside the client's open_connection."""
    wm = start_wm_server()
    ident = Identity(tls_cluster.dirs["b"]).current()
    assert ident is not None
    server_fp = cert_fingerprint((tls_cluster.server_dir / "node.crt").read_bytes())
    pinned_check = PinSet(tls_cluster.dirs["b"] / "trusted").is_pinned

    async def dial(is_pinned: Callable[[str], bool], alpn: tuple[bytes, ...]) -> PeerConnection:
        return await open_connection(
            "127.0.0.1",
            wm.port,
            identity=ident,
            expected_fingerprint=server_fp,
            is_pinned=is_pinned,
            alpn=alpn,
            handshake_timeout=WAIT,
        )

    async def post() -> int:
        conn = await dial(pinned_check, ALPN_PROTOCOLS)
        try:
            assert conn.protocol == "h2"  # offered first; the server prefers it
            assert conn.server_fingerprint == server_fp
        finally:
            conn.close()
        conn = await dial(pinned_check, (b"http/1.1",))
        try:
            assert conn.protocol == "http/1.1"
            response = await conn.post("/v1/workloads/events", GOOD, response_timeout=WAIT)
        finally:
            await conn.aclose()
        return response.status

    assert wm.call(post()) == 202
    with pytest.raises(PinRefused):
        wm.call(dial(lambda fp: False, ALPN_PROTOCOLS))


def test_no_alpn_http2_preface_is_sniffed_as_prior_knowledge(
    start_wm_server: StartServer, https_client: Connect, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()
    c = https_client(wm.port, tls_cluster.pair("b"), alpn=None)
    h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    h2c.initiate_connection()
    sid = h2c.get_next_available_stream_id()
    h2c.send_headers(
        sid,
        [
            (":method", "POST"),
            (":scheme", "https"),
            (":authority", "test"),
            (":path", "/v1/workloads/events"),
            ("content-type", "application/json"),
            ("content-length", str(len(GOOD))),
        ],
    )
    h2c.send_data(sid, GOOD, end_stream=True)
    c.send(h2c.data_to_send())
    status = None
    while status is None:
        data = c.sock.recv(65536)
        assert data, "server closed the connection"
        for ev in h2c.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                status = dict(ev.headers)[b":status"]
        c.send(h2c.data_to_send())
    assert status == b"202"
    assert wm.sink.get()
