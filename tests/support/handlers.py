"""Handlers for the sans-IO sessions under test."""

from __future__ import annotations

from nvpair_wm.http.core import Request, Response, empty_response


class Recorder:
    """A Handler that answers 202 and records what it completed."""

    max_body = 1024 * 1024

    def __init__(self) -> None:
        self.completed: list[tuple[str, bytes]] = []

    def head(self, req: Request) -> Response | None:
        return None

    def complete(self, req: Request, body: bytes) -> Response:
        self.completed.append((req.path, body))
        return empty_response(202)
