"""Turns: at most ``limit`` holders at once, the others served first come first (sans-IO).

The inter-node server gives TLS handshakes turns: handshakes that all progress at once all take
as long as all of them, so a thousand members reconnecting together (after a restart or a healed
partition) would all pass their handshake timeout together and retry together. In turns, a few
dozen finish at a time and the others wait, reading paused, within their own timeout.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import Final, Generic, TypeVar

__all__ = ["Turn", "Turns"]

T = TypeVar("T")

#: The queue is swept of waiters that left once it is this long, then once it doubles what the
#: last sweep kept: it holds at most about twice the waiters still there, however many leave.
_SWEEP_AT: Final = 64


class Turn(enum.Enum):
    """Where one would-be holder stands; the caller keeps it (:class:`Turns` keeps only the
    count of holders and the queue of waiters)."""

    NONE = "none"  # needs no turn (plaintext), or its turn is over
    WAITING = "waiting"  # queued, reading paused, until :meth:`Turns.release` names it
    HOLDING = "holding"  # holds one of the ``limit`` turns until it gives it back


class Turns(Generic[T]):
    """Who holds a turn is the caller's to remember; this counts them and keeps the queue."""

    def __init__(self, limit: int, gone: Callable[[T], bool]) -> None:
        self.limit = limit
        self._gone = gone  # a waiter that no longer needs its turn (its connection closed)
        self.holding = 0
        self._waiting: deque[T] = deque()
        self._sweep_at = _SWEEP_AT

    def take(self, who: T) -> bool:
        """True: ``who`` holds a turn now; False: it waits for :meth:`release` to name it."""
        if self.holding < self.limit:
            self.holding += 1
            return True
        waiting = self._waiting
        if len(waiting) >= self._sweep_at:  # strangers that left while they waited (a flood)
            gone = self._gone
            waiting = self._waiting = deque(w for w in waiting if not gone(w))
            self._sweep_at = max(_SWEEP_AT, 2 * len(waiting))
        waiting.append(who)
        return False

    def release(self) -> T | None:
        """A turn ended; the waiter that holds it now (None if nobody waits)."""
        self.holding -= 1
        waiting = self._waiting
        while waiting:
            who = waiting.popleft()
            if not self._gone(who):
                self.holding += 1
                return who
        return None

    def set_limit(self, limit: int) -> list[T]:
        """A new limit (a configuration reload): the waiters that hold a turn now, first come
        first, when it grew; holders past a smaller one keep theirs until they give it back."""
        self.limit = limit
        granted: list[T] = []
        waiting = self._waiting
        while self.holding < limit and waiting:
            who = waiting.popleft()
            if not self._gone(who):
                self.holding += 1
                granted.append(who)
        return granted

    @property
    def waiting(self) -> int:
        return len(self._waiting)
