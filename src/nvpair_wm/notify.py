"""systemd's readiness and watchdog protocol (``sd_notify``), without a dependency.

Under ``Type=notify`` systemd passes ``$NOTIFY_SOCKET``: a Unix datagram socket (a path, or an
abstract name written with a leading ``@``). Each datagram is newline-separated ``KEY=VALUE``
lines: ``READY=1`` (the unit counts as started), ``STATUS=...`` (shown by ``systemctl status``),
``RELOADING=1`` (with ``MONOTONIC_USEC``), ``STOPPING=1`` and ``WATCHDOG=1``. With
``WatchdogSec=`` systemd also passes ``$WATCHDOG_USEC`` (and ``$WATCHDOG_PID``, the process
meant): a process that sends no ``WATCHDOG=1`` within that interval is killed and restarted.
The pings come from the event loop itself (node.py), so a loop stuck for longer than the
interval stops them, which is the point.

Without ``$NOTIFY_SOCKET`` every call does nothing. A send that fails (systemd gone, the socket
full) is one debug line and never an error: the protocol is advisory.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Notifier", "NotifySettings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NotifySettings:
    """What the environment says: where to notify, and the watchdog interval (seconds; None:
    no watchdog, or one meant for another process)."""

    address: str | bytes | None = None
    watchdog_interval: float | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], pid: int) -> NotifySettings:
        raw = environ.get("NOTIFY_SOCKET", "")
        address: str | bytes | None
        if not raw:
            address = None
        elif raw.startswith("@"):  # an abstract socket: a leading NUL byte on the wire
            address = b"\0" + raw[1:].encode()
        else:
            address = raw
        interval: float | None = None
        usec = environ.get("WATCHDOG_USEC", "")
        owner = environ.get("WATCHDOG_PID", "")
        for_us = not owner or (owner.isdigit() and int(owner) == pid)
        if address is not None and usec.isdigit() and int(usec) > 0 and for_us:
            interval = int(usec) / 1e6
        return cls(address, interval)

    @property
    def ping_every(self) -> float | None:
        """Half the watchdog interval, as sd_watchdog_enabled(3) advises; None: no pings."""
        return None if self.watchdog_interval is None else self.watchdog_interval / 2


class Notifier:
    """Sends notify datagrams to systemd; every method is a no-op when not under systemd."""

    def __init__(self, settings: NotifySettings) -> None:
        self.settings = settings
        self._sock: socket.socket | None = None
        self._status: str | None = None
        self._failed = False
        if settings.address is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.setblocking(False)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        return cls(
            NotifySettings.from_environ(os.environ if environ is None else environ, os.getpid())
        )

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, *lines: str) -> None:
        sock, address = self._sock, self.settings.address
        if sock is None or address is None or not lines:
            return
        try:
            sock.sendto("\n".join(lines).encode(), address)
        except OSError as exc:
            if not self._failed:  # once: systemd may simply be gone
                log.debug("systemd notify to %r failed: %s", address, exc)
            self._failed = True

    def ready(self, status: str) -> None:
        self._status = status
        self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> None:
        """``STATUS=``, sent only when it changed."""
        if status != self._status:
            self._status = status
            self.send(f"STATUS={status}")

    def reloading(self) -> None:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> None:
        self._status = "stopping"
        self.send("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> None:
        if self.settings.watchdog_interval is not None:
            self.send("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
