"""The pin set read at most once per event-loop tick (an IO-side cache over ``PinSet``).

``PinSet.current()`` costs a ``scandir`` plus a ``stat`` per pinned file (the files' stat
signature; contents are re-read only when it changes). Requests that arrive in the same tick
(HTTP/2 streams of one read, pipelined HTTP/1.1 requests) share one scan; the next tick scans
again, so a removed pin still refuses the very next request that arrives after the removal.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["TickCachedPins"]


class _Pins(Protocol):
    def current(self) -> frozenset[str]: ...


class TickCachedPins:
    """``is_pinned`` over ``pins.current()``, cached until the event loop's next iteration."""

    __slots__ = ("_cached", "_pins")

    def __init__(self, pins: _Pins) -> None:
        self._pins = pins
        self._cached: frozenset[str] | None = None

    def current(self) -> frozenset[str]:
        cached = self._cached
        if cached is None:
            cached = self._cached = self._pins.current()
            asyncio.get_running_loop().call_soon(self._forget)
        return cached

    def is_pinned(self, fingerprint: str) -> bool:
        return fingerprint in self.current()

    def _forget(self) -> None:
        self._cached = None
