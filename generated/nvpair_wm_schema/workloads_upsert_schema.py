# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from msgspec import Struct
from . import workload_info_schema
from typing import Literal


class UpsertParams(Struct):
    """
    The workload after the event, with state set from the lifecycle method.
    """

    workloadInfo: workload_info_schema.WorkloadInfo


class WorkloadsUpsert(Struct, tag_field="method", tag="workloads:upsert"):
    """
    Manager to broker: a remote workload was created or changed. Sent once per distinct event: duplicates arriving over several paths are collapsed first, and stale events are never sent, so the broker's view only moves forward.
    """

    jsonrpc: Literal["2.0"]
    params: UpsertParams
