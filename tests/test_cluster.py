"""Issue 4 end to end: three real nvpair-wm processes with their brokers driven by the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import Cluster, event, is_upsert, workload


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster", 3)
    try:
        c.start()
        yield c
    finally:
        c.close()


def test_an_event_on_a_reaches_b_and_c_exactly_once(cluster: Cluster) -> None:
    a, b, c = cluster["node-a"], cluster["node-b"], cluster["node-c"]
    info = workload("node-a", "w1", requesterId=None, prompt="never relayed")
    a.send(event("workload:submitted", info))
    for peer in (b, c):
        got = peer.wait_for(is_upsert("w1"))["params"]["workloadInfo"]
        expected = {k: v for k, v in info.items() if k != "prompt"}
        assert got == expected  # state queued, every field unchanged, prompt dropped
    # The same event again, and reported by the other nodes' brokers too: still once.
    a.send(event("workload:submitted", info))
    a.send(event("workload:started", workload("node-a", "w1", seq=2, startedAt=5)))
    for peer in (b, c):
        peer.wait_for(is_upsert("w1", seq=2))
        peer.status()  # everything written before this response is in `seen`
        assert [u["seq"] for u in peer.upserts() if u["id"] == "w1"] == [1, 2]
    assert a.upserts() == []  # local events are never echoed
