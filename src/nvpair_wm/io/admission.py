"""Who may hold an inbound connection slot: pinned peers, and a bounded set of strangers.

Every connection starts unauthenticated (in its TLS handshake, or handshaken with a certificate
that is not pinned) and lives in its own budget with short timers (:func:`stranger_limits`); a
new connection past that budget, or past ``max_connections``, evicts the oldest stranger. Both
budgets follow the member count unless set (:mod:`nvpair_wm.capacity`). Sans-IO: the server
(:mod:`nvpair_wm.io.server`) asks and acts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Generic, Protocol, TypeVar

from nvpair_wm.capacity import connection_limit, strangers_limit
from nvpair_wm.http.core import Limits

log = logging.getLogger("nvpair_wm.io.server")


class Connection(Protocol):
    """What admission needs of a connection: where it is from, and a way to drop it."""

    @property
    def peername(self) -> object: ...

    def abort(self) -> None: ...


C = TypeVar("C", bound=Connection)


def stranger_limits(lim: Limits) -> Limits:
    """A connection's limits until its peer turns out to be pinned: shorter timeouts."""
    short = lim.unauthenticated_timeout
    return replace(
        lim,
        handshake_timeout=min(lim.handshake_timeout, short),
        idle_timeout=min(lim.idle_timeout, short),
        header_timeout=min(lim.header_timeout, short),
    )


class Admission(Generic[C]):
    """Who holds a connection slot: pinned peers, and a bounded set of strangers."""

    def __init__(self, limits: Limits, members: Callable[[], int]) -> None:
        self.limits = limits
        self.members = members  # pinned members now: the unset max_connections follows them
        self.unauthenticated: dict[C, None] = {}  # oldest first
        self.authenticated: set[C] = set()
        self.evicted = 0
        self.refused = 0

    def __len__(self) -> int:
        return len(self.unauthenticated) + len(self.authenticated)

    def admit(self, conn: C) -> bool:
        """Take a slot for a new (unauthenticated) connection, evicting a stranger if needed."""
        limits = self.limits
        members = self.members()
        over_total = len(self) >= connection_limit(limits, members)
        over_strangers = len(self.unauthenticated) >= strangers_limit(limits, members)
        if over_total or over_strangers:
            if not self.unauthenticated:
                self.refused += 1
                return False
            oldest = next(iter(self.unauthenticated))
            self.evicted += 1
            # Once loudly, then quietly: a connection flood must not become a log flood.
            level = logging.WARNING if self.evicted == 1 else logging.DEBUG
            log.log(level, "evicting unauthenticated connection from %s", oldest.peername)
            oldest.abort()  # frees its slot at once (abort() calls the server's released())
        self.unauthenticated[conn] = None
        return True

    def authenticate(self, conn: C) -> None:
        if conn in self.unauthenticated:
            del self.unauthenticated[conn]
            self.authenticated.add(conn)

    def release(self, conn: C) -> None:
        self.unauthenticated.pop(conn, None)
        self.authenticated.discard(conn)

    def all(self) -> list[C]:
        return [*self.unauthenticated, *self.authenticated]
