# Generated from schema/ by `make gen` (scripts/gen_types.py). Do not edit by hand.
"""Constants the contract in schema/ owns: use these instead of retyping them."""

from __future__ import annotations

from typing import Final

import msgspec

from .jsonrpc_schema import ErrorCode
from . import (
    manager_status_schema,
    nodes_update_schema,
    ready_schema,
    workload_events_schema,
    workloads_remove_schema,
    workloads_upsert_schema,
)

CONTRACT_VERSION: Final = "1.3.0"
"""schema/VERSION: the contract version sent in ready.params.contractVersion."""
DEFAULT_PORT: Final = 14320
"""The inter-node port when none is given (NodeRecord.port's default)."""
MAX_SAFE_INTEGER: Final = 9007199254740991
"""The largest integer of the contract (RequestId's bound; 2**53 - 1)."""
MAX_REQUEST_ID_LENGTH: Final = 256
"""The longest string RequestId, in code points."""
MAX_NODE_RECORDS: Final = 1024
"""The most node records one nodes:update may carry."""

PARSE_ERROR: Final = -32700
"""The frame is not JSON text, or not I-JSON: a lone surrogate escape, a number no finite double holds. Answered with id null."""
INVALID_REQUEST: Final = -32600
"""Not a JSON-RPC 2.0 request object: not an object, jsonrpc not "2.0", method not a string, an empty batch, or an id that is fractional, out of range, boolean or structured (then answered with id null)."""
METHOD_NOT_FOUND: Final = -32601
"""An unknown method, or one this channel does not accept (peers may send only the lifecycle events and workloads:remove)."""
INVALID_PARAMS: Final = -32602
"""The params were refused: not an object, missing, or not valid for the method's params schema; data.path is the JSON path of the offending value and data.reason the validator's words."""
INTERNAL_ERROR: Final = -32603
"""A bug in the manager; the frame was not applied."""
FRAME_TOO_LARGE: Final = -32000
"""A line or body exceeds the maximum frame size (1 MiB by default); on the local channel the stream resynchronises at the next newline. Answered with id null."""
OVERLOADED: Final = -32001
"""Reserved for 'the queue toward the broker is full'; never sent by this version (the local channel applies backpressure instead, HTTP answers 503 with Retry-After). A receiver treats it like any error code it does not know: the request failed."""

ERROR_MESSAGES: Final[dict[ErrorCode, str]] = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid Request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    FRAME_TOO_LARGE: "Frame too large",
    OVERLOADED: "Overloaded",
}
"""The message (ErrorObject.message) of each error code."""

BROKER_FRAME_TYPES: Final[dict[str, type[msgspec.Struct]]] = {
    "ready": ready_schema.Ready,
    "workloads:upsert": workloads_upsert_schema.WorkloadsUpsert,
    "workloads:remove": workloads_remove_schema.WorkloadsRemove,
}
"""BrokerFrame: each method and the generated type it selects."""

INBOUND_FRAME_TYPES: Final[dict[str, type[msgspec.Struct]]] = {
    "workload:submitted": workload_events_schema.WorkloadSubmitted,
    "workload:started": workload_events_schema.WorkloadStarted,
    "workload:completed": workload_events_schema.WorkloadCompleted,
    "workload:errored": workload_events_schema.WorkloadErrored,
    "workload:cancelled": workload_events_schema.WorkloadCancelled,
    "workloads:remove": workloads_remove_schema.WorkloadsRemove,
    "nodes:update": nodes_update_schema.NodesUpdate,
    "manager:status": manager_status_schema.ManagerStatus,
}
"""InboundFrame: each method and the generated type it selects."""

PEER_FRAME_TYPES: Final[dict[str, type[msgspec.Struct]]] = {
    "workload:submitted": workload_events_schema.WorkloadSubmitted,
    "workload:started": workload_events_schema.WorkloadStarted,
    "workload:completed": workload_events_schema.WorkloadCompleted,
    "workload:errored": workload_events_schema.WorkloadErrored,
    "workload:cancelled": workload_events_schema.WorkloadCancelled,
    "workloads:remove": workloads_remove_schema.WorkloadsRemove,
}
"""PeerFrame: each method and the generated type it selects."""

REQUEST_ONLY_METHODS: Final = frozenset(["manager:status"])
"""Methods whose frame requires an id: never sent as a notification."""
PARAMLESS_METHODS: Final = frozenset(["manager:status"])
"""Methods whose frame may omit params."""
