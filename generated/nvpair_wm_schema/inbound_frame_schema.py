# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, TypeAlias
from msgspec import Meta
from . import (
    manager_status_schema,
    nodes_update_schema,
    workload_events_schema,
    workloads_remove_schema,
)


InboundFrame: TypeAlias = Annotated[
    workload_events_schema.WorkloadSubmitted
    | workload_events_schema.WorkloadStarted
    | workload_events_schema.WorkloadCompleted
    | workload_events_schema.WorkloadErrored
    | workload_events_schema.WorkloadCancelled
    | workloads_remove_schema.WorkloadsRemove
    | nodes_update_schema.NodesUpdate
    | manager_status_schema.ManagerStatus,
    Meta(
        description="Every frame a manager accepts, as one union tagged on 'method': decode once, and the frame is validated and typed. The local channel (broker) accepts all of them; the inter-node channel (peers) accepts the lifecycle notifications and workloads:remove, and answers the others with -32601.",
        examples=[
            {
                "jsonrpc": "2.0",
                "method": "workloads:remove",
                "params": {"workloadId": "17", "originatedFrom": "node-a"},
            },
            {"jsonrpc": "2.0", "method": "manager:status", "id": 1},
        ],
        title="InboundFrame",
    ),
]
"""
Every frame a manager accepts, as one union tagged on 'method': decode once, and the frame is validated and typed. The local channel (broker) accepts all of them; the inter-node channel (peers) accepts the lifecycle notifications and workloads:remove, and answers the others with -32601.
"""
