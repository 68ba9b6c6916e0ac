# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand.

from __future__ import annotations

from typing import Annotated
from msgspec import Meta, Struct, UNSET, UnsetType


class HttpError(Struct):
    """
    The body of every HTTP error of the inter-node endpoint that is not a JSON-RPC answer: 403, 404, 405, 408, 409, 413, 415, 431, 500, 501 and 503, and 400 for malformed HTTP (not for invalid frames, which get a JSON-RPC 400 body: EventsBody). Content-Type application/json. The text is for people; a client decides by the status code alone.
    """

    error: Annotated[str, Meta(description="What was wrong, in words.")]
    """
    What was wrong, in words.
    """
    serverContractVersion: (
        Annotated[
            str,
            Meta(
                description="409 only: the contract version the answering node speaks (added in 1.2.0)."
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    409 only: the contract version the answering node speaks (added in 1.2.0).
    """
    requestContractVersion: (
        Annotated[
            str,
            Meta(
                description="409 only: the contract version the request said it speaks, of another major (added in 1.2.0)."
            ),
        ]
        | UnsetType
    ) = UNSET
    """
    409 only: the contract version the request said it speaks, of another major (added in 1.2.0).
    """
