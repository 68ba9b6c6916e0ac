"""Peer selection: records from nodes:update, our own certificate, and the pins in trusted/.

Real cluster directories (nvpair_wm.clusterdir) and the real stat-cached PinSet / Identity.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest
from nvpair_wm_schema.node_record_schema import NodeRecord

from nvpair_wm.clusterdir import init_cluster, node_records, remove_member
from nvpair_wm.peers import Peer, PeerDirectory, diff, select_peers
from nvpair_wm.pins import Identity, PinSet
from tests.support.frames import node


def records(cluster: Path, port_base: int = 15000) -> list[NodeRecord]:
    return msgspec.convert(node_records(cluster, port_base=port_base), list[NodeRecord])


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    init_cluster(tmp_path / "c", ["a", "b", "c"])
    return tmp_path / "c"


def directory(cluster: Path, name: str) -> PeerDirectory:
    d = cluster / name
    return PeerDirectory(Identity(d), PinSet(d / "trusted"))


def names(peers: dict[str, Peer]) -> list[str]:
    return sorted(p.node_id for p in peers.values())


def test_every_other_pinned_member_is_a_peer_and_we_are_not(cluster: Path) -> None:
    pd = directory(cluster, "a")
    pd.update(records(cluster))
    peers = pd.evaluate()
    assert names(peers) == ["b", "c"]
    b = next(p for p in peers.values() if p.node_id == "b")
    assert (b.address, b.port) == ("127.0.0.1", 15001)
    assert b.fingerprint in PinSet(cluster / "a" / "trusted").current()


def test_unpinned_records_are_not_peers_and_follow_trusted_at_once(cluster: Path) -> None:
    pd = directory(cluster, "a")
    pd.update(records(cluster))
    saved = (cluster / "a" / "trusted" / "c.crt").read_bytes()
    (cluster / "a" / "trusted" / "c.crt").unlink()
    assert names(pd.evaluate()) == ["b"]  # no new nodes:update needed
    (cluster / "a" / "trusted" / "c.crt").write_bytes(saved)
    assert names(pd.evaluate()) == ["b", "c"]


def test_removed_member_is_dropped(cluster: Path) -> None:
    pd = directory(cluster, "a")
    recs = records(cluster)
    pd.update(recs)
    remove_member(cluster, "b")
    assert names(pd.evaluate()) == ["c"]  # unpinned in a's trusted/
    pd.update([r for r in recs if r.nodeId != "b"])  # and gone from the broker's records
    assert names(pd.evaluate()) == ["c"]


def test_records_not_in_the_snapshot_are_not_peers(cluster: Path) -> None:
    pd = directory(cluster, "a")
    pd.update(records(cluster))
    pd.update([r for r in records(cluster) if r.nodeId == "c"])  # replaces, not merges
    assert names(pd.evaluate()) == ["c"]


def test_no_identity_no_peers_until_the_files_appear(cluster: Path, tmp_path: Path) -> None:
    d = tmp_path / "late"
    (d / "trusted").mkdir(parents=True)
    for other in ("b", "c"):
        shutil.copy(cluster / "a" / "trusted" / f"{other}.crt", d / "trusted")
    pd = PeerDirectory(Identity(d), PinSet(d / "trusted"))
    pd.update(records(cluster))
    assert pd.evaluate() == {} and pd.own_fingerprint() is None
    shutil.copy(cluster / "a" / "node.crt", d / "node.crt")
    shutil.copy(cluster / "a" / "node.key", d / "node.key")
    assert names(pd.evaluate()) == ["b", "c"]


def test_our_own_record_is_skipped_even_if_pinned(cluster: Path) -> None:
    shutil.copy(cluster / "a" / "node.crt", cluster / "a" / "trusted" / "self.crt")
    pd = directory(cluster, "a")
    pd.update(records(cluster))
    assert names(pd.evaluate()) == ["b", "c"]


def test_is_peer_rechecks_pins(cluster: Path) -> None:
    pd = directory(cluster, "a")
    pd.update(records(cluster))
    b = next(p for p in pd.evaluate().values() if p.node_id == "b")
    assert pd.is_peer(b)
    (cluster / "a" / "trusted" / "b.crt").unlink()
    assert not pd.is_peer(b)


def test_select_peers_dedups_fingerprints_and_defaults_the_port() -> None:
    fp = "cd" * 32
    recs = msgspec.convert(
        [node(nodeId="x", fingerprint=fp), node(nodeId="y", fingerprint=fp)], list[NodeRecord]
    )
    no_port = msgspec.convert({k: v for k, v in node().items() if k != "port"}, NodeRecord)
    peers = select_peers([*recs, no_port], "00" * 32, frozenset({fp, no_port.fingerprint}))
    assert [p.node_id for p in peers.values()] == ["x", "node-b"]
    assert peers[no_port.fingerprint].port == 14320
    assert select_peers(recs, None, frozenset({fp})) == {}


def test_diff() -> None:
    a, b, c = (Peer(n, "h", 1, n * 64) for n in "abc")
    moved = Peer("b", "h2", 2, "b" * 64)
    changes = diff({p.fingerprint: p for p in (a, b)}, {p.fingerprint: p for p in (moved, c)})
    assert changes.added == [c] and changes.removed == [a] and changes.changed == [(b, moved)]
    assert not diff({a.fingerprint: a}, {a.fingerprint: a})
