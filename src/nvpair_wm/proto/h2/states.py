"""The connection states both HTTP/2 sessions share (RFC 9113 §6.8), and :func:`step`, which
moves a state through its transition table.

A connection is OPEN until a graceful GOAWAY goes out (the server's shutdown) or comes in (the
client's server going away): DRAINING, the streams in flight finish and no new one opens. It is
CLOSED once the session is over (the final GOAWAY, a connection error, EOF, a timeout).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, TypeVar

from nvpair_wm.errors import LocalProtocolError

__all__ = ["CONNECTION_TRANSITIONS", "ConnectionEvent", "ConnectionState", "step"]


class ConnectionState(enum.Enum):
    """Where an HTTP/2 connection is, from either side."""

    OPEN = "streams may open"
    DRAINING = "a graceful GOAWAY went either way: streams in flight finish, no new one opens"
    CLOSED = "the session is over: the driver flushes and closes"

    __hash__ = object.__hash__  # identity: table lookups stay in C (as StreamState's)


class ConnectionEvent(enum.Enum):
    """What moves a connection from one :class:`ConnectionState` to the next."""

    GOAWAY = "a graceful GOAWAY: sent by the server's shutdown, received by the client"
    END = "the session ends: final GOAWAY, connection error, EOF or timeout"

    __hash__ = object.__hash__


_C, _V = ConnectionState, ConnectionEvent
#: (state, event) → next state; any other pair is a bug of ours (:class:`LocalProtocolError`).
CONNECTION_TRANSITIONS: Final[dict[tuple[ConnectionState, ConnectionEvent], ConnectionState]] = {
    (_C.OPEN, _V.GOAWAY): _C.DRAINING,
    (_C.DRAINING, _V.GOAWAY): _C.DRAINING,  # a later GOAWAY may lower the last stream id
    (_C.OPEN, _V.END): _C.CLOSED,
    (_C.DRAINING, _V.END): _C.CLOSED,
}

_State = TypeVar("_State", bound=enum.Enum)
_Event = TypeVar("_Event", bound=enum.Enum)


def step(
    table: Mapping[tuple[_State, _Event], _State], state: _State, event: _Event, *what: object
) -> _State:
    """The state ``table`` gives for ``event`` in ``state``; :class:`LocalProtocolError` for a
    pair it does not hold, naming ``what`` (the connection, stream 5) in its message."""
    try:
        return table[state, event]
    except KeyError:
        name = " ".join(map(str, what))
        why = f"HTTP/2 {name}: {event.name} in state {state.name}"
        raise LocalProtocolError(why, 500) from None
