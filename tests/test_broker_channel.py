"""The broker channel in process: what one read from the broker becomes, and in what order.

Real parts: the dispatcher and workload table, a real pipe as the broker's end of stdout
(``FileWriter`` over it, as when stdout cannot be polled). The process-level behaviour of the
channel is in tests/test_local_channel.py; backpressure in tests/test_internode_e2e.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from typing import Any

from nvpair_wm_schema.manager_status_schema import StatusResult

from nvpair_wm.dedup import TableLimits, WorkloadTable
from nvpair_wm.dispatch import Dispatcher, Outbound
from nvpair_wm.local import BrokerChannel, BrokerQueue, BrokerReader, FileWriter
from tests.support.frames import event_frame, frame, line, node, status_result, workload


def test_one_read_is_published_once_and_its_replies_follow_in_order() -> None:
    """Three events, a status request and two more events, in one read: the events before the
    status request are published (journal and peers) before the status is computed, those
    after it in one more call; the replies reach the broker in order, written at once (no task
    runs), after what they answer was published."""
    order: list[str] = []
    published: list[list[Outbound]] = []
    holder: list[Dispatcher] = []

    def status() -> StatusResult:
        order.append(f"status after {sum(map(len, published))} published")
        return status_result(holder[0].counters)

    def publish(items: list[Outbound]) -> None:
        order.append(f"publish {len(items)}")
        published.append(items)

    async def main() -> bytes:
        disp = Dispatcher(WorkloadTable(TableLimits()), status)
        holder.append(disp)
        r, w = os.pipe()
        writer = FileWriter(io.FileIO(w, "wb"))
        reader = BrokerReader()
        channel = BrokerChannel(
            reader, writer, disp, BrokerQueue(), on_outbound=publish, on_nodes=lambda _: None
        )
        reading = asyncio.create_task(channel.read_until_eof())
        await asyncio.sleep(0)  # the task waits for data: what arrives is dispatched at once
        events = [event_frame("workload:submitted", workload(id=f"w{i}")) for i in range(5)]
        data = b"".join(
            [
                *(line(e) for e in events[:2]),
                line(event_frame("workload:started", workload(id="w2"), id=7)),
                line(frame("manager:status", id="s")),
                *(line(e) for e in events[3:]),
            ]
        )
        reader.feed_data(data)
        order.append("fed")
        out = os.read(r, 1 << 16)  # written in the feeding callback itself
        reader.feed_eof()
        await reading
        writer.close()
        os.close(r)
        return out

    out = asyncio.run(main())
    assert order == ["publish 3", "status after 3 published", "publish 2", "fed"]
    replies: list[Any] = [json.loads(x) for x in out.splitlines()]
    assert [r["id"] for r in replies] == [7, "s"]
    assert replies[0]["result"] == {"outcome": "applied"}
    assert [o.key[1] for batch in published for o in batch] == ["w0", "w1", "w2", "w3", "w4"]


def test_nodes_update_spelled_with_an_escape_still_sees_the_events_before_it() -> None:
    """Lines of one read are dispatched together unless one may change the set of peers: a
    ``nodes:update`` whose method is written with a JSON escape (no literal bytes to spot) is
    still applied after the events before it were published, and before those after it."""
    order: list[str] = []

    def publish(items: list[Outbound]) -> None:
        order.append("publish " + ",".join(o.key[1] for o in items))

    def nodes(records: list[Any]) -> None:
        order.append(f"nodes {len(records)}")

    async def main() -> None:
        disp = Dispatcher(WorkloadTable(TableLimits()), lambda: status_result(None))
        r, w = os.pipe()
        writer = FileWriter(io.FileIO(w, "wb"))
        reader = BrokerReader()
        channel = BrokerChannel(
            reader, writer, disp, BrokerQueue(), on_outbound=publish, on_nodes=nodes
        )
        reading = asyncio.create_task(channel.read_until_eof())
        await asyncio.sleep(0)
        update = line(frame("nodes:update", {"nodes": [node()]}))
        escaped = update.replace(b'"nodes:update"', b'"nodes\\u003aupdate"')
        assert escaped != update
        events = [line(event_frame("workload:submitted", workload(id=f"w{i}"))) for i in range(4)]
        reader.feed_data(b"".join([*events[:2], escaped, *events[2:]]))
        reader.feed_eof()
        await reading
        writer.close()
        os.close(r)

    asyncio.run(main())
    assert order == ["publish w0,w1", "nodes 1", "publish w2,w3"]
