"""Fifty simulated members around one real node (``bench/members_sim.py``): every member's event
reaches the node's broker once, and every local event reaches every member once.

Each member has its own certificate pinned by the node, its own listener and its own
connection, and sends one request per event as a real member does; the node is a real
``nvpair-wm`` subprocess with the test as its broker. The simulator's waits are woken by what
arrives (a request at a member, a line from the node) and bounded.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.members import _broadcast, _received
from bench.members_sim import Cluster

MEMBERS = 50
EVENTS_IN = 500  # from the members, in turn, at RATE events/s
RATE = 1_000
LOCAL = 10  # from the broker, each to every member


async def _scenario(root: Path) -> None:
    cluster = Cluster.create(root, MEMBERS)
    try:
        await cluster.listen()
        await cluster.proc.start()
        await cluster.nodes_update()
        await cluster.until(lambda: cluster.links_up() == MEMBERS, 30, "a link to every member")
        cluster.start_clients()
        await cluster.until(
            lambda: cluster.clients_up() == MEMBERS, 30, "every member connected to the node"
        )
        status = await cluster.proc.request("manager:status")
        assert len(status["peers"]) == MEMBERS
        assert all(p["connected"] and p["protocol"] == "http/1.1" for p in status["peers"])

        received = await _received(cluster, EVENTS_IN, RATE)
        sent = {f"{cluster.members[k % MEMBERS].name}-e{k}" for k in range(EVENTS_IN)}
        await cluster.proc.request("manager:status")  # every upsert before it has been read
        assert dict(cluster.proc.upserts) == dict.fromkeys(sent, 1), "each event once at the broker"
        assert received["broker_missing"] == 0
        assert cluster.statuses.keys() == {202}, cluster.statuses

        broadcast = await _broadcast(cluster, LOCAL)
        local = {(f"local-{j}", 1) for j in range(LOCAL)}
        for m in cluster.members:
            assert dict(m.received) == dict.fromkeys(local, 1), f"{m.name}: {m.received}"
            assert not m.problems, m.problems
        # An idle link sends each event alone: one request per event and member.
        assert broadcast["requests"] == LOCAL * MEMBERS
        assert not cluster.proc.upserts.keys() - sent, "local events are never echoed back"
    finally:
        await cluster.close()


def test_fifty_members_every_event_once_at_the_broker_and_at_every_member(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_scenario(tmp_path), 90))
