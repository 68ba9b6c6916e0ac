"""Receive flow control of an HTTP/2 connection (sans-IO): the connection window of either
session (:class:`ConnectionWindow`), and the server's stream windows (:class:`ReceiveWindows`).

The connection window is reopened for every DATA byte at once (batched to half a window): held
back, it would be spent by the peer on younger streams and starve the oldest one. Stream
windows are reopened as bodies are buffered while the connection holds less than
``h2_body_buffer_budget`` of them, and for the oldest body in any case; dropped bodies always
progress. Memory per connection stays under the budget + ``max_body`` + one initial stream
window per open stream. DATA past the connection's window or a stream's (``recv_window``) is
a FLOW_CONTROL_ERROR (RFC 9113 §6.9.1).
"""

from __future__ import annotations

from collections.abc import Iterable

from h2.errors import ErrorCodes

from nvpair_wm.errors import H2ConnectionError
from nvpair_wm.http.core import Limits
from nvpair_wm.proto.h2.frames import window_update_frame
from nvpair_wm.proto.h2.settings import DEFAULT_WINDOW
from nvpair_wm.proto.h2.streams import BodyMode, Stream

__all__ = ["ConnectionWindow", "ReceiveWindows"]


class ConnectionWindow:
    """The connection's receive window, for either session: DATA past it is a
    FLOW_CONTROL_ERROR; it is reopened (WINDOW_UPDATE on stream 0) once half of it is owed."""

    __slots__ = ("_out", "conn_available", "conn_half", "conn_owed")

    def __init__(self, out: list[bytes], size: int) -> None:
        self._out = out  # the session's outbound frames: WINDOW_UPDATEs are queued there
        self.conn_available = DEFAULT_WINDOW  # what the peer may still send on the connection
        self.conn_owed = 0  # DATA bytes whose connection window is not yet reopened
        self.conn_half = size // 2  # the window is reopened once this much of it is owed
        if size > DEFAULT_WINDOW:  # from the protocol's 65,535 to ``size`` at once
            out.append(window_update_frame(0, size - DEFAULT_WINDOW))
            self.conn_available = size

    def consume(self, flow: int) -> None:
        """``flow`` DATA bytes arrived on the connection (any stream, padding included)."""
        self.conn_available -= flow
        if self.conn_available < 0:
            raise H2ConnectionError(ErrorCodes.FLOW_CONTROL_ERROR, "connection window exceeded")
        self.conn_owed += flow
        if self.conn_owed >= self.conn_half:
            self._out.append(window_update_frame(0, self.conn_owed))
            self.conn_available += self.conn_owed
            self.conn_owed = 0


class ReceiveWindows(ConnectionWindow):
    """The server's: the connection window, and its streams' (:meth:`settle`)."""

    __slots__ = ("_limits", "buffered", "half_stream")

    def __init__(self, out: list[bytes], limits: Limits) -> None:
        super().__init__(out, max(DEFAULT_WINDOW, limits.h2_connection_window))
        self._limits = limits
        #: A stream window is reopened once this much of it is owed.
        self.half_stream = max(1, limits.h2_initial_window_size // 2)
        self.buffered = 0  # request-body bytes held across streams

    def settle(self, streams: Iterable[Stream]) -> None:
        """Reopen the stream windows that may be reopened now (see the module docstring)."""
        half = self.half_stream
        under_budget = self.buffered <= self._limits.h2_body_buffer_budget
        oldest = True
        for st in streams:
            receiving = not st.state.request_whole
            dropping = st.mode is BodyMode.DISCARD
            if receiving and st.owed >= half and (dropping or oldest or under_budget):
                self._out.append(window_update_frame(st.sid, st.owed))
                st.recv_window += st.owed
                st.owed = 0
            if receiving and st.mode is BodyMode.BUFFER:
                oldest = False
