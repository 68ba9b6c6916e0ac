# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, TypeAlias
from msgspec import Meta
from . import ready_schema, workloads_remove_schema, workloads_upsert_schema


BrokerFrame: TypeAlias = Annotated[
    ready_schema.Ready
    | workloads_upsert_schema.WorkloadsUpsert
    | workloads_remove_schema.WorkloadsRemove,
    Meta(
        description="Every notification a manager writes to its broker, as one union tagged on 'method'. Besides these, the broker receives responses (EventResponse, StatusResponse, ErrorResponse) to the requests it sent.",
        examples=[
            {
                "jsonrpc": "2.0",
                "method": "ready",
                "params": {"version": "0.1.0", "contractVersion": "1.0.0"},
            }
        ],
        title="BrokerFrame",
    ),
]
"""
Every notification a manager writes to its broker, as one union tagged on 'method'. Besides these, the broker receives responses (EventResponse, StatusResponse, ErrorResponse) to the requests it sent.
"""
