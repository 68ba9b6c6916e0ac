# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated, Literal
from msgspec import Meta, Struct


class ReadyParams(Struct):
    """
    What the manager announces when it is ready to take frames: its program version and the contract version it speaks.
    """

    version: Annotated[
        str,
        Meta(
            description="nvpair-wm program version (not the contract's).",
            max_length=64,
            min_length=1,
        ),
    ]
    """
    nvpair-wm program version (not the contract's).
    """
    contractVersion: Annotated[
        str,
        Meta(
            description="The semantic version of this contract (schema/VERSION) that the manager speaks, MAJOR.MINOR.PATCH. A broker accepts any version with the major it knows (1) and ignores what a newer minor adds (see the compatibility policy in schema/README.md).",
            max_length=32,
            pattern="^1\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)$",
        ),
    ]
    """
    The semantic version of this contract (schema/VERSION) that the manager speaks, MAJOR.MINOR.PATCH. A broker accepts any version with the major it knows (1) and ignores what a newer minor adds (see the compatibility policy in schema/README.md).
    """


class Ready(Struct, tag_field="method", tag="ready"):
    """
    Manager to broker: the first frame the manager writes on the local channel, once it is ready to take frames.
    """

    jsonrpc: Literal["2.0"]
    params: ReadyParams
