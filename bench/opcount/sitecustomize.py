"""Counts the Python opcodes a process executes, per function, between two signals.

Loaded by any interpreter with this directory on ``PYTHONPATH`` (``bench/opcodes.py`` puts it
there for the daemon it measures); it does nothing unless ``NVPAIR_OPCOUNT`` names an output
path. Then ``SIGUSR1`` starts counting the main thread's opcodes (``sys.settrace`` with
``f_trace_opcodes``) and ``SIGUSR2`` stops and writes ``{"counts": {...}, "calls": {...}}``,
keyed ``file:function``, to ``$NVPAIR_OPCOUNT.<pid>.json``.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
from types import FrameType
from typing import Any

_OUT = os.environ.get("NVPAIR_OPCOUNT")

if _OUT:
    counts: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    counting = False

    def _tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if not counting:
            return None
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"
        calls[key] += 1

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[key] += 1
            return local

        return local

    def _start(signum: int, frame: FrameType | None) -> None:
        global counting  # noqa: PLW0603 - the switch the signals flip
        counts.clear()
        calls.clear()
        counting = True

    def _stop(signum: int, frame: FrameType | None) -> None:
        global counting  # noqa: PLW0603
        counting = False
        with open(f"{_OUT}.{os.getpid()}.json", "w") as f:
            json.dump({"counts": counts, "calls": calls}, f)

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
    sys.settrace(_tracer)
