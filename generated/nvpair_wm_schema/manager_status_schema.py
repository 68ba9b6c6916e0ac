# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias
from msgspec import Meta, Struct, UNSET, UnsetType
from . import jsonrpc_schema


class ManagerStatus(Struct, tag_field="method", tag="manager:status"):
    """
    Broker to manager request 'manager:status' (it must carry an id) and its result: what an operator needs to see whether this node relays: identity, the bound port, each peer's link and queue, and counters since start.
    """

    jsonrpc: Literal["2.0"]
    id: jsonrpc_schema.RequestId
    params: (
        Annotated[
            dict[str, Any],
            Meta(
                description="No parameters; an empty object may be sent.", max_length=0
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    No parameters; an empty object may be sent.
    """


class Counters(Struct):
    """
    Monotonic counters since the process started, except the gauges workloads, tombstones and brokerQueue.
    """

    framesIn: Annotated[
        int,
        Meta(
            description="Frames received on either channel (each batch element counts).",
            ge=0,
        ),
    ]
    """
    Frames received on either channel (each batch element counts).
    """
    framesOut: Annotated[int, Meta(description="Frames written to the broker.", ge=0)]
    """
    Frames written to the broker.
    """
    invalid: Annotated[
        int,
        Meta(
            description="Frames refused with a JSON-RPC error or dropped as invalid notifications.",
            ge=0,
        ),
    ]
    """
    Frames refused with a JSON-RPC error or dropped as invalid notifications.
    """
    duplicates: Annotated[
        int, Meta(description="Events collapsed as duplicates.", ge=0)
    ]
    """
    Events collapsed as duplicates.
    """
    stale: Annotated[
        int,
        Meta(description="Events older than the newest seen for their workload.", ge=0),
    ]
    """
    Events older than the newest seen for their workload.
    """
    suppressed: Annotated[
        int, Meta(description="Events for removed (tombstoned) workloads.", ge=0)
    ]
    """
    Events for removed (tombstoned) workloads.
    """
    evicted: Annotated[
        int, Meta(description="Entries evicted by the hard cap before their TTL.", ge=0)
    ]
    """
    Entries evicted by the hard cap before their TTL.
    """
    workloads: Annotated[int, Meta(description="Workloads tracked now.", ge=0)]
    """
    Workloads tracked now.
    """
    tombstones: Annotated[int, Meta(description="Tombstones held now.", ge=0)]
    """
    Tombstones held now.
    """
    brokerQueue: Annotated[
        int, Meta(description="Frames waiting to be written to the broker now.", ge=0)
    ]
    """
    Frames waiting to be written to the broker now.
    """


LastErrorAt: TypeAlias = Annotated[
    int, Meta(description="Epoch milliseconds of lastError.", ge=0)
]
"""
Epoch milliseconds of lastError.
"""


class PeerStatus(Struct):
    """
    One peer's outbound link.
    """

    nodeId: str
    address: str
    port: Annotated[int, Meta(ge=0, le=65535)]
    connected: bool
    protocol: (
        Annotated[
            Literal["h2", "http/1.1"],
            Meta(
                description="Negotiated protocol of the live connection, null when not connected."
            ),
        ]
        | None
    )
    """
    Negotiated protocol of the live connection, null when not connected.
    """
    queueDepth: Annotated[int, Meta(ge=0)]
    sent: Annotated[int, Meta(description="Frames the peer accepted.", ge=0)]
    """
    Frames the peer accepted.
    """
    retried: Annotated[
        int, Meta(description="Send attempts repeated after a failure.", ge=0)
    ]
    """
    Send attempts repeated after a failure.
    """
    coalesced: Annotated[
        int,
        Meta(
            description="Queued events replaced by a newer event of the same workload.",
            ge=0,
        ),
    ]
    """
    Queued events replaced by a newer event of the same workload.
    """
    dropped: Annotated[
        int,
        Meta(
            description="Frames dropped (queue full after coalescing, retries exhausted, or refused with a 4xx).",
            ge=0,
        ),
    ]
    """
    Frames dropped (queue full after coalescing, retries exhausted, or refused with a 4xx).
    """
    lastError: str | None
    lastErrorAt: (
        Annotated[LastErrorAt, Meta(description="Epoch milliseconds of lastError.")]
        | None
    )
    """
    Epoch milliseconds of lastError.
    """


Port: TypeAlias = Annotated[
    int,
    Meta(
        description="The bound inter-node port (the real one when --port 0 was given); null when not listening.",
        ge=0,
        le=65535,
    ),
]
"""
The bound inter-node port (the real one when --port 0 was given); null when not listening.
"""


class StatusResult(Struct):
    version: str
    hasIdentity: Annotated[
        bool,
        Meta(
            description="Whether cluster-dir holds a usable node.crt/node.key; without one the node neither serves nor sends inter-node traffic."
        ),
    ]
    """
    Whether cluster-dir holds a usable node.crt/node.key; without one the node neither serves nor sends inter-node traffic.
    """
    fingerprint: (
        Annotated[
            str,
            Meta(
                description="SHA-256 of this node's certificate, null without identity."
            ),
        ]
        | None
    )
    """
    SHA-256 of this node's certificate, null without identity.
    """
    port: (
        Annotated[
            Port,
            Meta(
                description="The bound inter-node port (the real one when --port 0 was given); null when not listening."
            ),
        ]
        | None
    )
    """
    The bound inter-node port (the real one when --port 0 was given); null when not listening.
    """
    peers: list[PeerStatus]
    counters: Counters


class StatusResponse(Struct):
    jsonrpc: Literal["2.0"]
    id: jsonrpc_schema.RequestId
    result: StatusResult
