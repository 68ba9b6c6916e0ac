# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, Literal
from msgspec import Meta, Struct, UNSET, UnsetType
from . import jsonrpc_schema, node_record_schema


class NodesUpdateParams(Struct):
    """
    The cluster's node records: the full list, replacing the previous snapshot.
    """

    nodes: Annotated[list[node_record_schema.NodeRecord], Meta(max_length=1024)]


class NodesUpdate(Struct, tag_field="method", tag="nodes:update"):
    """
    Broker to manager: the full current list of cluster node records. Each snapshot replaces the previous one; peers that are no longer listed, or no longer pinned, are dropped with their queues and connections. The list may include this node itself (recognised by its fingerprint) and is bounded at 1024 records.
    """

    jsonrpc: Literal["2.0"]
    params: NodesUpdateParams
    id: jsonrpc_schema.RequestId | UnsetType = UNSET
