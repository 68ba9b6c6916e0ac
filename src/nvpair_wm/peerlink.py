"""The state of a link to a peer, and what a peer's answer means (sans-IO, no clock of its own).

A link is in one :class:`LinkState` at a time and moves only through :data:`TRANSITIONS`, a
table of (state, :class:`LinkEvent`) → state that is total (every pair has a row, so no event
can find the link in a state nobody thought of). :class:`nvpair_wm.outbox.PeerOutbox` holds the
state and moves it; :mod:`nvpair_wm.broadcaster` only reports what its IO saw (connected,
disconnected, a response, a failure) and asks the state what to do.

::

    CONNECTING ──connected──▶ SENDING ──failed──▶ BACKING_OFF ──answered──▶ SENDING
        │  ▲                    │ ▲                  │ exhausted
        │  └──disconnected──────┘ └──answered─┐      ▼
        │                                     └── GIVEN_UP (queue dropped; probing, resync)
        └─ any state ──409 other major──▶ VERSION_REFUSED ──answered──▶ SENDING
       any state ──drain──▶ DRAINING ──stop──▶ STOPPED

:func:`judge` is what an answer means: status, headers, body and the wall clock in; an
:class:`Answer` out (accept, accept but for named frames, retry and not before when, split,
drop, or stop and probe for another contract version). It has no state and no IO, so the rules
of the answers are tested without sockets (``tests/test_peerlink.py``).
"""

from __future__ import annotations

import email.utils
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from nvpair_wm.versions import CONTRACT_HEADER, REFUSED_STATUS, ContractVersion

__all__ = [
    "HOLDING",
    "TRANSITIONS",
    "Answer",
    "LinkEvent",
    "LinkState",
    "Verdict",
    "bad_frames",
    "body_text",
    "judge",
    "retry_after",
]

_BODY_TEXT_MAX: Final = 1000


class LinkState(enum.Enum):
    """Where a link to one peer stands."""

    CONNECTING = "connecting"  # no connection and no failure run: connect when ready
    SENDING = "sending"  # connected; the last request (if any) was answered
    BACKING_OFF = "backing-off"  # in a run of failures: next attempt at the backoff's end
    GIVEN_UP = "given-up"  # retries exhausted: queue dropped, probing, resync when it answers
    VERSION_REFUSED = "version-refused"  # the peer speaks another major: probing only
    DRAINING = "draining"  # shutting down: send what is queued, no snapshots
    STOPPED = "stopped"  # done: nothing is sent again


class LinkEvent(enum.Enum):
    """What the IO shell (or the outbox's own accounting) reports about a link."""

    CONNECTED = "connected"  # a connection is up (pin-checked)
    DISCONNECTED = "disconnected"  # the connection ended with no request in flight
    ANSWERED = "answered"  # the peer answered a request: 2xx, a partial 400 or a final 4xx
    FAILED = "failed"  # a retryable failure within the retry budget
    EXHAUSTED = "exhausted"  # a failure that used up the retry budget
    REFUSED = "refused"  # 409 naming another major contract version
    DRAIN = "drain"  # shutdown began
    STOP = "stop"  # the link is stopped


_S = LinkState
_E = LinkEvent

#: States in which the queue takes nothing (the resync on the peer's return carries it).
HOLDING: Final = frozenset({_S.GIVEN_UP, _S.VERSION_REFUSED})


def _rows(state: LinkState, **to: LinkState) -> dict[tuple[LinkState, LinkEvent], LinkState]:
    """One state's rows: ``to`` by event name; drain and stop go where they always go."""
    rows = {(state, LinkEvent[name.upper()]): target for name, target in to.items()}
    rows.setdefault((state, _E.DRAIN), _S.DRAINING)
    rows.setdefault((state, _E.STOP), _S.STOPPED)
    return rows


#: Every (state, event) → next state. A test checks that it is total.
TRANSITIONS: Final[dict[tuple[LinkState, LinkEvent], LinkState]] = {
    **_rows(
        _S.CONNECTING,
        connected=_S.SENDING,
        disconnected=_S.CONNECTING,
        answered=_S.CONNECTING,  # a late answer of a connection already reported gone
        failed=_S.BACKING_OFF,
        exhausted=_S.GIVEN_UP,  # a retry budget of one attempt
        refused=_S.VERSION_REFUSED,
    ),
    **_rows(
        _S.SENDING,
        connected=_S.SENDING,
        disconnected=_S.CONNECTING,
        answered=_S.SENDING,
        failed=_S.BACKING_OFF,
        exhausted=_S.GIVEN_UP,
        refused=_S.VERSION_REFUSED,
    ),
    **_rows(
        _S.BACKING_OFF,
        connected=_S.BACKING_OFF,  # only an answered request ends the run
        disconnected=_S.BACKING_OFF,
        answered=_S.SENDING,
        failed=_S.BACKING_OFF,
        exhausted=_S.GIVEN_UP,
        refused=_S.VERSION_REFUSED,
    ),
    **_rows(
        _S.GIVEN_UP,
        connected=_S.GIVEN_UP,  # the resync is the probe; its answer ends the state
        disconnected=_S.GIVEN_UP,
        answered=_S.SENDING,
        failed=_S.GIVEN_UP,
        exhausted=_S.GIVEN_UP,
        refused=_S.VERSION_REFUSED,
    ),
    **_rows(
        _S.VERSION_REFUSED,
        connected=_S.VERSION_REFUSED,
        disconnected=_S.VERSION_REFUSED,
        answered=_S.SENDING,  # it takes our version again (upgraded, or we were)
        failed=_S.VERSION_REFUSED,
        exhausted=_S.VERSION_REFUSED,
        refused=_S.VERSION_REFUSED,
    ),
    **_rows(
        _S.DRAINING,
        **{e.name.lower(): _S.DRAINING for e in _E if e is not _E.STOP},
    ),
    **_rows(_S.STOPPED, **{e.name.lower(): _S.STOPPED for e in _E}),
}


