# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, TypeAlias
from msgspec import Meta, Struct, UnsetType


Fingerprint: TypeAlias = Annotated[
    str,
    Meta(
        description="Lowercase hex SHA-256 of a node's DER-encoded certificate: exactly 64 characters 0-9 and a-f. The length bounds repeat what the pattern says because '$' in some regex dialects (Python's among them) matches before a trailing newline; with them, a trailing newline is invalid in every dialect.",
        max_length=64,
        min_length=64,
        pattern="^[0-9a-f]{64}$",
    ),
]
"""
Lowercase hex SHA-256 of a node's DER-encoded certificate: exactly 64 characters 0-9 and a-f. The length bounds repeat what the pattern says because '$' in some regex dialects (Python's among them) matches before a trailing newline; with them, a trailing newline is invalid in every dialect.
"""


class NodeRecord(Struct):
    """
    One cluster member as the broker knows it. Peers are discovered only from these records (never by browsing the network). A record is a peer when its fingerprint is not this node's own and is currently pinned in cluster-dir/trusted/.
    """

    nodeId: Annotated[
        str,
        Meta(
            description="The node's cluster id (the value other nodes see in originatedFrom).",
            max_length=256,
            min_length=1,
        ),
    ]
    """
    The node's cluster id (the value other nodes see in originatedFrom).
    """
    address: Annotated[
        str,
        Meta(
            description="Host name or IP literal (IPv6 without brackets) at which the node's inter-node port is reached.",
            max_length=253,
            min_length=1,
        ),
    ]
    """
    Host name or IP literal (IPv6 without brackets) at which the node's inter-node port is reached.
    """
    fingerprint: Annotated[
        Fingerprint,
        Meta(
            description="The node's certificate fingerprint; a record is a peer only if it is pinned."
        ),
    ]
    """
    The node's certificate fingerprint; a record is a peer only if it is pinned.
    """
    port: (
        Annotated[int, Meta(description="Inter-node port.", ge=1, le=65535)] | UnsetType
    ) = 14320
    """
    Inter-node port.
    """
