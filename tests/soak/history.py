"""The record of one soak run: what each broker sent and received, and what was done to it.

A history is a sequence of :class:`Record` in time order. Frame records (``send``: broker →
its node, ``recv``: node → its broker) carry the parsed JSON-RPC frame; the others carry what
the checker needs to know about the run: its parameters (``start``), each process start and
exit (``spawn``, ``exit``), each fault as it begins and ends (``fault``), RSS samples (``rss``),
the moment the last fault was healed and the brokers stopped reporting (``quiesce``), and the
end. Times are seconds since the start of the run (one monotonic clock for every node).

On disk a history is JSON lines, one record per line, written as the run goes, so that a run
that dies still leaves what it saw, and the checker can stream a long history.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Literal

Kind = Literal["start", "send", "recv", "spawn", "exit", "fault", "rss", "quiesce", "end"]
KINDS: Final = ("start", "send", "recv", "spawn", "exit", "fault", "rss", "quiesce", "end")


@dataclass(frozen=True, slots=True)
class Record:
    t: float  # seconds since the run started
    kind: Kind
    node: str = ""  # the node (and so the broker) it concerns; "" for run-wide records
    inc: int = 0  # the node's incarnation: 1 for its first process, +1 per restart
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {"t": round(self.t, 6), "kind": self.kind, "node": self.node, "inc": self.inc,
             "data": self.data},
            separators=(",", ":"),
        )  # fmt: skip

    @classmethod
    def from_json(cls, line: str) -> Record:
        raw = json.loads(line)
        kind = raw["kind"]
        if kind not in KINDS:
            raise ValueError(f"unknown record kind {kind!r}")
        return cls(float(raw["t"]), kind, raw.get("node", ""), int(raw.get("inc", 0)),
                   raw.get("data", {}))  # fmt: skip


def read_history(path: Path) -> Iterator[Record]:
    """The records of a history file, streamed."""
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield Record.from_json(line)


class Recorder:
    """Appends records from many threads in one time order, to a file and to listeners."""

    def __init__(self, path: Path, t0: float | None = None) -> None:
        self.path = path
        self.t0 = time.monotonic() if t0 is None else t0
        self.lock = threading.Lock()  # held while a record is written and its listeners run
        self._file: IO[str] = path.open("w", encoding="utf-8")
        self._listeners: list[Any] = []
        self.count = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def listen(self, listener: Any) -> None:
        """``listener(record)`` is called for every record, under the recorder's lock."""
        self._listeners.append(listener)

    def add(self, kind: Kind, node: str = "", inc: int = 0, data: Mapping[str, Any] | None = None,
            ) -> Record:  # fmt: skip
        with self.lock:
            # The timestamp is taken under the lock, so file order is time order.
            rec = Record(self.now(), kind, node, inc, data or {})
            self._file.write(rec.to_json() + "\n")
            self.count += 1
            for listener in self._listeners:
                listener(rec)
            return rec

    def close(self) -> None:
        with self.lock:
            if not self._file.closed:
                self._file.close()
