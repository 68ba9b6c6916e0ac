# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias
from msgspec import Meta, Struct, UNSET, UnsetType


JsonRpcEnvelope: TypeAlias = Annotated[
    Any,
    Meta(
        description="JSON-RPC 2.0 envelopes and the pieces shared by every frame, on the local channel (newline-delimited) and on the inter-node channel (HTTP body). A frame with an 'id' member (even null) is a request and gets exactly one response; a frame without one is a notification and gets none, not even an error. A batch is a non-empty JSON array of frames; an empty array is one Invalid Request error. Only by-name params (an object) are accepted. Frames are I-JSON (RFC 7493). Strings are sequences of Unicode scalar values: a lone surrogate escape such as \"\\ud800\" makes the whole frame unparseable (-32700), even inside a member that nothing reads. Numbers are IEEE 754 doubles: every integer in this contract lies within -(2^53-1)..2^53-1, where a double holds it exactly; an integer may also be written 1.0 or 1e3 (JSON Schema's data model), though senders should write plain integers; a number no finite double holds (1e400) makes the frame unparseable. Member names are unique: producers MUST NOT send duplicate names, because some languages' derived deserializers (serde's, for one) reject them. A receiver that meets duplicates anyway keeps the LAST value of each name, 'method' included: the last 'method' member decides the frame's type.",
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
            [
                {
                    "jsonrpc": "2.0",
                    "method": "workloads:remove",
                    "params": {"workloadId": "17", "originatedFrom": "node-a"},
                },
                {"jsonrpc": "2.0", "method": "manager:status", "id": 2},
            ],
        ],
        title="JsonRpcEnvelope",
    ),
]
"""
JSON-RPC 2.0 envelopes and the pieces shared by every frame, on the local channel (newline-delimited) and on the inter-node channel (HTTP body). A frame with an 'id' member (even null) is a request and gets exactly one response; a frame without one is a notification and gets none, not even an error. A batch is a non-empty JSON array of frames; an empty array is one Invalid Request error. Only by-name params (an object) are accepted. Frames are I-JSON (RFC 7493). Strings are sequences of Unicode scalar values: a lone surrogate escape such as "\\ud800" makes the whole frame unparseable (-32700), even inside a member that nothing reads. Numbers are IEEE 754 doubles: every integer in this contract lies within -(2^53-1)..2^53-1, where a double holds it exactly; an integer may also be written 1.0 or 1e3 (JSON Schema's data model), though senders should write plain integers; a number no finite double holds (1e400) makes the frame unparseable. Member names are unique: producers MUST NOT send duplicate names, because some languages' derived deserializers (serde's, for one) reject them. A receiver that meets duplicates anyway keeps the LAST value of each name, 'method' included: the last 'method' member decides the frame's type.
"""


RequestId1: TypeAlias = Annotated[
    str,
    Meta(
        description="Request identifier: a string of at most 256 characters, an integer within -(2^53-1)..2^53-1 (so that every language holds it exactly), or null (allowed, but discouraged by JSON-RPC). A response carries the id of its request. A fractional, out-of-range, boolean or structured id is an Invalid Request (-32600), answered with id null.",
        max_length=256,
        title="RequestId",
    ),
]
"""
Request identifier: a string of at most 256 characters, an integer within -(2^53-1)..2^53-1 (so that every language holds it exactly), or null (allowed, but discouraged by JSON-RPC). A response carries the id of its request. A fractional, out-of-range, boolean or structured id is an Invalid Request (-32600), answered with id null.
"""


RequestId2: TypeAlias = Annotated[
    int,
    Meta(
        description="Request identifier: a string of at most 256 characters, an integer within -(2^53-1)..2^53-1 (so that every language holds it exactly), or null (allowed, but discouraged by JSON-RPC). A response carries the id of its request. A fractional, out-of-range, boolean or structured id is an Invalid Request (-32600), answered with id null.",
        ge=-9007199254740991,
        le=9007199254740991,
        title="RequestId",
    ),
]
"""
Request identifier: a string of at most 256 characters, an integer within -(2^53-1)..2^53-1 (so that every language holds it exactly), or null (allowed, but discouraged by JSON-RPC). A response carries the id of its request. A fractional, out-of-range, boolean or structured id is an Invalid Request (-32600), answered with id null.
"""


RequestId: TypeAlias = (
    Annotated[
        RequestId1 | RequestId2,
        Meta(
            description="Request identifier: a string of at most 256 characters, an integer within -(2^53-1)..2^53-1 (so that every language holds it exactly), or null (allowed, but discouraged by JSON-RPC). A response carries the id of its request. A fractional, out-of-range, boolean or structured id is an Invalid Request (-32600), answered with id null.",
            title="RequestId",
        ),
    ]
    | None
)
"""
Request identifier: a string of at most 256 characters, an integer within -(2^53-1)..2^53-1 (so that every language holds it exactly), or null (allowed, but discouraged by JSON-RPC). A response carries the id of its request. A fractional, out-of-range, boolean or structured id is an Invalid Request (-32600), answered with id null.
"""


