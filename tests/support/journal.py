"""A dispatcher and its outbound events for journal tests: the records a broker's lines become."""

from __future__ import annotations

from typing import Any

from nvpair_wm.dedup import TableLimits, WorkloadTable
from nvpair_wm.dispatch import Dispatcher
from nvpair_wm.events import Outbound
from tests.support.frames import line

LIMITS = TableLimits(
    terminal_ttl=10.0, live_ttl=100.0, tombstone_ttl=20.0, max_workloads=50, max_tombstones=50
)
T0 = 1_800_000_000.0  # a unix time


def dispatcher(table: WorkloadTable) -> Dispatcher:
    def no_status() -> Any:
        raise AssertionError("not asked")

    return Dispatcher(table, no_status, clock=lambda: 1000.0)


def broker_line(disp: Dispatcher, frame: dict[str, Any]) -> list[Outbound]:
    """One broker line through the real dispatcher: what the node publishes (and journals)."""
    return disp.local(line(frame)).outbound


def outbounds(disp: Dispatcher, *frames: dict[str, Any]) -> list[Outbound]:
    return [out for frame in frames for out in broker_line(disp, frame)]
