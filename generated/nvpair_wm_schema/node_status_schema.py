# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, TypeAlias
from msgspec import Meta, Struct
from . import manager_status_schema, node_record_schema


Port: TypeAlias = Annotated[
    int,
    Meta(
        description="The bound inter-node port; null when not listening.",
        ge=1,
        le=65535,
    ),
]
"""
The bound inter-node port; null when not listening.
"""


class NodeStatus(Struct):
    """
    What a running node says of itself to an operator: the JSON of GET /status on its --metrics listener, which `nvpair-wm status --json` prints as it is. The members of a manager:status result (manager-status.schema.json), each required here, and the contract version the node speaks. Tools read it as part of the contract: a minor version may add members, and a reader ignores those it does not know.
    """

    version: Annotated[str, Meta(description="nvpair-wm version (as in ready).")]
    """
    nvpair-wm version (as in ready).
    """
    contractVersion: Annotated[
        str,
        Meta(
            description="The contract version the node speaks (as in ready), MAJOR.MINOR.PATCH.",
            pattern="^1\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)$",
        ),
    ]
    """
    The contract version the node speaks (as in ready), MAJOR.MINOR.PATCH.
    """
    hasIdentity: Annotated[
        bool,
        Meta(
            description="Whether the cluster directory holds a usable node.crt/node.key."
        ),
    ]
    """
    Whether the cluster directory holds a usable node.crt/node.key.
    """
    fingerprint: (
        Annotated[
            node_record_schema.Fingerprint,
            Meta(
                description="This node's certificate fingerprint; null without identity."
            ),
        ]
        | None
    )
    """
    This node's certificate fingerprint; null without identity.
    """
    port: (
        Annotated[
            Port,
            Meta(description="The bound inter-node port; null when not listening."),
        ]
        | None
    )
    """
    The bound inter-node port; null when not listening.
    """
    peers: Annotated[
        list[manager_status_schema.PeerStatus],
        Meta(
            description="One entry per current peer, ordered by nodeId: its link's state, versions, queue, last success, retries and give-ups."
        ),
    ]
    """
    One entry per current peer, ordered by nodeId: its link's state, versions, queue, last success, retries and give-ups.
    """
    counters: manager_status_schema.Counters
    journal: manager_status_schema.JournalStatus
    config: manager_status_schema.ConfigStatus