ErrorCode: TypeAlias = Annotated[
    Literal[-32700, -32600, -32601, -32602, -32603, -32000, -32001],
    Meta(
        description="The error codes nvpair-wm sends. Each branch fixes one code; its title is the error's message (ErrorObject.message), its description says when it is sent. A receiver treats a code it does not know as a failure of that request, with no further meaning.",
        title="ErrorCode",
    ),
]
"""
The error codes nvpair-wm sends. Each branch fixes one code; its title is the error's message (ErrorObject.message), its description says when it is sent. A receiver treats a code it does not know as a failure of that request, with no further meaning.
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
                le=9007199254740991,
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    Position of the frame in the batch (HTTP bodies and local batches), from 0.
    """


class ErrorObject(Struct):
    """
    The error member of an ErrorResponse: one of our codes, its standard message (see ErrorCode), and usually data saying where and why.
    """

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
    """
    Answer to a lifecycle event, workloads:remove or nodes:update sent as a request (with an id): the SuccessResponse whose result is an EventResult.
    """

    jsonrpc: Literal["2.0"]
    id: RequestId
    result: EventResult


class Request(Struct):
    """
    The generic shape of a JSON-RPC 2.0 request: a call that gets exactly one response, a SuccessResponse or an ErrorResponse with the same id. The presence of an 'id' member, even null, is what makes a frame a request. The concrete types are the frames of InboundFrame, which pin 'method' and 'params': any of them sent with an id, and manager:status, which must have one.
    """

    jsonrpc: Literal["2.0"]
    method: Annotated[
        str,
        Meta(
            description="The method; it selects the frame type (see InboundFrame). An unknown one is answered with -32601."
        ),
    ]
    """
    The method; it selects the frame type (see InboundFrame). An unknown one is answered with -32601.
    """
    id: RequestId
    params: (
        Annotated[
            dict[str, Any],
            Meta(
                description="By-name parameters. Positional (array) params are refused with -32602."
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    By-name parameters. Positional (array) params are refused with -32602.
    """


class Notification(Struct):
    """
    The generic shape of a JSON-RPC 2.0 notification: a frame without an 'id' member. It gets no response, not even an error; an invalid one is logged and counted (Counters.invalid). A receiver tells a notification from a Request by the presence of 'id' alone, before it validates anything else, so this definition lists the members a notification has and does not repeat that test: an object that also has an 'id' matches it, and is a Request. The concrete types are the frames of InboundFrame and BrokerFrame sent without an id.
    """

    jsonrpc: Literal["2.0"]
    method: Annotated[
        str,
        Meta(
            description="The method; it selects the frame type (see InboundFrame and BrokerFrame)."
        ),
    ]
    """
    The method; it selects the frame type (see InboundFrame and BrokerFrame).
    """
    params: (
        Annotated[dict[str, Any], Meta(description="By-name parameters (an object).")]
        | UnsetType
    ) = UNSET
    """
    By-name parameters (an object).
    """


class SuccessResponse(Struct):
    """
    The generic shape of the answer to a request that succeeded, with the request's id. The concrete types are EventResponse (result EventResult) and manager-status.schema.json's StatusResponse (result StatusResult). A response has either 'result' or 'error' (ErrorResponse), never both.
    """

    jsonrpc: Literal["2.0"]
    id: RequestId
    result: Annotated[
        Any,
        Meta(
            description="The method's result: any JSON value (null included) in the generic shape; the concrete response types fix it."
        ),
    ]
    """
    The method's result: any JSON value (null included) in the generic shape; the concrete response types fix it.
    """


Batch: TypeAlias = Annotated[
    list[dict[str, Any]],
    Meta(
        description="Several frames in one JSON array: one line of the local channel, or one HTTP body. A batch is a non-empty array of Requests and Notifications, in any mix. Each element is decoded, validated and answered on its own, as if it had come alone: an invalid element gets its own error response and does not disturb the others (on the local channel only when it is a request, or not even an object; over HTTP every invalid element is answered). The answer is one array holding the responses to the element requests, each error naming its element in data.index; there is no answer when every element was a notification. An empty array is not a batch: it gets a single Invalid Request error (-32600). A valid batch holds only objects; each of them is checked against its frame type, not by this definition.",
        min_length=1,
        title="Batch",
    ),
]
"""
Several frames in one JSON array: one line of the local channel, or one HTTP body. A batch is a non-empty array of Requests and Notifications, in any mix. Each element is decoded, validated and answered on its own, as if it had come alone: an invalid element gets its own error response and does not disturb the others (on the local channel only when it is a request, or not even an object; over HTTP every invalid element is answered). The answer is one array holding the responses to the element requests, each error naming its element in data.index; there is no answer when every element was a notification. An empty array is not a batch: it gets a single Invalid Request error (-32600). A valid batch holds only objects; each of them is checked against its frame type, not by this definition.
"""
