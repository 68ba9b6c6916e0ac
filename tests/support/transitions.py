"""Transition tables under test: the moves a stream class takes (``StepTrace``) and the states
a table can reach (``reachable``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import pytest


class _Stepping(Protocol):
    sid: int
    state: Any

    def step(self, event: Any) -> Any: ...


class StepTrace:
    """Patches ``cls.step`` (a stream's only way to move) to record each move, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type[_Stepping]) -> None:
        self.steps: list[tuple[int, Any, Any, Any]] = []
        original = cls.step

        def traced(st: _Stepping, event: Any) -> Any:
            before = st.state
            after = original(st, event)
            self.steps.append((st.sid, before, event, after))
            return after

        monkeypatch.setattr(cls, "step", traced)


def reachable(start: Any, events: Iterable[Any], step: Callable[[Any, Any], Any]) -> set[Any]:
    """Every state a transition table lets a machine reach from ``start``: ``step(state,
    event)`` gives the next state, or None where the table refuses the event."""
    events = list(events)
    reached, todo = {start}, [start]
    while todo:
        state = todo.pop()
        for event in events:
            after = step(state, event)
            if after is not None and after not in reached:
                reached.add(after)
                todo.append(after)
    return reached
