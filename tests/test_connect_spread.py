"""Links made together (one ``nodes:update`` naming many members) make their first connection
at random moments over ``broadcast.connect_spread_per_link`` per link, not all in one tick:
a thousand handshakes and snapshots at once would hold the node's loop for seconds.

Real sockets: one loopback listener per member records when the broadcaster's first TCP
connection arrives (the listeners speak no TLS, so every handshake fails; only the first
arrival at each is counted)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nvpair_wm_schema.node_record_schema import NodeRecord

from nvpair_wm.broadcaster import Broadcaster
from nvpair_wm.clusterdir import cert_fingerprint, init_cluster, make_self_signed
from nvpair_wm.dedup import WorkloadTable
from nvpair_wm.outbox import BroadcastLimits
from nvpair_wm.pins import Identity, PinSet

MEMBERS = 40
SPREAD_PER_LINK = 0.05  # s: 2 s over 40 links, far above what starting 40 connects takes


async def _first_arrivals(
    node: Path, fingerprints: list[str], limits: BroadcastLimits
) -> list[float]:
    loop = asyncio.get_running_loop()
    first: dict[int, float] = {}
    servers = []
    everyone = asyncio.Event()

    def arrived(i: int) -> None:
        first.setdefault(i, loop.time())
        if len(first) == len(fingerprints):
            everyone.set()

    for i in range(len(fingerprints)):

        def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter, i: int = i) -> None:
            arrived(i)
            w.close()

        servers.append(await asyncio.start_server(on_connect, "127.0.0.1", 0))
    records = [
        NodeRecord(
            nodeId=f"m-{i}",
            address="127.0.0.1",
            port=srv.sockets[0].getsockname()[1],
            fingerprint=fp,
        )
        for i, (srv, fp) in enumerate(zip(servers, fingerprints, strict=True))
    ]
    bc = Broadcaster(Identity(node), PinSet(node / "trusted"), WorkloadTable().originated, limits)
    try:
        await bc.start()
        t0 = loop.time()
        bc.update_nodes(records)
        async with asyncio.timeout(30):
            await everyone.wait()
        return sorted(t - t0 for t in first.values())
    finally:
        await bc.close(0)
        for srv in servers:
            srv.close()


def test_links_made_together_spread_their_first_connections(tmp_path: Path) -> None:
    node = init_cluster(tmp_path / "cluster", ["node-a", "node-b"])["node-a"]
    fingerprints = []
    for i in range(MEMBERS):
        cert, _ = make_self_signed(f"m-{i}")
        (node / "trusted" / f"m-{i}.crt").write_bytes(cert)
        fingerprints.append(cert_fingerprint(cert))
    limits = BroadcastLimits(connect_spread_per_link=SPREAD_PER_LINK, retry_base=5.0)
    at = asyncio.run(_first_arrivals(node, fingerprints, limits))
    window = SPREAD_PER_LINK * MEMBERS
    assert at[-1] <= window + 1.0, at  # within the spread (and a second of a loaded machine)
    assert at[-1] - at[0] >= window / 2, at  # not in one tick: spread over the window
    halves = sum(1 for t in at if t < window / 2)
    assert 5 <= halves <= MEMBERS - 5, at  # roughly uniform, not bunched at either end
