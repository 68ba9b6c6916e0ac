# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias
from msgspec import Meta, Struct, UNSET, UnsetType
from . import jsonrpc_schema, node_record_schema, workload_info_schema


class ManagerStatus(Struct, tag_field="method", tag="manager:status"):
    """
    Broker to manager request 'manager:status' (it must carry an id: without one it is an invalid notification, which gets no answer) and its result: what an operator needs to see whether this node relays: identity, the bound port, each peer's link and queue, and counters since start.
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


Count: TypeAlias = Annotated[
    int,
    Meta(
        description="A counter or a gauge: an integer from 0 to 2^53-1, the largest integer that every language's JSON number type holds exactly.",
        ge=0,
        le=9007199254740991,
    ),
]
"""
A counter or a gauge: an integer from 0 to 2^53-1, the largest integer that every language's JSON number type holds exactly.
"""


class FastPaths(Struct):
    """
    Which fast paths that reach into another library's internals are on (true) or off (false: the public path, slower, with the same behaviour), as checked once at start. StatusResult.fastPaths since 1.3.0: optional in the schema, always sent by a 1.3 manager.
    """

    opensslDirect: Annotated[
        bool,
        Meta(
            description="TLS records go through OpenSSL's cffi binding, past pyOpenSSL's per-call wrappers."
        ),
    ]
    """
    TLS records go through OpenSSL's cffi binding, past pyOpenSSL's per-call wrappers.
    """
    loopRunQueue: Annotated[
        bool,
        Meta(
            description="Writes are gathered at the end of the event loop's batch of ready callbacks (read from the loop's run queue)."
        ),
    ]
    """
    Writes are gathered at the end of the event loop's batch of ready callbacks (read from the loop's run queue).
    """
    transportReadSize: Annotated[
        bool,
        Meta(
            description="Reads stay under the allocator's mmap threshold (the transports' read size is set)."
        ),
    ]
    """
    Reads stay under the allocator's mmap threshold (the transports' read size is set).
    """


Port: TypeAlias = Annotated[
    int,
    Meta(
        description="The bound inter-node port (the real one when --port 0 was given, never 0); null when not listening.",
        ge=1,
        le=65535,
    ),
]
"""
The bound inter-node port (the real one when --port 0 was given, never 0); null when not listening.
"""


class CapacityShortfall(Struct):
    """
    A limit that caps this node below its current member count (the certificates pinned in trusted/): the full mesh needs per member a handshake slot and a listen backlog entry (every member may reconnect in the same second), two inbound connections (its link, and its old one while a reconnect overlaps it) and descriptors for both directions. key names what raises it: a configuration key (http.max_unauthenticated_connections, http.max_connections, http.listen_backlog) or a system setting (RLIMIT_NOFILE, net.core.somaxconn). StatusResult.capacity since 1.3.0: optional in the schema, so that a status from a 1.2 manager stays valid; a 1.3 manager always sends it.
    """

    key: Annotated[
        str,
        Meta(
            description="The configuration key or system setting that raises the limit."
        ),
    ]
    """
    The configuration key or system setting that raises the limit.
    """
    limit: Annotated[Count, Meta(description="The limit in force.")]
    """
    The limit in force.
    """
    needed: Annotated[Count, Meta(description="What the current member count needs.")]
    """
    What the current member count needs.
    """
    members: Annotated[
        Count,
        Meta(
            description="The member count it was computed for (certificates pinned now)."
        ),
    ]
    """
    The member count it was computed for (certificates pinned now).
    """


class ChannelCounters(Struct):
    """
    One channel's frames: received (framesIn), sent (framesOut), and the outcome of each received frame. framesIn is at least applied + duplicate + stale + suppressed + invalid; the rest are frames with no such outcome (nodes:update, manager:status).
    """

    framesIn: Annotated[
        Count,
        Meta(
            description="Frames received on this channel (each batch element counts; a line over the frame limit or a refused batch counts once)."
        ),
    ]
    """
    Frames received on this channel (each batch element counts; a line over the frame limit or a refused batch counts once).
    """
    framesOut: Annotated[
        Count,
        Meta(
            description="broker: lines written to the broker (responses, batch answers and notifications). peer: frames relayed toward the peers, each once however many peers there are (each peer's delivery is in PeerStatus.sent)."
        ),
    ]
    """
    broker: lines written to the broker (responses, batch answers and notifications). peer: frames relayed toward the peers, each once however many peers there are (each peer's delivery is in PeerStatus.sent).
    """
    applied: Annotated[
        Count,
        Meta(
            description="Events and removals received on this channel that changed the table."
        ),
    ]
    """
    Events and removals received on this channel that changed the table.
    """
    duplicate: Annotated[
        Count,
        Meta(
            description="Events and removals received on this channel and collapsed as duplicates."
        ),
    ]
    """
    Events and removals received on this channel and collapsed as duplicates.
    """
    stale: Annotated[
        Count,
        Meta(
            description="Events received on this channel older than the newest seen for their workload."
        ),
    ]
    """
    Events received on this channel older than the newest seen for their workload.
    """
    suppressed: Annotated[
        Count,
        Meta(
            description="Events received on this channel for removed (tombstoned) workloads (outcome removed)."
        ),
    ]
    """
    Events received on this channel for removed (tombstoned) workloads (outcome removed).
    """
    invalid: Annotated[
        Count,
        Meta(
            description="Frames received on this channel and refused with a JSON-RPC error or dropped as invalid notifications."
        ),
    ]
    """
    Frames received on this channel and refused with a JSON-RPC error or dropped as invalid notifications.
    """


class PeerStatus(Struct):
    """
    One peer's outbound link: where it is, whether it is connected, and what happened to the frames queued for it.
    """

    nodeId: Annotated[str, Meta(description="The peer's node id, from its NodeRecord.")]
    """
    The peer's node id, from its NodeRecord.
    """
    address: Annotated[
        str, Meta(description="The address dialled, from its NodeRecord.")
    ]
    """
    The address dialled, from its NodeRecord.
    """
    port: Annotated[
        int, Meta(description="The port dialled, from its NodeRecord.", ge=1, le=65535)
    ]
    """
    The port dialled, from its NodeRecord.
    """
    connected: Annotated[
        bool, Meta(description="Whether a connection to the peer is up now.")
    ]
    """
    Whether a connection to the peer is up now.
    """
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
    queueDepth: Annotated[
        Count, Meta(description="Frames waiting to be sent to the peer now (a gauge).")
    ]
    """
    Frames waiting to be sent to the peer now (a gauge).
    """
    sent: Annotated[Count, Meta(description="Frames the peer accepted.")]
    """
    Frames the peer accepted.
    """
    retried: Annotated[
        Count, Meta(description="Send attempts repeated after a failure.")
    ]
    """
    Send attempts repeated after a failure.
    """
    coalesced: Annotated[
        Count,
        Meta(
            description="Queued events replaced by a newer event of the same workload."
        ),
    ]
    """
    Queued events replaced by a newer event of the same workload.
    """
    dropped: Annotated[
        Count,
        Meta(
            description="Frames dropped (queue full after coalescing, retries exhausted, or refused with a 4xx)."
        ),
    ]
    """
    Frames dropped (queue full after coalescing, retries exhausted, or refused with a 4xx).
    """
    lastError: (
        Annotated[
            str,
            Meta(
                description="The last failure on this link, in words; null if there has been none."
            ),
        ]
        | None
    )
    """
    The last failure on this link, in words; null if there has been none.
    """
    lastErrorAt: (
        Annotated[
            workload_info_schema.EpochMillis,
            Meta(
                description="When lastError happened, in epoch milliseconds; null if there has been none."
            ),
        ]
        | None
    )
    """
    When lastError happened, in epoch milliseconds; null if there has been none.
    """
    contractVersion: (
        Annotated[
            str,
            Meta(
                description="The contract version the peer last said it speaks (the nvpair-contract-version header of its requests or responses); null until it has said one, or when it sends none (nvpair-wm 0.1.0). Optional in the schema (added in 1.2.0), always sent by a 1.2 manager."
            ),
        ]
        | None
        | UnsetType
    ) = UNSET
    """
    The contract version the peer last said it speaks (the nvpair-contract-version header of its requests or responses); null until it has said one, or when it sends none (nvpair-wm 0.1.0). Optional in the schema (added in 1.2.0), always sent by a 1.2 manager.
    """
    softwareVersion: (
        Annotated[
            str,
            Meta(
                description='The nvpair-wm version the peer last said it runs (the user-agent of its requests, the server of its responses: nvpair-wm/X.Y.Z); "unknown" for an nvpair-wm that names no version (0.1.0); null until it has said, or when the peer is not nvpair-wm. Optional in the schema (added in 1.2.0), always sent by a 1.2 manager.'
            ),
        ]
        | None
        | UnsetType
    ) = UNSET
    """
    The nvpair-wm version the peer last said it runs (the user-agent of its requests, the server of its responses: nvpair-wm/X.Y.Z); "unknown" for an nvpair-wm that names no version (0.1.0); null until it has said, or when the peer is not nvpair-wm. Optional in the schema (added in 1.2.0), always sent by a 1.2 manager.
    """
    state: (
        Annotated[
            Literal["connected", "connecting", "retrying", "given-up", "refused"],
            Meta(
                description="What the link is doing now: connected (a connection is up), connecting (no failure since the last success), retrying (failures counted, backing off before the next attempt), given-up (retries exhausted: its queue was dropped and it is probed every broadcast.retry_max_delay; the peer is resynchronised by a snapshot once it answers), refused (the peer speaks another major contract version: probed every broadcast.version_probe_interval). Optional in the schema (added in 1.3.0), always sent by a 1.3 manager."
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    What the link is doing now: connected (a connection is up), connecting (no failure since the last success), retrying (failures counted, backing off before the next attempt), given-up (retries exhausted: its queue was dropped and it is probed every broadcast.retry_max_delay; the peer is resynchronised by a snapshot once it answers), refused (the peer speaks another major contract version: probed every broadcast.version_probe_interval). Optional in the schema (added in 1.3.0), always sent by a 1.3 manager.
    """
    lastSuccessAt: (
        Annotated[
            workload_info_schema.EpochMillis,
            Meta(
                description="When the peer last accepted a batch (2xx), in epoch milliseconds; null if it has not yet. Optional in the schema (added in 1.3.0), always sent by a 1.3 manager."
            ),
        ]
        | None
        | UnsetType
    ) = UNSET
    """
    When the peer last accepted a batch (2xx), in epoch milliseconds; null if it has not yet. Optional in the schema (added in 1.3.0), always sent by a 1.3 manager.
    """
    givenUp: (
        Annotated[
            Count,
            Meta(
                description="How many times the link gave up (retries exhausted: its queue dropped, see state given-up). Optional in the schema (added in 1.3.0), always sent by a 1.3 manager."
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    How many times the link gave up (retries exhausted: its queue dropped, see state given-up). Optional in the schema (added in 1.3.0), always sent by a 1.3 manager.
    """


class JournalStatus(Struct):
    """
    The journal (what this node originated, kept in its cluster directory so that a restart forgets nothing): state is off (only by configuration: no cluster directory, or journal.enabled false), healthy, or failing (opening it, a write, an fsync, a rename or a compaction's install failed, at start or later: the node retries with backoff and rewrites the whole current state once writing works again; a crash before that loses what the peers have not received). StatusResult.journal since 1.2.0: optional in the schema, so that a status from a 1.1 manager stays valid; a 1.2 manager always sends it.
    """

    state: Literal["off", "healthy", "failing"]
    failingSince: (
        Annotated[
            workload_info_schema.EpochMillis,
            Meta(
                description="When the journal started failing (epoch milliseconds); null unless failing."
            ),
        ]
        | None
    )
    """
    When the journal started failing (epoch milliseconds); null unless failing.
    """
    lastError: (
        Annotated[
            str,
            Meta(
                description="What failed last (the operation and the system's reason, e.g. 'write to: No space left on device'); null unless failing."
            ),
        ]
        | None
    )
    """
    What failed last (the operation and the system's reason, e.g. 'write to: No space left on device'); null unless failing.
    """


class ConfigStatus(Struct):
    """
    The running configuration: generation counts the configurations the node has run with (1 at start, one more for each reload that applied a change: SIGHUP re-reads the --config file), loadedAt is when the current one was loaded. StatusResult.config since 1.3.0: optional in the schema, so that a status from a 1.2 manager stays valid; a 1.3 manager always sends it.
    """

    generation: Annotated[
        int,
        Meta(
            description="1 at start, one more for each reload that changed something.",
            ge=1,
            le=9007199254740991,
        ),
    ]
    """
    1 at start, one more for each reload that changed something.
    """
    loadedAt: Annotated[
        workload_info_schema.EpochMillis,
        Meta(description="When this configuration was loaded (epoch milliseconds)."),
    ]
    """
    When this configuration was loaded (epoch milliseconds).
    """


class FramesByChannel(Struct):
    """
    The frames of each channel since the process started, in and out, and what became of those received: broker is the local channel (frames from the broker, lines written to it), peer the inter-node channel (frames from peers, each batch element counting; frames relayed toward the peers). Counters.byChannel since 1.1.0: optional in the schema, so that a status from a 1.0 manager stays valid; a 1.1 manager always sends it.
    """

    broker: ChannelCounters
    peer: ChannelCounters


class Counters(Struct):
    """
    Monotonic counters since the process started, except the gauges workloads, tombstones and brokerQueue, which say how many there are now.
    """

    framesIn: Annotated[
        Count,
        Meta(
            description="Frames received on either channel (each batch element counts); byChannel splits it."
        ),
    ]
    """
    Frames received on either channel (each batch element counts); byChannel splits it.
    """
    framesOut: Annotated[Count, Meta(description="Frames written to the broker.")]
    """
    Frames written to the broker.
    """
    invalid: Annotated[
        Count,
        Meta(
            description="Frames refused with a JSON-RPC error or dropped as invalid notifications."
        ),
    ]
    """
    Frames refused with a JSON-RPC error or dropped as invalid notifications.
    """
    duplicates: Annotated[Count, Meta(description="Events collapsed as duplicates.")]
    """
    Events collapsed as duplicates.
    """
    stale: Annotated[
        Count, Meta(description="Events older than the newest seen for their workload.")
    ]
    """
    Events older than the newest seen for their workload.
    """
    suppressed: Annotated[
        Count, Meta(description="Events for removed (tombstoned) workloads.")
    ]
    """
    Events for removed (tombstoned) workloads.
    """
    evicted: Annotated[
        Count, Meta(description="Entries evicted by the hard cap before their TTL.")
    ]
    """
    Entries evicted by the hard cap before their TTL.
    """
    workloads: Annotated[Count, Meta(description="Workloads tracked now.")]
    """
    Workloads tracked now.
    """
    tombstones: Annotated[Count, Meta(description="Tombstones held now.")]
    """
    Tombstones held now.
    """
    brokerQueue: Annotated[
        Count, Meta(description="Frames waiting to be written to the broker now.")
    ]
    """
    Frames waiting to be written to the broker now.
    """
    byChannel: FramesByChannel | UnsetType = UNSET


class StatusResult(Struct):
    """
    The result of manager:status: this node's version, identity and bound port, one PeerStatus per current peer, the counters, the journal's state, the running configuration's generation, which fast paths are on, and the limits that cap it below its member count.
    """

    version: Annotated[str, Meta(description="nvpair-wm version (as in ready).")]
    """
    nvpair-wm version (as in ready).
    """
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
            node_record_schema.Fingerprint,
            Meta(
                description="This node's certificate fingerprint (the same Fingerprint as in NodeRecord, by which peers pin it); null without identity."
            ),
        ]
        | None
    )
    """
    This node's certificate fingerprint (the same Fingerprint as in NodeRecord, by which peers pin it); null without identity.
    """
    port: (
        Annotated[
            Port,
            Meta(
                description="The bound inter-node port (the real one when --port 0 was given, never 0); null when not listening."
            ),
        ]
        | None
    )
    """
    The bound inter-node port (the real one when --port 0 was given, never 0); null when not listening.
    """
    peers: Annotated[list[PeerStatus], Meta(description="One entry per current peer.")]
    """
    One entry per current peer.
    """
    counters: Counters
    journal: JournalStatus | UnsetType = UNSET
    config: ConfigStatus | UnsetType = UNSET
    fastPaths: FastPaths | UnsetType = UNSET
    capacity: (
        Annotated[
            list[CapacityShortfall],
            Meta(
                description="Each limit that caps this node below its member count, with the key that raises it; empty when none does (the defaults follow the member count)."
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    Each limit that caps this node below its member count, with the key that raises it; empty when none does (the defaults follow the member count).
    """


class StatusResponse(Struct):
    """
    Answer to manager:status: the SuccessResponse whose result is a StatusResult.
    """

    jsonrpc: Literal["2.0"]
    id: jsonrpc_schema.RequestId
    result: StatusResult
