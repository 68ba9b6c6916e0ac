# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias
from msgspec import Meta, Struct, UNSET, UnsetType


Error: TypeAlias = Annotated[
    str,
    Meta(description="Normalized failure text; null unless failed.", max_length=4096),
]
"""
Normalized failure text; null unless failed.
"""


RequesterId: TypeAlias = Annotated[
    str,
    Meta(
        description="Optional client attribution. May be absent or null; the two are kept distinct.",
        max_length=256,
    ),
]
"""
Optional client attribution. May be absent or null; the two are kept distinct.
"""


WorkloadState: TypeAlias = Annotated[
    Literal["queued", "running", "completed", "failed", "cancelled"],
    Meta(
        description="Lifecycle state of a workload. On a lifecycle notification the manager overwrites it from the method: submitted→queued, started→running, completed→completed, errored→failed, cancelled→cancelled.",
        title="WorkloadState",
    ),
]
"""
Lifecycle state of a workload. On a lifecycle notification the manager overwrites it from the method: submitted→queued, started→running, completed→completed, errored→failed, cancelled→cancelled.
"""


EpochMillis: TypeAlias = Annotated[
    int,
    Meta(
        description="Milliseconds since 1970-01-01T00:00:00Z. Bounded by 2^53-1 so that every language's JSON number type holds it exactly.",
        ge=0,
        le=9007199254740991,
    ),
]
"""
Milliseconds since 1970-01-01T00:00:00Z. Bounded by 2^53-1 so that every language's JSON number type holds it exactly.
"""


Seq: TypeAlias = Annotated[
    int,
    Meta(
        description="Event counter from 1, bounded by 2^53-1.",
        ge=1,
        le=9007199254740991,
    ),
]
"""
Event counter from 1, bounded by 2^53-1.
"""


class WorkloadInfo(Struct):
    """
    One inference workload as the cluster sees it. The manager relays it opaquely: only 'state' is set by the manager (from the lifecycle method); every other field passes through exactly as received, an absent field stays absent and a null stays null. Unknown properties are accepted on input and dropped: this schema is the allow-list of what ever leaves a manager. Prompts, messages and response bodies are never part of this contract. Strings are sequences of Unicode scalar values (I-JSON, RFC 7493): a lone surrogate escape makes the frame unparseable. Integers may be written 1, 1.0 or 1e0 (JSON Schema's data model); senders should write them without a fraction or exponent.
    """

    id: Annotated[
        str,
        Meta(
            description="Workload identifier, unique only within one runId: engine facades count from 1 and restart at 1 when their proxy restarts.",
            max_length=256,
            min_length=1,
        ),
    ]
    """
    Workload identifier, unique only within one runId: engine facades count from 1 and restart at 1 when their proxy restarts.
    """
    model: Annotated[
        str, Meta(description="Model that was requested.", max_length=512, min_length=1)
    ]
    """
    Model that was requested.
    """
    engine: Annotated[
        str,
        Meta(
            description="Inference engine that serves the request.",
            max_length=128,
            min_length=1,
        ),
    ]
    """
    Inference engine that serves the request.
    """
    runId: Annotated[
        str,
        Meta(
            description="Nonce minted when the producing proxy process started. With id and seq it forms the deduplication key (runId, id, seq).",
            max_length=128,
            min_length=1,
        ),
    ]
    """
    Nonce minted when the producing proxy process started. With id and seq it forms the deduplication key (runId, id, seq).
    """
    state: WorkloadState
    originatedFrom: Annotated[
        str,
        Meta(
            description="Node id on which the request entered the cluster.",
            max_length=256,
            min_length=1,
        ),
    ]
    """
    Node id on which the request entered the cluster.
    """
    createdAt: Annotated[
        EpochMillis, Meta(description="Creation time, epoch milliseconds.")
    ]
    """
    Creation time, epoch milliseconds.
    """
    startedAt: (
        Annotated[
            EpochMillis,
            Meta(description="Start time, epoch milliseconds; null until started."),
        ]
        | None
    )
    """
    Start time, epoch milliseconds; null until started.
    """
    completedAt: (
        Annotated[
            EpochMillis,
            Meta(
                description="Completion time, epoch milliseconds; null until finished."
            ),
        ]
        | None
    )
    """
    Completion time, epoch milliseconds; null until finished.
    """
    error: (
        Annotated[
            Error, Meta(description="Normalized failure text; null unless failed.")
        ]
        | None
    )
    """
    Normalized failure text; null unless failed.
    """
    seq: Annotated[
        Seq,
        Meta(
            description="The producer's event counter for this workload, from 1. Part of the deduplication key, and the order: an event whose seq is lower than the newest seen for (runId, id) is stale and is not forwarded."
        ),
    ]
    """
    The producer's event counter for this workload, from 1. Part of the deduplication key, and the order: an event whose seq is lower than the newest seen for (runId, id) is stale and is not forwarded.
    """
    scheduledOn: (
        Annotated[
            str,
            Meta(
                description="Node id the workload was routed to. Absent (not null) until a target is chosen.",
                max_length=256,
                min_length=1,
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    Node id the workload was routed to. Absent (not null) until a target is chosen.
    """
    requesterId: (
        Annotated[
            RequesterId,
            Meta(
                description="Optional client attribution. May be absent or null; the two are kept distinct."
            ),
        ]
        | None
        | UnsetType
    ) = UNSET
    """
    Optional client attribution. May be absent or null; the two are kept distinct.
    """
