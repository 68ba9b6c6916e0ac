"""The journal's health (sans-IO): one state, moved only through :data:`TRANSITIONS`.

Every failure of the journal's file (at open, an append, an fsync, a rename, a directory's
fsync, a compaction's install; at start or later) is the same event, :attr:`Event.FAILED`: the
journal stops appending (the log now misses records), shows ``failing`` in ``manager:status``,
the metrics and ``/readyz``, and retries with backoff to rewrite the current state whole
(``docs/crash-safety.md``); :attr:`Event.RECOVERED` makes it healthy again. ``off`` is only what
configuration asked for: a journal that exists is never off.
"""

from __future__ import annotations

import enum
from typing import Final, Literal, TypeAlias

__all__ = [
    "APPENDING",
    "TRANSITIONS",
    "Event",
    "Health",
    "IllegalTransition",
    "JournalHealth",
    "Status",
]

#: What ``manager:status`` says of the journal (the contract's ``JournalStatus.state``).
Status: TypeAlias = Literal["off", "healthy", "failing"]


class JournalHealth(enum.Enum):
    """What the journal is doing; ``status`` is what ``manager:status`` says of it."""

    OFF = "off"  # configuration asked for no journal (no cluster dir, or journal.enabled false)
    OPENING = "opening"  # made, its file not opened yet
    OK = "ok"  # appending: the log holds every record since the last rewrite
    COMPACTING = "compacting"  # OK, and one compaction runs (at most one at a time)
    # OK, and a compaction's file was renamed over the log with its rename and the old log's
    # close left to the next group commit (in a worker thread, off the event loop)
    INSTALLED = "installed"
    FAILING = "failing"  # nothing is appended; the current state is rewritten when writing works
    CLOSED = "closed"  # the node stopped

    @property
    def status(self) -> Status:
        """The contract's ``JournalStatus.state``: ``off``, ``healthy`` or ``failing``."""
        return _STATUS[self]


_STATUS: Final[dict[JournalHealth, Status]] = {
    JournalHealth.OFF: "off",
    JournalHealth.OPENING: "healthy",
    JournalHealth.OK: "healthy",
    JournalHealth.COMPACTING: "healthy",
    JournalHealth.INSTALLED: "healthy",
    JournalHealth.FAILING: "failing",
    JournalHealth.CLOSED: "off",
}
APPENDING: Final = frozenset((JournalHealth.OK, JournalHealth.COMPACTING, JournalHealth.INSTALLED))


class Event(enum.Enum):
    OPENED = "the file was read, checked and opened for appending"
    BEGAN = "a compaction began"
    ENDED = "a compaction ended without installing anything (failed, abandoned, or no change)"
    INSTALLED = "a compaction installed, its rename and the old log's close left to the commit"
    COMMITTED = "a group commit synced the installed file and its directory"
    FAILED = "opening, writing, syncing or renaming the journal failed"
    RECOVERED = "the current state was rewritten whole"
    CLOSED = "the node stopped"


_H = JournalHealth
#: (state, event) → the next state. A pair not here is a bug (:class:`IllegalTransition`).
TRANSITIONS: Final[dict[tuple[JournalHealth, Event], JournalHealth]] = {
    (_H.OPENING, Event.OPENED): _H.OK,
    (_H.OPENING, Event.FAILED): _H.FAILING,
    (_H.OK, Event.BEGAN): _H.COMPACTING,
    (_H.OK, Event.COMMITTED): _H.OK,
    (_H.OK, Event.FAILED): _H.FAILING,
    (_H.OK, Event.CLOSED): _H.CLOSED,
    (_H.COMPACTING, Event.ENDED): _H.OK,
    (_H.COMPACTING, Event.INSTALLED): _H.INSTALLED,
    (_H.COMPACTING, Event.COMMITTED): _H.COMPACTING,
    (_H.COMPACTING, Event.FAILED): _H.FAILING,
    (_H.COMPACTING, Event.CLOSED): _H.CLOSED,
    (_H.INSTALLED, Event.COMMITTED): _H.OK,
    (_H.INSTALLED, Event.FAILED): _H.FAILING,
    (_H.INSTALLED, Event.CLOSED): _H.CLOSED,
    # A compaction that began before the failure ends without installing anything.
    (_H.FAILING, Event.ENDED): _H.FAILING,
    (_H.FAILING, Event.FAILED): _H.FAILING,
    (_H.FAILING, Event.RECOVERED): _H.OK,
    (_H.FAILING, Event.CLOSED): _H.CLOSED,
    (_H.CLOSED, Event.ENDED): _H.CLOSED,  # a compaction abandoned as the node stopped
    (_H.CLOSED, Event.CLOSED): _H.CLOSED,
}


class IllegalTransition(RuntimeError):
    """A (state, event) pair the table does not have: a bug of the journal's, not of the disk."""


class Health:
    """The journal's state, and while failing since when, why, and when to retry (monotonic
    ``retry_at``; the pause doubles from ``backoff`` to ``backoff_max`` per failed attempt).
    ``appending``: whether the state is one that appends (:data:`APPENDING`)."""

    __slots__ = (
        "_pause",
        "appending",
        "backoff",
        "backoff_max",
        "failing_since",
        "last_error",
        "retry_at",
        "state",
    )

    def __init__(self, backoff: float, backoff_max: float) -> None:
        self.state = JournalHealth.OPENING
        # Whether records go to the file: the state's, kept beside it by move() (a plain
        # attribute, read per request: no enum hashing there).
        self.appending = False
        self.backoff, self.backoff_max = backoff, backoff_max
        self.failing_since: float | None = None  # unix time of the first failure of the run
        self.last_error: str | None = None
        self.retry_at = 0.0
        self._pause = backoff

    def move(self, event: Event) -> JournalHealth:
        try:
            state = self.state = TRANSITIONS[self.state, event]
        except KeyError:
            raise IllegalTransition(f"journal {self.state.name}: {event.value}") from None
        self.appending = state in APPENDING
        return state

    def fail(self, error: str, wall: float, mono: float) -> bool:
        """A failure (``error``: what failed and why); True when it starts a failing run (the
        caller logs it once), False when the journal was failing already (a failed rewrite:
        the next attempt waits twice as long)."""
        first = self.state is not JournalHealth.FAILING
        self.move(Event.FAILED)
        self.last_error = error
        if first:
            self.failing_since = wall
            self._pause = self.backoff
        self.retry_at = mono + self._pause
        if not first:
            self._pause = min(self._pause * 2, self.backoff_max)
        return first

    def set_backoff(self, backoff: float, backoff_max: float) -> None:
        """New bounds (a configuration reload): the next failed attempt waits within them."""
        self.backoff, self.backoff_max = backoff, backoff_max
        self._pause = min(max(self._pause, backoff), backoff_max)

    def recovered(self) -> None:
        self.move(Event.RECOVERED)
        self.failing_since = self.last_error = None

    def recovery_delay(self, mono: float) -> float | None:
        """Seconds until the next rewrite attempt is due (0: now); None unless failing."""
        if self.state is not JournalHealth.FAILING:
            return None
        return max(0.0, self.retry_at - mono)
