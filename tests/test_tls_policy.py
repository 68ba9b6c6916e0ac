"""The inter-node TLS policy, checked suite by suite with real ``openssl`` handshakes.

Server side: ``openssl s_client`` against a real ``nvpair-wm`` process offers one suite (or one
protocol version) at a time, at security level 0 so that any refusal is the node's. Client side:
the node's client context (what the broadcaster dials with) against ``openssl s_server``
offering one suite at a time. Default: TLS 1.3, and TLS 1.2 with ECDHE and AEAD suites only;
``tls.min_version = "1.3"``: TLS 1.3 alone.
"""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from OpenSSL import SSL

from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.pins import Identity
from nvpair_wm.tls_contexts import TLSPolicy, client_context
from tests.support.tools import tool
from tests.support.wm_process import WAIT, WmProcess

AEAD_12 = [
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
]
# What the node used to accept too (CBC with SHA-1 or SHA-2 MACs), and what it never did
# (RSA key exchange, which its ECDSA certificate cannot serve anyway).
LEGACY_12 = [
    "ECDHE-ECDSA-AES128-SHA",
    "ECDHE-ECDSA-AES256-SHA",
    "ECDHE-ECDSA-AES128-SHA256",
    "ECDHE-ECDSA-AES256-SHA384",
    "AES128-GCM-SHA256",
]
TLS13 = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]


def openssl() -> str:
    path = tool("openssl")
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return init_cluster(tmp_path_factory.mktemp("tls") / "cluster", ["node-1", "node-2"])


def _node(
    cluster: dict[str, Path], tmp: Path, min_version: str, node: str, caller: str
) -> Iterator[tuple[int, Path]]:
    """``node`` running with ``min_version``: (its port, the cluster dir of a pinned caller)."""
    config = tmp / f"tls-{min_version}.toml"
    config.write_text(f'[tls]\nmin_version = "{min_version}"\n')
    with WmProcess(
        "--cluster-dir", str(cluster[node]), "--port", "0", "--bind", "127.0.0.1",
        "--config", str(config),
    ) as wm:  # fmt: skip
        line = wm.wait_stderr("inter-node server listening on")
        match = re.search(r":(\d+)$", line)
        assert match, line
        yield int(match.group(1)), cluster[caller]
        wm.close_stdin()
        assert wm.wait() == 0


@pytest.fixture(scope="module")
def default_node(
    cluster: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, Path]]:
    yield from _node(cluster, tmp_path_factory.mktemp("default"), "1.2", "node-1", "node-2")


@pytest.fixture(scope="module")
def modern_node(
    cluster: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, Path]]:
    yield from _node(cluster, tmp_path_factory.mktemp("modern"), "1.3", "node-2", "node-1")


def s_client(port: int, caller: Path, *offer: str) -> tuple[str, str] | None:
    """(protocol, suite) that ``openssl s_client`` negotiated offering ``offer``, or None."""
    run = subprocess.run(
        [openssl(), "s_client", "-brief", "-connect", f"127.0.0.1:{port}", *offer,
         "-cert", str(caller / "node.crt"), "-key", str(caller / "node.key")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT, check=False,
    )  # fmt: skip
    protocol = re.search(r"Protocol version: (\S+)", run.stderr)
    suite = re.search(r"Ciphersuite: (\S+)", run.stderr)
    if run.returncode != 0 or not protocol or not suite:
        assert "alert" in run.stderr or "no cipher" in run.stderr, run.stderr  # a refusal
        return None
    return protocol.group(1), suite.group(1)


def tls12(suite: str) -> tuple[str, ...]:
    return ("-tls1_2", "-cipher", f"{suite}:@SECLEVEL=0")


def tls13(suite: str) -> tuple[str, ...]:
    return ("-tls1_3", "-ciphersuites", suite)


@pytest.mark.parametrize("suite", AEAD_12)
def test_default_accepts_tls12_aead(default_node: tuple[int, Path], suite: str) -> None:
    assert s_client(*default_node, *tls12(suite)) == ("TLSv1.2", suite)


@pytest.mark.parametrize("suite", LEGACY_12)
def test_default_refuses_tls12_cbc_and_rsa_kx(default_node: tuple[int, Path], suite: str) -> None:
    assert s_client(*default_node, *tls12(suite)) is None


@pytest.mark.parametrize("suite", TLS13)
def test_default_accepts_tls13(default_node: tuple[int, Path], suite: str) -> None:
    assert s_client(*default_node, *tls13(suite)) == ("TLSv1.3", suite)


@pytest.mark.parametrize("version", ["-tls1", "-tls1_1"])
def test_default_refuses_tls10_and_11(default_node: tuple[int, Path], version: str) -> None:
    assert s_client(*default_node, version, "-cipher", "ALL:@SECLEVEL=0") is None


@pytest.mark.parametrize("suite", AEAD_12 + LEGACY_12)
def test_modern_refuses_every_tls12_suite(modern_node: tuple[int, Path], suite: str) -> None:
    assert s_client(*modern_node, *tls12(suite)) is None


@pytest.mark.parametrize("suite", TLS13)
def test_modern_accepts_tls13(modern_node: tuple[int, Path], suite: str) -> None:
    assert s_client(*modern_node, *tls13(suite)) == ("TLSv1.3", suite)


# -- the client side: the node dialing a peer that offers one suite -------------------------------


def dial_s_server(cluster: dict[str, Path], policy: TLSPolicy, *offer: str) -> str | None:
    """The suite the node's client context negotiates with ``openssl s_server`` offering
    ``offer`` (node-1's certificate), or None when the handshake fails."""
    server = subprocess.Popen(
        [openssl(), "s_server", "-accept", "0", "-naccept", "1", *offer,
         "-cert", str(cluster["node-1"] / "node.crt"),
         "-key", str(cluster["node-1"] / "node.key")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        port = 0
        for line in server.stdout:  # "ACCEPT [::]:PORT" once listening
            if match := re.match(r"ACCEPT .*:(\d+)$", line.strip()):
                port = int(match.group(1))
                break
        assert port, "openssl s_server did not start"
        identity = Identity(cluster["node-2"]).current()
        assert identity is not None
        context = client_context(identity, lambda _fp: True, (), policy)
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
            sock.settimeout(None)  # pyOpenSSL reads a socket with a timeout as non-blocking
            conn = SSL.Connection(context, sock)
            conn.set_connect_state()
            try:
                conn.do_handshake()
            except SSL.Error:
                return None
            suite = conn.get_cipher_name()
            conn.shutdown()
            return suite
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("suite", AEAD_12)
def test_client_offers_tls12_aead(cluster: dict[str, Path], suite: str) -> None:
    assert dial_s_server(cluster, TLSPolicy(), *tls12(suite)) == suite


@pytest.mark.parametrize("suite", LEGACY_12[:4])
def test_client_refuses_tls12_cbc(cluster: dict[str, Path], suite: str) -> None:
    assert dial_s_server(cluster, TLSPolicy(), *tls12(suite)) is None


def test_modern_client_refuses_tls12_and_takes_tls13(cluster: dict[str, Path]) -> None:
    modern = TLSPolicy(min_version="1.3")
    assert dial_s_server(cluster, modern, *tls12(AEAD_12[0])) is None
    assert dial_s_server(cluster, modern, *tls13(TLS13[2])) == TLS13[2]
