# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, Literal
from msgspec import Meta, Struct


class ReadyParams(Struct):
    """
    What the manager announces when it is ready to take frames.
    """

    version: Annotated[
        str, Meta(description="nvpair-wm version.", max_length=64, min_length=1)
    ]
    """
    nvpair-wm version.
    """


class Ready(Struct, tag_field="method", tag="ready"):
    """
    Manager to broker: the first frame the manager writes on the local channel, once it is ready to take frames.
    """

    jsonrpc: Literal["2.0"]
    params: ReadyParams
