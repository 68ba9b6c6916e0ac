"""Versions on the inter-node wire: what we say, what a peer said, and whether we can talk (no IO).

Every inter-node request and response carries ``nvpair-contract-version: MAJOR.MINOR.PATCH``
(``schema/VERSION``) and names the software: ``user-agent: nvpair-wm/X.Y.Z`` on requests,
``server: nvpair-wm/X.Y.Z`` on responses. A receiver serves any contract of its own major
(minor and patch skew is the compatibility policy's business: unknown members are dropped),
and a request without the header as its own major (curl, builds that predate the header, peers
written by other teams). Another major is refused as a whole before anything of the body is
read: :data:`REFUSED_STATUS`, with a body naming both versions.

:class:`PeerVersions` remembers, per certificate fingerprint, what each peer last said in its
requests (the endpoint) and its responses (the broadcaster), for ``manager:status`` and the
metrics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from nvpair_wm_schema.contract import CONTRACT_VERSION

from nvpair_wm import __version__

__all__ = [
    "CONTRACT_HEADER",
    "CONTRACT_VERSION",
    "PACKAGE_VERSION",
    "PRODUCT",
    "REFUSED_STATUS",
    "REQUEST_FIELDS",
    "RESPONSE_FIELDS",
    "ContractVersion",
    "PeerVersions",
    "Seen",
    "software_of",
]

PACKAGE_VERSION: Final = __version__
PRODUCT: Final = "nvpair-wm"
CONTRACT_HEADER: Final = b"nvpair-contract-version"
#: The answer to a request of another major contract version: 409 Conflict (the request is
#: well-formed, but conflicts with the contract this node speaks).
REFUSED_STATUS: Final = 409

_PRODUCT_TOKEN: Final = f"{PRODUCT}/{PACKAGE_VERSION}".encode("ascii")
_CONTRACT_VALUE: Final = CONTRACT_VERSION.encode("ascii")
#: The fields every request to a peer carries (both client sessions add them).
REQUEST_FIELDS: Final = ((b"user-agent", _PRODUCT_TOKEN), (CONTRACT_HEADER, _CONTRACT_VALUE))
#: The fields every response of the inter-node server carries (both server sessions add them).
RESPONSE_FIELDS: Final = ((b"server", _PRODUCT_TOKEN), (CONTRACT_HEADER, _CONTRACT_VALUE))

# MAJOR.MINOR.PATCH, each without leading zeros (semver), then an optional pre-release or build.
_SEMVER: Final = re.compile(rb"(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})"
                            rb"(?:[-+][0-9A-Za-z.+-]{1,64})?")  # fmt: skip
_SOFTWARE: Final = re.compile(rb"nvpair-wm/([0-9A-Za-z.+-]{1,64})")
_SHOWN_MAX: Final = 64  # characters of a malformed value repeated in an error


@dataclass(frozen=True, slots=True)
class ContractVersion:
    """A contract version as a peer sent it (``text``), with its major number."""

    text: str
    major: int

    @classmethod
    def parse(cls, value: bytes) -> ContractVersion:
        """The version in a header value; ValueError (saying what was wrong) if it is not one."""
        value = value.strip(b" \t")
        match = _SEMVER.fullmatch(value)
        if match is None:
            shown = value[:_SHOWN_MAX].decode("latin-1")
            raise ValueError(f"{CONTRACT_HEADER.decode()} must be MAJOR.MINOR.PATCH, not {shown!r}")
        return cls(value.decode("ascii"), int(match.group(1)))

    def served(self) -> bool:
        """Whether this node serves a request of this version (same major)."""
        return self.major == OURS.major


OURS: Final = ContractVersion.parse(_CONTRACT_VALUE)


def software_of(value: bytes | None) -> str | None:
    """The nvpair-wm version in a ``user-agent`` or ``server`` value (``nvpair-wm/0.2.0``):
    "0.2.0"; a product token without a version (``nvpair-wm``, what 0.1.0 sends) is "unknown";
    None when it is not nvpair-wm at all."""
    if value is None:
        return None
    first = value.split(None, 1)[0] if value.strip() else b""
    match = _SOFTWARE.fullmatch(first)
    if match is not None:
        return match.group(1).decode("ascii")
    return "unknown" if first == PRODUCT.encode() else None


@dataclass(frozen=True, slots=True)
class Seen:
    """What a peer said of itself: contract version and software version (None: not said)."""

    contract: str | None
    software: str | None


class PeerVersions:
    """The last versions each peer (by certificate fingerprint) sent, in requests or responses.

    A peer that restarts on another release says so in its next request or response, so the
    newest word wins; the table is bounded by the pinned peers that ever talked to us.
    """

    def __init__(self, max_peers: int = 4096) -> None:
        self._seen: dict[str, tuple[bytes | None, bytes | None, Seen]] = {}
        self._max = max_peers

    def heard(self, fingerprint: str, contract: bytes | None, software: bytes | None) -> None:
        """Record the header values of one request or response of ``fingerprint`` (the same
        values as last time, the usual case, cost one lookup and two compares)."""
        old = self._seen.get(fingerprint)
        if old is not None and old[0] == contract and old[1] == software:
            return
        if old is None and len(self._seen) >= self._max:
            self._seen.pop(next(iter(self._seen)))
        seen = Seen(_contract_text(contract), software_of(software))
        self._seen[fingerprint] = (contract, software, seen)

    def get(self, fingerprint: str) -> Seen:
        entry = self._seen.get(fingerprint)
        return _UNKNOWN if entry is None else entry[2]


_UNKNOWN: Final = Seen(None, None)


def _contract_text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return ContractVersion.parse(value).text
    except ValueError:
        return None
