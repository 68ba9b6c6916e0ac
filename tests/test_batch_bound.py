"""The batch bound (``max_batch``, 10,000 elements by default) on real ``nvpair-wm`` processes.

A batch over the bound is refused as a whole, before any element is decoded: one -32600 with
``id`` null and ``data.reason`` naming the bound on the local channel (the next request is still
answered), 413 with an ``HttpError`` over HTTP (real curl, mutual TLS, HTTP/2 and HTTP/1.1);
nothing of it is applied. The bound is set through ``--config``, the path users take. The attack
it stops: a 1 MiB body of ~350,000 empty elements, which used to earn a ~30 MB answer.

About 4 s: three stdio processes and two cluster nodes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nvpair_wm import codec
from nvpair_wm.http.core import MIB
from tests.conftest import TLSCluster
from tests.support.frames import batch, event_frame, workload
from tests.support.nodes import PROTOCOLS, StartNode, fence, post
from tests.support.wm_process import WmProcess


def attack_body(limit: int = MIB - 16) -> bytes:
    """The largest ``[[],[],...]`` under ``limit`` bytes: ~350,000 invalid elements."""
    count = (limit - 2) // 3
    body = b"[" + b",".join([b"[]"] * count) + b"]"
    assert len(body) <= limit and count > 10 * codec.MAX_BATCH_FRAMES
    return body


def config_file(tmp: Path, max_batch: int) -> Path:
    path = tmp / f"wm-{max_batch}.toml"
    path.write_text(f"max_batch = {max_batch}\n")
    return path


def requests(ids: list[str], first_rid: int) -> list[dict[str, Any]]:
    frames = []
    for rid, wid in enumerate(ids, first_rid):
        frame = event_frame("workload:submitted", workload(id=wid))
        frames.append({**frame, "id": rid})
    return frames


def assert_refused_whole(reply: Any, count: int, limit: int) -> None:
    assert isinstance(reply, dict), "a refused batch is one error, not an array"
    assert reply["id"] is None and reply["error"]["code"] == -32600, reply
    reason = reply["error"]["data"]["reason"]
    assert f"batch of {count} frames" in reason and f"limit of {limit}" in reason, reason
    assert "max_batch" in reason and "index" not in reply["error"]["data"], reply


def test_local_attack_line_gets_one_short_error_and_the_next_request_is_answered() -> None:
    with WmProcess("--port", "0") as wm:
        assert wm.recv()["method"] == "ready"
        body = attack_body()
        wm.send(body + b"\n")
        line = wm.raw_lines.get(timeout=10)
        assert len(line) < 300, f"answer of {len(line)} bytes"  # it used to be ~30 MB
        assert_refused_whole(json.loads(line), body.count(b"[]"), codec.MAX_BATCH_FRAMES)
        status = wm.status()  # the channel goes on
        broker = status["counters"]["byChannel"]["broker"]
        assert broker["invalid"] == 1 and broker["applied"] == 0, broker
        assert status["counters"]["invalid"] == 1


def test_local_bound_from_config_applies_a_full_batch_and_refuses_a_longer_one(
    tmp_path: Path,
) -> None:
    with WmProcess("--port", "0", "--config", str(config_file(tmp_path, 3))) as wm:
        assert wm.recv()["method"] == "ready"
        wm.send(json.dumps(requests(["a1", "a2", "a3"], 1)).encode() + b"\n")
        answers = wm.recv()
        assert [a["result"]["outcome"] for a in answers] == ["applied"] * 3
        wm.send(json.dumps(requests(["b1", "b2", "b3", "b4"], 10)).encode() + b"\n")
        assert_refused_whole(wm.recv(), 4, 3)
        status = wm.status()
        assert status["counters"]["workloads"] == 3  # nothing of the refused batch applied
        broker = status["counters"]["byChannel"]["broker"]
        assert (broker["applied"], broker["invalid"]) == (3, 1), broker
        # The refused workloads were never seen: sent again in a batch that fits, applied.
        wm.send(json.dumps(requests(["b1", "b2"], 20)).encode() + b"\n")
        assert [a["result"]["outcome"] for a in wm.recv()] == ["applied"] * 2


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_peer_attack_body_gets_413_and_the_endpoint_goes_on(
    proto: str,
    start_node: StartNode,
    tls_cluster: TLSCluster,
    tmp_path: Path,
) -> None:
    node = start_node(tls_cluster.server_dir)
    body = attack_body()
    r = post(proto, node, body, tls_cluster.pair("b"), tmp_path)
    assert r.status == 413, r
    assert r.headers["content-type"].startswith("application/json")
    error = json.loads(r.body)["error"]
    assert f"batch of {body.count(b'[]')} frames" in error and "max_batch" in error, error
    assert len(r.body) < 300
    fence(node, tls_cluster.pair("c"))  # nothing reached the broker; the next body is served
    peer = node.status()["counters"]["byChannel"]["peer"]
    assert (peer["invalid"], peer["applied"]) == (1, 1), peer  # the refused batch, the fence


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_peer_bound_from_config_refuses_a_longer_batch_as_a_whole(
    proto: str,
    start_node: StartNode,
    tls_cluster: TLSCluster,
    tmp_path: Path,
) -> None:
    node = start_node(tls_cluster.server_dir, "--config", str(config_file(tmp_path, 2)))
    frames = [event_frame("workload:submitted", workload(id=f"{proto}-{i}")) for i in range(3)]
    r = post(proto, node, batch(*frames), tls_cluster.pair("b"), tmp_path)
    assert r.status == 413, r
    assert "batch of 3 frames exceeds the limit of 2" in json.loads(r.body)["error"]
    fence(node, tls_cluster.pair("c"))  # none of the three reached the broker
    r = post(proto, node, batch(*frames[:2]), tls_cluster.pair("b"), tmp_path)
    assert r.status == 202, r
    assert [node.upsert()["id"], node.upsert()["id"]] == [f"{proto}-0", f"{proto}-1"]
