"""Lifecycle method → workload state, with everything else passed through (sans-IO).

The manager is a relay: the only field it sets is ``state``, from the method. Absent fields stay
absent (``msgspec.UNSET``), nulls stay null, and unknown fields were already dropped by the
generated types, which are the allow-list of what leaves this process.
"""

from __future__ import annotations

from typing import Final

import msgspec
from nvpair_wm_schema.workload_events_schema import (
    LifecycleParams,
    WorkloadCancelled,
    WorkloadCompleted,
    WorkloadErrored,
    WorkloadStarted,
    WorkloadSubmitted,
)
from nvpair_wm_schema.workload_info_schema import WorkloadInfo, WorkloadState
from nvpair_wm_schema.workloads_upsert_schema import UpsertParams, WorkloadsUpsert

LifecycleFrame = (
    WorkloadSubmitted | WorkloadStarted | WorkloadCompleted | WorkloadErrored | WorkloadCancelled
)
LIFECYCLE_TYPES: Final = (
    WorkloadSubmitted,
    WorkloadStarted,
    WorkloadCompleted,
    WorkloadErrored,
    WorkloadCancelled,
)

STATE_OF: Final[dict[type[LifecycleFrame], WorkloadState]] = {
    WorkloadSubmitted: "queued",
    WorkloadStarted: "running",
    WorkloadCompleted: "completed",
    WorkloadErrored: "failed",
    WorkloadCancelled: "cancelled",
}
FRAME_OF: Final[dict[str, type[LifecycleFrame]]] = {s: t for t, s in STATE_OF.items()}
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})


class Outbound(msgspec.Struct, frozen=True, gc=False):
    """A local event or removal, encoded once, on its way to every peer.

    ``key`` identifies the workload, so a broadcaster may replace a queued event by a newer one
    for the same workload (coalescing); ``seq`` orders them (a removal sorts after every event).
    The workload table keeps the newest one of each workload this node originated, ready to be
    replayed to a peer that (re)connects.

    Not tracked by the cyclic GC (``gc=False``: it holds a tuple of strings, a float and bytes,
    so it can be in no cycle): the table keeps one per workload originated here, hundreds of
    thousands on a busy node, which every full collection would otherwise traverse.
    """

    key: tuple[str, str, str]
    seq: float
    body: bytes


def translate(frame: LifecycleFrame) -> WorkloadInfo:
    """The workload as the broker should see it after this event."""
    info = frame.params.workloadInfo
    state = STATE_OF[type(frame)]
    if info.state == state:
        return info
    return msgspec.structs.replace(info, state=state)


def lifecycle_frame(info: WorkloadInfo) -> LifecycleFrame:
    """The lifecycle notification that reports ``info`` to a peer (its state picks the method)."""
    return FRAME_OF[info.state](jsonrpc="2.0", params=LifecycleParams(workloadInfo=info))


def upsert(info: WorkloadInfo) -> WorkloadsUpsert:
    return WorkloadsUpsert(jsonrpc="2.0", params=UpsertParams(workloadInfo=info))
