"""``GET /healthz`` and ``GET /readyz`` on the ``--metrics`` listener of a real node, with curl:
200 or 503 and a short JSON body saying why."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from nvpair_wm.clusterdir import init_cluster
from tests.support.probes import (
    get,
)
from tests.support.wm_process import WmProcess, ipc_broker


def metrics_port(wm: WmProcess) -> int:
    line = wm.wait_stderr("metrics endpoint listening on")
    match = re.search(r":(\d+)/metrics", line)
    assert match, line
    return int(match.group(1))


def test_probes_while_waiting_for_the_broker_then_ready(tmp_path: Path) -> None:
    """The probes answer at once, also while the node waits for its broker on --ipc: alive, not
    ready (and why); once the broker listens and ``ready`` went out, ready."""
    node = init_cluster(tmp_path / "cluster", ["node-1", "node-2"])["node-1"]
    sock_path = tmp_path / "broker.sock"
    args = ["--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1"]
    with WmProcess(*args, "--ipc", str(sock_path), "--metrics", "127.0.0.1:0") as wm:
        port = metrics_port(wm)
        wm.wait_stderr("waiting for the broker")
        assert get(port, "/healthz") == (200, {"status": "ok"})
        status, body = get(port, "/readyz")
        assert status == 503 and body["ready"] is False, body
        assert any("ready not sent" in r for r in body["reasons"]), body
        with ipc_broker(sock_path) as (conn, _):
            assert get(port, "/readyz") == (200, {"ready": True})
            assert get(port, "/healthz") == (200, {"status": "ok"})
            assert get(port, "/readyz", method="HEAD")[0] == 200
            assert get(port, "/readyz", method="POST")[0] == 405
            status, text = get(port, "/ready")
            assert status == 404 and "/readyz" in text
            conn.shutdown(socket.SHUT_WR)
            assert wm.wait() == 0


def test_not_ready_without_the_identity_its_cluster_dir_should_hold(tmp_path: Path) -> None:
    empty = tmp_path / "node-x"
    empty.mkdir()  # a cluster directory without node.crt/node.key: the node warns and runs
    args = ["--cluster-dir", str(empty), "--port", "0", "--bind", "127.0.0.1"]
    with WmProcess(*args, "--metrics", "127.0.0.1:0") as wm:
        assert wm.recv()["method"] == "ready"
        port = metrics_port(wm)
        status, body = get(port, "/readyz")
        assert status == 503, body
        assert body["reasons"] == [
            f"no cluster identity: node.crt/node.key in {empty} missing or unusable"
        ], body
        assert get(port, "/healthz") == (200, {"status": "ok"})
        wm.close_stdin()
        assert wm.wait() == 0


def test_ready_without_a_cluster_dir(tmp_path: Path) -> None:
    """No --cluster-dir: no identity, knowingly; no journal, knowingly: ready once ``ready`` is
    sent."""
    with WmProcess("--port", "0", "--bind", "127.0.0.1", "--metrics", "127.0.0.1:0") as wm:
        assert wm.recv()["method"] == "ready"
        assert get(metrics_port(wm), "/readyz") == (200, {"ready": True})
        wm.close_stdin()
        assert wm.wait() == 0
