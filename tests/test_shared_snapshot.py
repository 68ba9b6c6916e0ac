"""Links that start snapshots before what this node originated changes share one walk of the
table (``sync.SharedOriginated``): with a thousand members reconnecting together, a walk per
link would cost a thousand walks of a table that grows with the member count."""

from __future__ import annotations

from nvpair_wm_schema.manager_status_schema import StatusResult

from bench.members_sim import event_frame
from nvpair_wm.dedup import Removal, WorkloadTable
from nvpair_wm.dispatch import Dispatcher, Outbound
from nvpair_wm.outbox import BroadcastLimits, PeerOutbox
from nvpair_wm.sync import SharedOriginated


def _no_status() -> StatusResult:
    raise AssertionError("manager:status is not asked here")


def test_links_share_one_walk_until_the_node_originates_again() -> None:
    table = WorkloadTable()
    dispatcher = Dispatcher(table, _no_status)
    for k in range(50):
        dispatcher.peer(event_frame(f"remote-{k}", "member-1"))
    for k in range(3):
        dispatcher.local(event_frame(f"own-{k}", "node"))
    walks = 0

    def counted() -> tuple[list[Outbound], list[Removal]]:
        nonlocal walks
        walks += 1
        return table.originated()

    shared = SharedOriginated(counted)
    boxes = [PeerOutbox(f"m-{i}", BroadcastLimits(), shared) for i in range(100)]
    for box in boxes:
        box.connected()
        batch = box.next_batch()
        assert batch is not None and len(batch.snapshot) == 3  # our own three, no remote one
    assert walks == 1

    dispatcher.local(event_frame("own-3", "node"))
    shared.changed()  # what Node.publish does before the links see the new event
    late = PeerOutbox("late", BroadcastLimits(), shared)
    late.connected()
    batch = late.next_batch()
    assert batch is not None and len(batch.snapshot) == 4 and walks == 2
