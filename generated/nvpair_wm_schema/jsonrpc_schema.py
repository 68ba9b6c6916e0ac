# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias
from msgspec import Meta, Struct, UNSET, UnsetType


JsonRpcEnvelope: TypeAlias = Annotated[
    Any,
    Meta(
        description="JSON-RPC 2.0 envelope pieces shared by every frame, on the local channel (newline-delimited) and on the inter-node channel (HTTP body). A frame with an 'id' member is a request and gets exactly one response; a frame without one is a notification and gets none, not even an error. A batch is a non-empty JSON array of frames; an empty array is one Invalid Request error. Only by-name params (an object) are accepted.",
        examples=[
            {
                "jsonrpc": "2.0",
                "id": 7,
                "error": {
                    "code": -32602,
                    "message": "Invalid params",
                    "data": {
                        "path": "$.params.workloadInfo.seq",
                        "reason": "Expected `int`, got `str`",
                    },
                },
            },
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -32700,
                    "message": "Parse error",
                    "data": {"reason": "malformed JSON"},
                },
            },
            {"jsonrpc": "2.0", "id": "a1", "result": {"outcome": "duplicate"}},
        ],
        title="JsonRpcEnvelope",
    ),
]
"""
JSON-RPC 2.0 envelope pieces shared by every frame, on the local channel (newline-delimited) and on the inter-node channel (HTTP body). A frame with an 'id' member is a request and gets exactly one response; a frame without one is a notification and gets none, not even an error. A batch is a non-empty JSON array of frames; an empty array is one Invalid Request error. Only by-name params (an object) are accepted.
"""


RequestId1: TypeAlias = Annotated[
    str,
    Meta(
        description="Request identifier: a string, an integer or null. Fractional numbers are refused as an Invalid Request (-32600).",
        max_length=256,
        title="RequestId",
    ),
]
"""
Request identifier: a string, an integer or null. Fractional numbers are refused as an Invalid Request (-32600).
"""


RequestId: TypeAlias = (
    Annotated[
        RequestId1 | int,
        Meta(
            description="Request identifier: a string, an integer or null. Fractional numbers are refused as an Invalid Request (-32600).",
            title="RequestId",
        ),
    ]
    | None
)
"""
Request identifier: a string, an integer or null. Fractional numbers are refused as an Invalid Request (-32600).
"""


ErrorCode: TypeAlias = Annotated[
    Literal[-32700, -32600, -32601, -32602, -32603, -32000, -32001],
    Meta(
        description="Error codes used by nvpair-wm. -32700 Parse error: the frame is not JSON text (including a lone surrogate escape). -32600 Invalid Request: not a JSON-RPC 2.0 request object (wrong jsonrpc, method not a string, an empty batch, a fractional id). -32601 Method not found: unknown method, or a method this channel does not accept. -32602 Invalid params: the generated validator refused the params; data.path is the JSON path and data.reason the validator's reason. -32603 Internal error. -32000 Frame too large: the line or body exceeds the maximum frame size (1 MiB by default); the stream resynchronises at the next newline. -32001 Overloaded: the queue toward the broker is full; retry later.",
        title="ErrorCode",
    ),
]
"""
Error codes used by nvpair-wm. -32700 Parse error: the frame is not JSON text (including a lone surrogate escape). -32600 Invalid Request: not a JSON-RPC 2.0 request object (wrong jsonrpc, method not a string, an empty batch, a fractional id). -32601 Method not found: unknown method, or a method this channel does not accept. -32602 Invalid params: the generated validator refused the params; data.path is the JSON path and data.reason the validator's reason. -32603 Internal error. -32000 Frame too large: the line or body exceeds the maximum frame size (1 MiB by default); the stream resynchronises at the next newline. -32001 Overloaded: the queue toward the broker is full; retry later.
"""


class ErrorData(Struct):
    """
    Machine-readable detail of an error.
    """

    reason: Annotated[
        str, Meta(description="Why the frame was refused, in the validator's words.")
    ]
    """
    Why the frame was refused, in the validator's words.
    """
    path: (
        Annotated[
            str,
            Meta(
                description="JSON path of the offending value, rooted at the frame, for example $.params.workloadInfo.seq."
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    JSON path of the offending value, rooted at the frame, for example $.params.workloadInfo.seq.
    """
    index: (
        Annotated[
            int,
            Meta(
                description="Position of the frame in the batch (HTTP bodies and local batches), from 0.",
                ge=0,
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    Position of the frame in the batch (HTTP bodies and local batches), from 0.
    """


class ErrorObject(Struct):
    code: ErrorCode
    message: str
    data: ErrorData | UnsetType = UNSET


class ErrorResponse(Struct):
    """
    Answer to a request that failed. id is null when the request's id could not be read.
    """

    jsonrpc: Literal["2.0"]
    id: RequestId
    error: ErrorObject


EventOutcome: TypeAlias = Annotated[
    Literal["applied", "duplicate", "stale", "removed"],
    Meta(
        description="What the manager did with a lifecycle event or removal. applied: new, recorded and forwarded. duplicate: already seen with this (runId, id, seq), or the removal was already applied. stale: older than the newest seen for (runId, id), not forwarded. removed: the workload was removed (tombstoned), the event is not forwarded.",
        title="EventOutcome",
    ),
]
"""
What the manager did with a lifecycle event or removal. applied: new, recorded and forwarded. duplicate: already seen with this (runId, id, seq), or the removal was already applied. stale: older than the newest seen for (runId, id), not forwarded. removed: the workload was removed (tombstoned), the event is not forwarded.
"""


class EventResult(Struct):
    """
    Result of a lifecycle event or removal sent as a request (with an id).
    """

    outcome: EventOutcome


class EventResponse(Struct):
    jsonrpc: Literal["2.0"]
    id: RequestId
    result: EventResult