# -- what an answer means --------------------------------------------------------------------------


class Verdict(enum.Enum):
    """What to do with a batch after the peer's answer."""

    ACCEPTED = "accepted"  # 2xx: every frame delivered
    PARTLY = "partly"  # 400 naming the frames it refused; the others were applied
    RETRY = "retry"  # the same frames again after the backoff (and any Retry-After)
    SPLIT = "split"  # 413: halve this link's batch size and send again
    DROP = "drop"  # a final answer: the frames are given up, the link is fine
    REFUSED = "refused"  # 409, another major: drop everything, probe every interval


@dataclass(frozen=True, slots=True)
class Answer:
    """:func:`judge`'s result; ``detail`` is for ``lastError`` and the logs."""

    verdict: Verdict
    status: int
    detail: str = ""
    bad: frozenset[int] = frozenset()  # PARTLY: the refused frames' indexes in the batch
    retry_after: float | None = None  # RETRY: the peer's Retry-After, seconds
    theirs: str | None = None  # REFUSED: the contract version the peer speaks


_ACCEPTED: Final = {s: Answer(Verdict.ACCEPTED, s) for s in range(200, 300)}
# Answers after which the same frames are sent again, besides 5xx: 403 says the peer does not
# pin us *yet* (a property of the link, not of the frames), 408 and 429 are the peer's load.
_RETRY_STATUSES: Final = frozenset({403, 408, 429})

_error_list = msgspec.json.Decoder(list[dict[str, Any]])


def judge(
    status: int, headers: Sequence[tuple[bytes, bytes]], body: bytes, frames: int, now: float
) -> Answer:
    """What the answer ``status``/``headers``/``body`` to a batch of ``frames`` frames means.

    ``now``: the wall clock (seconds since the epoch), for a Retry-After given as a date."""
    accepted = _ACCEPTED.get(status)
    if accepted is not None:  # the usual answer: no header or body is read
        return accepted
    if status == REFUSED_STATUS and (theirs := _other_major(headers)) is not None:
        return Answer(Verdict.REFUSED, status, theirs=theirs)
    text = body_text(body)
    if status == 400 and (bad := bad_frames(body, frames)) is not None:
        return Answer(Verdict.PARTLY, status, f"HTTP 400: {text}", bad=bad)
    if status == 413:  # the outbox drops a batch of one frame instead (it cannot split it)
        return Answer(Verdict.SPLIT, status)
    if status in _RETRY_STATUSES or status >= 500:
        wait = retry_after(_header(headers, b"retry-after"), now)
        return Answer(Verdict.RETRY, status, f"HTTP {status}: {text}", retry_after=wait)
    return Answer(Verdict.DROP, status, text)


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def _other_major(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """The peer's contract version when its answer says it speaks another major."""
    value = _header(headers, CONTRACT_HEADER)
    if value is None:
        return None
    try:
        theirs = ContractVersion.parse(value)
    except ValueError:
        return None
    return None if theirs.served() else theirs.text


def body_text(body: bytes) -> str:
    """A response body as log text, cut at a length a log line can carry."""
    text = body.decode("utf-8", "replace")
    return text if len(text) <= _BODY_TEXT_MAX else text[:_BODY_TEXT_MAX] + "..."


def retry_after(value: bytes | None, now: float) -> float | None:
    """Seconds from a ``Retry-After`` value (delta-seconds or an HTTP-date; ``now``: the wall
    clock), None if absent or unreadable."""
    if value is None:
        return None
    text = value.decode("latin-1").strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now)


def bad_frames(body: bytes, count: int) -> frozenset[int] | None:
    """Indexes of the frames a 400 refused (``error.data.index`` of each JSON-RPC error).

    None when the body does not say (then the whole batch is taken as refused).
    """
    try:
        errors = _error_list.decode(body)
    except msgspec.DecodeError:
        return None
    bad: set[int] = set()
    for err in errors:
        data = err.get("error", {}).get("data") if isinstance(err.get("error"), dict) else None
        index = data.get("index") if isinstance(data, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            return None
        bad.add(index)
    return frozenset(bad) if bad else None
