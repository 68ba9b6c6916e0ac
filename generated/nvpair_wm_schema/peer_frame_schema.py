# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, TypeAlias
from msgspec import Meta
from . import workload_events_schema, workloads_remove_schema


PeerFrame: TypeAlias = Annotated[
    workload_events_schema.WorkloadSubmitted
    | workload_events_schema.WorkloadStarted
    | workload_events_schema.WorkloadCompleted
    | workload_events_schema.WorkloadErrored
    | workload_events_schema.WorkloadCancelled
    | workloads_remove_schema.WorkloadsRemove,
    Meta(
        description="Every frame a manager accepts from a pinned peer in the body of POST /v1/workloads/events, and every frame it sends to its peers: the lifecycle events and workloads:remove, as one union tagged on 'method'. The other InboundFrame methods (nodes:update, manager:status) are the broker's: a peer that sends one gets -32601.",
        examples=[
            {
                "jsonrpc": "2.0",
                "method": "workload:started",
                "params": {
                    "workloadInfo": {
                        "id": "17",
                        "model": "llama-3.1-8b-instruct",
                        "engine": "vllm",
                        "runId": "r-5f2c9a",
                        "state": "running",
                        "originatedFrom": "node-a",
                        "scheduledOn": "node-b",
                        "createdAt": 1764690000000,
                        "startedAt": 1764690000250,
                        "completedAt": None,
                        "error": None,
                        "seq": 2,
                    }
                },
            }
        ],
        title="PeerFrame",
    ),
]
"""
Every frame a manager accepts from a pinned peer in the body of POST /v1/workloads/events, and every frame it sends to its peers: the lifecycle events and workloads:remove, as one union tagged on 'method'. The other InboundFrame methods (nodes:update, manager:status) are the broker's: a peer that sends one gets -32601.
"""
