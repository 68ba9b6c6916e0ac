"""``nodes:update`` records → the set of peers this node sends to (sans-IO but for ``stat``).

A record is a peer when both hold *now*:

* its fingerprint is not this node's own certificate's (the broker lists every member, us
  included), and
* its fingerprint is pinned in ``cluster-dir/trusted/``.

Without a cluster identity there are no peers at all: a node that is not a member sends
nothing. Pins and identity are re-read on every :meth:`PeerDirectory.evaluate` (both are
stat-cached in :mod:`nvpair_wm.pins`, so that costs a few ``stat`` calls), which is why the
broadcaster can call it on every snapshot, on a short tick, and before each send attempt:
unpinning a member, or gaining an identity, takes effect without a restart and without waiting
for the broker's next ``nodes:update``.

Peers are keyed by fingerprint, the identity the client checks the server against. Two records
with the same fingerprint are one peer (the first wins, with a warning): one certificate is one
node, and sending everything twice to it would only produce duplicates.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import msgspec
from nvpair_wm_schema.contract import DEFAULT_PORT
from nvpair_wm_schema.node_record_schema import NodeRecord

__all__ = [
    "DEFAULT_PORT",
    "Peer",
    "PeerChanges",
    "PeerDirectory",
    "diff",
    "is_peer_of",
    "select_peers",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Peer:
    """One peer as the broadcaster dials it."""

    node_id: str
    address: str
    port: int
    fingerprint: str

    @property
    def target(self) -> tuple[str, int]:
        return self.address, self.port

    @classmethod
    def from_record(cls, record: NodeRecord) -> Peer:
        port = record.port if isinstance(record.port, int) else DEFAULT_PORT
        return cls(record.nodeId, record.address, port, record.fingerprint)


def is_peer_of(fingerprint: str, own_fingerprint: str | None, pinned: Container[str]) -> bool:
    """The rule that makes a node a peer: its certificate is pinned, and it is not us."""
    return own_fingerprint is not None and fingerprint != own_fingerprint and fingerprint in pinned


def select_peers(
    records: Iterable[NodeRecord], own_fingerprint: str | None, pinned: frozenset[str]
) -> dict[str, Peer]:
    """fingerprint → :class:`Peer` for the records that are peers now (see the module doc)."""
    if own_fingerprint is None:
        return {}
    peers: dict[str, Peer] = {}
    for record in records:
        fp = record.fingerprint
        if not is_peer_of(fp, own_fingerprint, pinned):
            continue
        if fp in peers:
            first = peers[fp]
            if (first.node_id, first.target) != (record.nodeId, (record.address, record.port)):
                log.warning(
                    "nodes:update lists fingerprint %s twice (%s and %s): using %s",
                    fp[:16],
                    first.node_id,
                    record.nodeId,
                    first.node_id,
                )
            continue
        peers[fp] = Peer.from_record(record)
    return peers


@dataclass(slots=True)
class PeerChanges:
    """How the peer set moved between two evaluations."""

    added: list[Peer] = field(default_factory=list)
    removed: list[Peer] = field(default_factory=list)
    # Same fingerprint, new address, port or nodeId: (old, new).
    changed: list[tuple[Peer, Peer]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def diff(old: Mapping[str, Peer], new: Mapping[str, Peer]) -> PeerChanges:
    """The changes that turn ``old`` into ``new`` (both keyed by fingerprint)."""
    changes = PeerChanges()
    for fp, peer in new.items():
        before = old.get(fp)
        if before is None:
            changes.added.append(peer)
        elif before != peer:
            changes.changed.append((before, peer))
    changes.removed = [peer for fp, peer in old.items() if fp not in new]
    return changes


class FingerprintSource(Protocol):
    """``nvpair_wm.pins.Identity`` as this module uses it."""

    def current(self) -> _HasFingerprint | None: ...


class _HasFingerprint(Protocol):
    @property
    def fingerprint(self) -> str: ...


class PinSource(Protocol):
    """``nvpair_wm.pins.PinSet`` as this module uses it."""

    def current(self) -> frozenset[str]: ...


class PeerDirectory:
    """The broker's last ``nodes:update`` plus the live pin set and identity → peers now."""

    def __init__(self, identity: FingerprintSource, pins: PinSource) -> None:
        self._identity = identity
        self._pins = pins
        self._records: list[NodeRecord] = []

    @property
    def records(self) -> list[NodeRecord]:
        return list(self._records)

    def update(self, records: Iterable[NodeRecord]) -> None:
        """Replace the records (each ``nodes:update`` is a full snapshot)."""
        self._records = [msgspec.structs.replace(r) for r in records]

    def own_fingerprint(self) -> str | None:
        ident = self._identity.current()
        return ident.fingerprint if ident is not None else None

    def evaluate(self) -> dict[str, Peer]:
        """The peers as the records, the pins and our identity are now."""
        own = self.own_fingerprint()
        if own is None:
            return {}
        return select_peers(self._records, own, self._pins.current())

    def is_peer(self, peer: Peer) -> bool:
        """Cheap re-check of one peer before a send attempt: still pinned, still not us."""
        return is_peer_of(peer.fingerprint, self.own_fingerprint(), self._pins.current())
