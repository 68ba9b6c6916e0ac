"""Lifecycle method → workload state, with everything else passed through (sans-IO).

The manager is a relay: the only field it sets is ``state``, from the method. Absent fields stay
absent (``msgspec.UNSET``), nulls stay null, and unknown fields were already dropped by the
generated types, which are the allow-list of what leaves this process.
"""

from __future__ import annotations

from typing import Any, Final

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


class Forwarded(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A peer's event or removal that this node forwarded to its broker: the workload's key,
    the seq of the upsert and its state (``"removed"`` and seq 0 for a removal; ``run`` is
    ``""`` when it covers every run). The journal keeps these, so that a restarted node still
    knows what its broker was told (a struct: made in C on every peer request, and written to
    the journal as a msgpack array in one call)."""

    origin: str
    wid: str
    run: str
    seq: int
    state: str


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


_MARK: Final[Any] = 918273645  # stands for a WorkloadInfo in the frames _around encodes


def _around(frame: object) -> tuple[bytes, bytes]:
    """What the encoding of ``frame`` holds before and after its ``workloadInfo``, found by
    encoding the frame with :data:`_MARK` in its place."""
    head, found, tail = msgspec.json.encode(frame).partition(str(_MARK).encode())
    if not found:  # pragma: no cover - the generated types changed shape
        raise RuntimeError(f"no workloadInfo marker in {frame!r}")
    return head, tail


# The compact JSON of a WorkloadInfo (one encoder, kept: no encoder made per call).
encode_info: Final = msgspec.json.Encoder().encode
UPSERT_HEAD, _UPSERT_TAIL = _around(
    WorkloadsUpsert(jsonrpc="2.0", params=UpsertParams(workloadInfo=_MARK))
)
UPSERT_LINE_TAIL: Final = _UPSERT_TAIL + b"\n"


def _relay_heads() -> dict[type[LifecycleFrame], int]:
    heads: dict[type[LifecycleFrame], int] = {}
    for typ in LIFECYCLE_TYPES:
        head, tail = _around(typ(jsonrpc="2.0", params=LifecycleParams(workloadInfo=_MARK)))
        if tail == _UPSERT_TAIL:
            heads[typ] = len(head)
    return heads


# Per lifecycle type, the length of what its compact encoding (as a notification: no id) holds
# before its workloadInfo; after it, it ends as an upsert does.
RELAY_HEAD: Final = _relay_heads()


def upsert_line(info: WorkloadInfo) -> bytes:
    """The ``workloads:upsert`` line for ``info``: the bytes of
    ``codec.encode_line(upsert(info))`` with one encode and no frame objects."""
    return UPSERT_HEAD + encode_info(info) + UPSERT_LINE_TAIL


def upsert_line_from(frame_type: type[LifecycleFrame], encoded: bytes) -> bytes | None:
    """The ``workloads:upsert`` line for a lifecycle notification of ``frame_type`` whose
    compact encoding is ``encoded`` and whose workloadInfo already has the state its method
    sets: that workloadInfo's bytes are reused as they are (None when the type's encoding has
    another shape)."""
    head = RELAY_HEAD.get(frame_type)
    if head is None:
        return None
    return UPSERT_HEAD + encoded[head:] + b"\n"
