"""Receive flow control of an HTTP/2 server connection (sans-IO).

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

__all__ = ["ReceiveWindows"]


class ReceiveWindows:
    __slots__ = (
        "_conn_window",
        "_limits",
        "_out",
        "buffered",
        "conn_available",
        "conn_half",
        "conn_owed",
        "half_stream",
    )

    def __init__(self, out: list[bytes], limits: Limits) -> None:
        self._out = out  # the session's outbound frames: WINDOW_UPDATEs are queued there
        self._limits = limits
        self._conn_window = max(DEFAULT_WINDOW, limits.h2_connection_window)
        self.conn_available = DEFAULT_WINDOW  # what the peer may still send on the connection
        self.conn_owed = 0  # DATA bytes whose connection window is not yet reopened
        #: The connection window is reopened once this much of it is owed.
        self.conn_half = self._conn_window // 2
        #: A stream window is reopened once this much of it is owed.
        self.half_stream = max(1, limits.h2_initial_window_size // 2)
        self.buffered = 0  # request-body bytes held across streams

    def open_connection_window(self) -> None:
        """Raise the connection window from the protocol's 65,535 to the configured size."""
        extra = self._conn_window - DEFAULT_WINDOW
        if extra > 0:
            self._out.append(window_update_frame(0, extra))
            self.conn_available += extra

    def consume(self, flow: int) -> None:
        """``flow`` DATA bytes arrived on the connection (any stream, padding included)."""
        owed = self.conn_owed + flow
        if owed < self.conn_half and flow <= self.conn_available:
            self.conn_available -= flow  # the usual frame: within the window, nothing owed yet
            self.conn_owed = owed
            return
        self.conn_available -= flow
        if self.conn_available < 0:
            raise H2ConnectionError(ErrorCodes.FLOW_CONTROL_ERROR, "connection window exceeded")
        self.conn_owed += flow
        if self.conn_owed >= self.conn_half:
            self._out.append(window_update_frame(0, self.conn_owed))
            self.conn_available += self.conn_owed
            self.conn_owed = 0

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
