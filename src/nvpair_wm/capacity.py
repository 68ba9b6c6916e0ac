"""What a cluster of N members needs of this node's limits, and which limit caps it.

In the full mesh every member holds a connection to this node (its link) and this node holds one
to every member. While a link is re-established (the member restarted, a partition healed) its
old connection may still be open here until the server notices it is dead, so a member can hold
two for a while; and after a restart or a healed partition every member may connect within the
same second. So, per member, the node needs:

* **a handshake slot**: every member may be in its TLS handshake at once (before it is, it is
  a stranger): ``http.max_unauthenticated_connections`` unset (the default) is
  ``max(128, N)``; a smaller budget evicts members' handshakes under a mass reconnect, which
  then retry and are evicted again;
* **connections**: 2 (``CONNECTIONS_PER_MEMBER``), on top of the strangers' budget:
  ``http.max_connections`` unset is ``max(1024, 2 N + strangers)``;
* **a listen backlog** entry (every member's SYN in the same second): ``http.listen_backlog``
  unset is ``max(128, N + 128)``, and the kernel caps it at ``net.core.somaxconn``;
* **descriptors**: the connection limit plus one outbound connection per member plus the
  node's own (``DESCRIPTORS_BASE``: listeners, pipes, journal, inotify, epoll), within the
  open-file limit the process raised to its hard limit at start.

:func:`shortfalls` (pure: the system's limits are inputs, read by :func:`open_files` and
:func:`somaxconn`) names each limit that a configured (or kernel) value sets below what the
current member count needs, with the key or setting that raises it: the node logs each at
start and when it changes, and ``manager:status`` reports them (``StatusResult.capacity``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvpair_wm import platforms
from nvpair_wm.http.core import Limits

__all__ = [
    "CONNECTIONS_PER_MEMBER",
    "Shortfall",
    "Watch",
    "connection_limit",
    "descriptors_needed",
    "listen_backlog",
    "open_files",
    "shortfalls",
    "somaxconn",
    "strangers_limit",
]

CONNECTIONS_PER_MEMBER: Final = 2  # its link, and its old one while a reconnect overlaps it
DESCRIPTORS_BASE: Final = 64  # the node's own: listeners, pipes, journal, inotify, epoll, ...
MIN_CONNECTIONS: Final = 1024  # the unset default's floor (a cluster of a few nodes)
MIN_BACKLOG: Final = 128  # the unset default's floor
MIN_STRANGERS: Final = 128  # the strangers' budget, whatever the member count
SOMAXCONN: Final = Path("/proc/sys/net/core/somaxconn")


def strangers_limit(limits: Limits, members: int) -> int:
    """``http.max_unauthenticated_connections``, or (unset) every member at once, at least 128."""
    if limits.max_unauthenticated_connections is not None:
        return limits.max_unauthenticated_connections
    return max(MIN_STRANGERS, members)


def connection_limit(limits: Limits, members: int) -> int:
    """``http.max_connections``, or (unset) what ``members`` members need, at least 1,024."""
    if limits.max_connections is not None:
        return limits.max_connections
    return max(MIN_CONNECTIONS, _connections_needed(limits, members))


def listen_backlog(limits: Limits, members: int) -> int:
    """``http.listen_backlog``, or (unset) every member at once and 128 strangers."""
    if limits.listen_backlog is not None:
        return limits.listen_backlog
    return max(MIN_BACKLOG, _backlog_needed(members))


def descriptors_needed(limits: Limits, members: int) -> int:
    """Open files the node may hold with ``members`` members: every connection both ways."""
    return connection_limit(limits, members) + members + DESCRIPTORS_BASE


def _connections_needed(limits: Limits, members: int) -> int:
    return CONNECTIONS_PER_MEMBER * members + strangers_limit(limits, members)


def _backlog_needed(members: int) -> int:
    return members + MIN_STRANGERS


def open_files() -> int | None:
    """The soft open-file limit of this process (None: unlimited)."""
    return platforms.open_files_limit()


def somaxconn() -> int | None:
    """The kernel's cap on a listen backlog, None where it cannot be read."""
    try:
        return int(SOMAXCONN.read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A limit that caps the cluster below its member count: ``key`` raises it."""

    key: str  # a config key, or the system setting (RLIMIT_NOFILE, net.core.somaxconn)
    limit: int
    needed: int
    members: int

    def message(self) -> str:
        how = _HOW.get(self.key, f"set {self.key} in the --config file")
        return (
            f"{self.key} = {self.limit} caps this node below its {self.members} members, which "
            f"need {self.needed}: {how}"
        )


_HOW: Final = {
    "RLIMIT_NOFILE": "raise the open-file hard limit (ulimit -Hn, systemd LimitNOFILE=)",
    "net.core.somaxconn": "raise the kernel's backlog cap (sysctl net.core.somaxconn)",
}


def shortfalls(
    limits: Limits, members: int, open_files: int | None, kernel_backlog: int | None
) -> list[Shortfall]:
    """Every limit below what ``members`` members need (``open_files``: the soft
    RLIMIT_NOFILE, None when unlimited; ``kernel_backlog``: net.core.somaxconn, if known)."""
    out: list[Shortfall] = []
    strangers = strangers_limit(limits, members)
    if strangers < members:
        out.append(Shortfall("http.max_unauthenticated_connections", strangers, members, members))
    conns = connection_limit(limits, members)
    need = _connections_needed(limits, members)
    if conns < need:
        out.append(Shortfall("http.max_connections", conns, need, members))
    backlog = listen_backlog(limits, members)
    need = _backlog_needed(members)
    if backlog < need:
        out.append(Shortfall("http.listen_backlog", backlog, need, members))
    elif kernel_backlog is not None and kernel_backlog < min(backlog, need):
        out.append(Shortfall("net.core.somaxconn", kernel_backlog, need, members))
    need = descriptors_needed(limits, members)
    if open_files is not None and open_files < need:
        out.append(Shortfall("RLIMIT_NOFILE", open_files, need, members))
    return out


class Watch:
    """The shortfalls of the last check, so that each is logged once, when it appears."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.current: list[Shortfall] = []

    def check(
        self, members: int, open_files: int | None, kernel_backlog: int | None
    ) -> list[Shortfall]:
        """Check again; returns the shortfalls that were not there at the last check."""
        before = {s.key: s for s in self.current}
        self.current = shortfalls(self.limits, members, open_files, kernel_backlog)
        return [s for s in self.current if before.get(s.key) != s]
