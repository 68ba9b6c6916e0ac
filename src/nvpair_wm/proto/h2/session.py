"""What both HTTP/2 sessions, server and client, do alike on top of the frame layer (sans-IO).

:class:`H2Session` holds the outbound frames, the connection's state, the peer's settings and
the send windows they move, and hands each inbound frame to its type's handler once the rules
of :data:`~nvpair_wm.proto.h2.frames.FRAME_RULES` held. The handlers both sides share are here
(HEADERS and CONTINUATION up to a whole header block, SETTINGS, PING, PUSH_PROMISE, PRIORITY,
WINDOW_UPDATE); a session adds DATA, RST_STREAM, GOAWAY, what a header block means, how a
stream error is answered and how bodies go out. The connection's :class:`ConnectionState`
(RFC 9113 §6.8) moves through :data:`CONNECTION_TRANSITIONS` (:func:`step`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Final, Generic, Protocol, TypeVar

from h2.errors import ErrorCodes

from nvpair_wm.errors import H2ConnectionError, LocalProtocolError
from nvpair_wm.proto.h2.frames import (
    ACK,
    CONTINUATION,
    END_HEADERS,
    END_STREAM,
    FRAME_RULES,
    MAX_WINDOW,
    PING,
    SETTINGS,
    FrameReader,
    HeaderBlock,
    check_frame,
    frame,
    header_fragment,
)
from nvpair_wm.proto.h2.hpack import Decoder
from nvpair_wm.proto.h2.settings import DEFAULT_WINDOW, PeerSettings

__all__ = [
    "CONNECTION_TRANSITIONS",
    "ConnectionEvent",
    "ConnectionState",
    "H2Session",
    "no_transition",
    "step",
]

_SETTINGS_ACK = frame(SETTINGS, ACK, 0)


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


_DRAINING = ConnectionState.DRAINING  # looked up once (see connection.py)
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
        raise no_transition(state, event, *what) from None


def no_transition(state: enum.Enum, event: enum.Enum, *what: object) -> LocalProtocolError:
    """The error for ``event`` in ``state``, which no table moves: a bug of ours. (A stream's
    step, per request, looks its table up itself and calls this only when that fails.)"""
    name = " ".join(map(str, what))
    return LocalProtocolError(f"HTTP/2 {name}: {event.name} in state {state.name}", 500)


class _Sending(Protocol):
    """What the shared handlers touch of a session's stream."""

    send_window: int


_Stream = TypeVar("_Stream", bound=_Sending)


