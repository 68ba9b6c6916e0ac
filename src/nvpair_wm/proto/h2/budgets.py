"""Flood budgets of an HTTP/2 connection (sans-IO): frames that cost us without progress.

Counted per ``h2_rate_window`` seconds: RST_STREAM (rapid reset, CVE-2023-44487, plus the
resets the client makes us send: "MadeYouReset"), SETTINGS, PING, PRIORITY, unknown frames,
empty DATA, DATA on streams no longer tracked, pointless WINDOW_UPDATEs, and refused streams.
Overflowing one ends the connection with GOAWAY ENHANCE_YOUR_CALM.
"""

from __future__ import annotations

from h2.errors import ErrorCodes

from nvpair_wm.errors import H2ConnectionError
from nvpair_wm.http.core import Limits
from nvpair_wm.proto.h2.frames import (
    CONTINUATION,
    DATA,
    PING,
    PRIORITY,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
)

__all__ = ["FloodBudgets", "Rate"]


class Rate:
    """A counter over fixed windows of ``window`` seconds; :meth:`hit` says when it overflows."""

    __slots__ = ("count", "limit", "start", "window")

    def __init__(self, window: float, limit: int) -> None:
        self.window = window
        self.limit = limit
        self.start = float("-inf")
        self.count = 0

    def hit(self, now: float) -> bool:
        if now - self.start >= self.window:
            self.start = now
            self.count = 0
        self.count += 1
        return self.count > self.limit


class FloodBudgets:
    """The budgets of one connection."""

    __slots__ = ("control", "refused", "resets")

    def __init__(self, limits: Limits) -> None:
        window = limits.h2_rate_window
        self.resets = Rate(window, limits.h2_max_resets_per_window)
        self.control = Rate(window, limits.h2_max_control_frames_per_window)
        self.refused = Rate(window, limits.h2_max_refused_per_window)

    def account(self, ftype: int, now: float, *, waiting_for_window: bool) -> None:
        """Count one inbound frame that is not a request's own (the session counts no HEADERS
        opening a stream and no DATA that moves bytes or ends an open stream): so DATA here
        moves nothing or is for a stream no longer tracked. ``waiting_for_window``: a response
        waits for window on the frame's stream. ENHANCE_YOUR_CALM once a budget is spent."""
        if ftype == RST_STREAM:
            self.reset(now)
            return
        if ftype in (SETTINGS, PING, PRIORITY, DATA) or ftype > CONTINUATION:
            control = True
        elif ftype == WINDOW_UPDATE:
            control = not waiting_for_window
        else:
            control = False
        if control and self.control.hit(now):
            raise H2ConnectionError(ErrorCodes.ENHANCE_YOUR_CALM, "control frame flood")

    def reset(self, now: float, what: str = "too many stream resets") -> None:
        """Count a reset (the peer's, or one its frames made us send)."""
        if self.resets.hit(now):
            raise H2ConnectionError(ErrorCodes.ENHANCE_YOUR_CALM, what)

    def refuse(self, now: float) -> None:
        if self.refused.hit(now):
            raise H2ConnectionError(ErrorCodes.ENHANCE_YOUR_CALM, "too many refused streams")
