"""Receive flow control of an HTTP/2 server connection (sans-IO).

The connection window is reopened for every DATA byte at once (batched to half a window): a
connection window held back would be spent by the peer on younger streams and starve the
oldest one. Stream windows are reopened as bodies are buffered while the connection holds less
than ``h2_body_buffer_budget`` of them, and for the oldest body in any case (so one body always
completes); bodies being dropped always progress. Memory per connection stays under the
budget + ``max_body`` + one initial stream window per open stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import h2.connection
import h2.exceptions

from nvpair_wm.http.core import Limits
from nvpair_wm.proto.h2.streams import Stream

__all__ = ["ReceiveWindows"]


class ReceiveWindows:
    __slots__ = ("_conn", "_conn_owed", "_conn_window", "_half_stream", "_limits", "buffered")

    def __init__(self, conn: h2.connection.H2Connection, limits: Limits) -> None:
        self._conn = conn
        self._limits = limits
        self._conn_window = max(65535, limits.h2_connection_window)
        self._conn_owed = 0  # DATA bytes whose connection window is not yet reopened
        self._half_stream = max(1, limits.h2_initial_window_size // 2)
        self.buffered = 0  # request-body bytes held across streams

    def open_connection_window(self) -> None:
        """Raise the connection window from the protocol's 65,535 to the configured size."""
        extra = self._limits.h2_connection_window - 65535
        if extra > 0:
            self._conn.increment_flow_control_window(extra)

    def data_received(self, flow: int) -> None:
        self._conn_owed += flow
        if self._conn_owed >= self._conn_window // 2:
            self._conn.increment_flow_control_window(self._conn_owed)
            self._conn_owed = 0

    def settle(self, streams: Iterable[Stream]) -> None:
        """Reopen the stream windows that may be reopened now (see the module docstring)."""
        half = self._half_stream
        under_budget = self.buffered <= self._limits.h2_body_buffer_budget
        oldest = True
        for st in list(streams):
            receiving = not st.remote_done
            if receiving and st.owed >= half and (st.mode == "discard" or oldest or under_budget):
                with contextlib.suppress(h2.exceptions.StreamClosedError):  # closed meanwhile
                    self._conn.increment_flow_control_window(st.owed, stream_id=st.sid)
                st.owed = 0
            if receiving and st.mode == "body":
                oldest = False