class H2Session(Generic[_Stream]):
    """The frame handling both sides share; a session subclasses it with its stream type."""

    __slots__ = (
        "_block",
        "_decoder",
        "_handlers",
        "_max_block",
        "_max_continuations",
        "_now",
        "_out",
        "_peer",
        "_reader",
        "_send_window",
        "_settings_seen",
        "_streams",
        "state",
    )

    def __init__(
        self,
        out: list[bytes],
        peer: PeerSettings,
        now: float,
        *,
        max_frame: int,
        max_header_list: int,
        max_block: int,
        max_continuations: int | None,
    ) -> None:
        self._out = out  # outbound frames, joined by data_to_send
        self._peer = peer  # the peer's settings: its windows, frame size, stream limit
        self._reader = FrameReader(max_frame)
        self._decoder = Decoder(max_header_list)  # decoded bytes before ENHANCE_YOUR_CALM
        self._max_block = max_block  # header block octets (as framed) before ENHANCE_YOUR_CALM
        self._max_continuations = max_continuations  # CONTINUATION frames per block (None: any)
        self._now = now  # the time of the bytes or timer being handled
        self._send_window = DEFAULT_WINDOW  # the connection's, for what we send
        self._settings_seen = False  # the peer's preface ends with its SETTINGS (§3.4)
        self._streams: dict[int, _Stream] = {}
        self._block: HeaderBlock | None = None  # a header block awaiting CONTINUATION frames
        self.state = ConnectionState.OPEN
        #: Frame type → its handler, ``_on_`` and the type's name in lowercase.
        self._handlers: dict[int, Callable[[int, int, bytes], None]] = {
            ftype: getattr(self, f"_on_{rule.name.lower()}") for ftype, rule in FRAME_RULES.items()
        }

    def data_to_send(self) -> bytes:
        if self.state is _DRAINING:
            self._draining()
        out = self._out
        data = b"".join(out)  # (one frame is handed back as it is, not copied)
        out.clear()
        return data

    def _move(self, event: ConnectionEvent) -> None:
        self.state = step(CONNECTION_TRANSITIONS, self.state, event, "connection")

    # -- what each session supplies -----------------------------------------------------------
    # _stream_error: the server resets the stream, the client ends the connection (§5.4.2).
    # _known: the stream in progress, None for one that was, a connection error PROTOCOL_ERROR
    # for one never opened (idle, §5.1). _pump, _pump_all: send what waits for the windows.

    def _stream_error(self, sid: int, code: int, why: str = "") -> None:
        raise NotImplementedError

    def _on_header_block(
        self, sid: int, end_stream: bool, block: bytes, dependency: int | None
    ) -> None:
        """A whole header block: decoded whatever becomes of its stream (the decoder's dynamic
        table must follow every block)."""
        raise NotImplementedError

    def _known(self, sid: int, what: str) -> _Stream | None:
        raise NotImplementedError

    def _pump(self, st: _Stream) -> None:
        raise NotImplementedError

    def _pump_all(self) -> None:
        raise NotImplementedError

    def _draining(self) -> None:
        """Called as output is taken while DRAINING (the server ends once nothing is left)."""

    # -- inbound frames -----------------------------------------------------------------------

    def _dispatch(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        """One frame: no other frame inside a header block, the rules of its type, its
        handler; unknown frame types are ignored (§4.1)."""
        if self._block is not None and ftype != CONTINUATION:
            raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, "frame inside a header block")
        rule = FRAME_RULES.get(ftype)
        if rule is None:
            return
        if check_frame(rule, sid, len(payload)):
            self._handlers[ftype](flags, sid, payload)
        else:
            why = f"{rule.name} not {rule.length} octets"  # a PRIORITY of another size, §6.3
            self._stream_error(sid, ErrorCodes.FRAME_SIZE_ERROR, why)

    def _on_headers(self, flags: int, sid: int, payload: bytes) -> None:
        if not sid & 1:  # streams are the client's, odd; the server's pushes are disabled
            raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, f"HEADERS on idle stream {sid}")
        fragment, dependency = header_fragment(flags, payload)
        if flags & END_HEADERS:
            self._on_header_block(sid, bool(flags & END_STREAM), fragment, dependency)
            return
        end_stream = bool(flags & END_STREAM)
        self._block = HeaderBlock(
            sid, end_stream, dependency, self._now, len(payload), bytearray(fragment)
        )

    def _on_continuation(self, flags: int, sid: int, payload: bytes) -> None:
        block = self._block
        if block is None or sid != block.sid:
            raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, "CONTINUATION out of a block")
        whole = block.continue_with(flags, payload, self._max_block, self._max_continuations)
        if whole is not None:
            self._block = None
            self._on_header_block(sid, block.end_stream, whole, block.dependency)

    def _on_ping(self, flags: int, sid: int, payload: bytes) -> None:
        if not flags & ACK:  # (an ACK answers a PING of ours: the client's concern)
            self._out.append(frame(PING, ACK, 0, payload))

    def _on_priority(self, flags: int, sid: int, payload: bytes) -> None:
        if int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF == sid:
            self._stream_error(sid, ErrorCodes.PROTOCOL_ERROR, f"stream {sid} depends on itself")

    def _on_push_promise(self, flags: int, sid: int, payload: bytes) -> None:
        raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, "PUSH_PROMISE: push is not enabled")

    def _on_settings(self, flags: int, sid: int, payload: bytes) -> None:
        """The peer's SETTINGS, applied and acknowledged; an ACK of ours: :meth:`_acked`."""
        if flags & ACK:
            if payload:
                raise H2ConnectionError(ErrorCodes.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            self._acked()
            return
        delta = self._peer.apply(payload)  # checks the values, §6.5.2
        if delta:
            for st in self._streams.values():  # §6.9.2: open streams' windows follow
                st.send_window += delta
                if st.send_window > MAX_WINDOW:
                    raise H2ConnectionError(ErrorCodes.FLOW_CONTROL_ERROR, "window over 2^31-1")
        self._out.append(_SETTINGS_ACK)
        if delta > 0:
            self._pump_all()

    def _acked(self) -> None:
        """The peer acknowledged our SETTINGS."""

    def _on_window_update(self, flags: int, sid: int, payload: bytes) -> None:
        increment = int.from_bytes(payload, "big") & 0x7FFF_FFFF
        if not sid:
            if not increment:
                raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise H2ConnectionError(ErrorCodes.FLOW_CONTROL_ERROR, "window over 2^31-1")
            self._pump_all()
            return
        st = self._known(sid, "WINDOW_UPDATE")
        if st is None:
            return  # closed: window updates may still be in flight (§6.9)
        if not increment:
            self._stream_error(sid, ErrorCodes.PROTOCOL_ERROR, f"WINDOW_UPDATE of 0 on {sid}")
            return
        st.send_window += increment
        if st.send_window > MAX_WINDOW:
            why = f"stream {sid} window over 2^31-1"
            self._stream_error(sid, ErrorCodes.FLOW_CONTROL_ERROR, why)
            return
        self._pump(st)
