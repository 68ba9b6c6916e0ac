# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, Literal
from msgspec import Meta, Struct, UNSET, UnsetType
from . import jsonrpc_schema


class RemoveParams(Struct):
    """
    Which workload to remove: its id and origin node, and optionally its run.
    """

    workloadId: Annotated[
        str,
        Meta(
            description="The workload's id (WorkloadInfo.id).",
            max_length=256,
            min_length=1,
        ),
    ]
    """
    The workload's id (WorkloadInfo.id).
    """
    originatedFrom: Annotated[
        str,
        Meta(
            description="The node the workload entered the cluster on (WorkloadInfo.originatedFrom).",
            max_length=256,
            min_length=1,
        ),
    ]
    """
    The node the workload entered the cluster on (WorkloadInfo.originatedFrom).
    """
    runId: (
        Annotated[
            str,
            Meta(
                description="Optional: narrows the removal to one run (WorkloadInfo.runId).",
                max_length=128,
                min_length=1,
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    Optional: narrows the removal to one run (WorkloadInfo.runId).
    """


class WorkloadsRemove(Struct, tag_field="method", tag="workloads:remove"):
    """
    Removal of a workload from the cluster view, in both directions: broker to manager (a local removal, broadcast to peers), peer to manager, and manager to broker (a remote removal). The manager keeps a tombstone on (originatedFrom, workloadId) so that a late event or a retry does not bring the workload back. With runId the tombstone covers exactly that run. Without it, it covers the newest run of (originatedFrom, workloadId) this manager has seen, or, if it has seen none, every run until the tombstone expires: since ids restart at 1 when a proxy restarts, senders should include runId whenever they know it. Managers include runId when they forward a removal whose run they know; receivers must accept it.
    """

    jsonrpc: Literal["2.0"]
    params: RemoveParams
    id: jsonrpc_schema.RequestId | UnsetType = UNSET
