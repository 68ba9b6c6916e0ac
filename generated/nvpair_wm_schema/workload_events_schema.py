# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias
from msgspec import Meta, Struct, UNSET, UnsetType
from . import jsonrpc_schema, workload_info_schema


WorkloadEvents: TypeAlias = Annotated[
    Any,
    Meta(
        description="Lifecycle notifications, accepted from the broker (local events, which the manager broadcasts to peers) and from pinned peers (remote events, which the manager forwards to its broker as workloads:upsert). The method decides the state; workload:cancelled is an addition to the original contract so that the cancelled state is reachable.",
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
        title="WorkloadEvents",
    ),
]
"""
Lifecycle notifications, accepted from the broker (local events, which the manager broadcasts to peers) and from pinned peers (remote events, which the manager forwards to its broker as workloads:upsert). The method decides the state; workload:cancelled is an addition to the original contract so that the cancelled state is reachable.
"""


class LifecycleParams(Struct):
    """
    The workload the event is about, as its producer reported it.
    """

    workloadInfo: workload_info_schema.WorkloadInfo


class WorkloadSubmitted(Struct, tag_field="method", tag="workload:submitted"):
    """
    Notification (or, with an id, request) that a workload is now queued. The manager sets workloadInfo.state to 'queued' and relays the rest unchanged.
    """

    jsonrpc: Literal["2.0"]
    params: LifecycleParams
    id: jsonrpc_schema.RequestId | UnsetType = UNSET


class WorkloadStarted(Struct, tag_field="method", tag="workload:started"):
    """
    Notification (or, with an id, request) that a workload is now running. The manager sets workloadInfo.state to 'running' and relays the rest unchanged.
    """

    jsonrpc: Literal["2.0"]
    params: LifecycleParams
    id: jsonrpc_schema.RequestId | UnsetType = UNSET


class WorkloadCompleted(Struct, tag_field="method", tag="workload:completed"):
    """
    Notification (or, with an id, request) that a workload is now completed. The manager sets workloadInfo.state to 'completed' and relays the rest unchanged.
    """

    jsonrpc: Literal["2.0"]
    params: LifecycleParams
    id: jsonrpc_schema.RequestId | UnsetType = UNSET


class WorkloadErrored(Struct, tag_field="method", tag="workload:errored"):
    """
    Notification (or, with an id, request) that a workload is now failed. The manager sets workloadInfo.state to 'failed' and relays the rest unchanged.
    """

    jsonrpc: Literal["2.0"]
    params: LifecycleParams
    id: jsonrpc_schema.RequestId | UnsetType = UNSET


class WorkloadCancelled(Struct, tag_field="method", tag="workload:cancelled"):
    """
    Notification (or, with an id, request) that a workload is now cancelled. The manager sets workloadInfo.state to 'cancelled' and relays the rest unchanged.
    """

    jsonrpc: Literal["2.0"]
    params: LifecycleParams
    id: jsonrpc_schema.RequestId | UnsetType = UNSET
