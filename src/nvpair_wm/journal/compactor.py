"""A journal compaction in a child process: the node's side and the child's entry point.

Why a process: the heavy part of a compaction
(:meth:`nvpair_wm.journal.compaction.Compaction.run`: read the log, fold it, write a temporary
file) is pure Python and takes about a second for a busy node's log. In a worker thread it would
hold the GIL against the event loop: each time the loop gave the GIL up (each socket write, each
``select``) it would wait up to the switch interval to get it back, so callbacks of a few ms of
CPU would take a hundred times that in wall time and a busy link would stall for the length of
the compaction. A fresh interpreter has its own GIL; the node's loop only waits for a pipe to
become readable.

The protocol: the node runs ``python -P -m nvpair_wm.journal.compactor SPEC`` (a new
interpreter, no fork of the multi-threaded node: asyncio's subprocess support, ``vfork`` +
``exec``), with ``SPEC`` one JSON object (:class:`Spec`: the log's path, ``upto``, the wall
time, the table's limits, the node's pid) and the node's ``sys.path`` as its ``PYTHONPATH``, so
that it imports the very code the node runs. The child's stdin is ``/dev/null`` and its stdout a
pipe of its own (never the node's stdout: in stdio mode that is the JSON-RPC channel); its
stderr is the node's, where a traceback of ours would land. It answers with one JSON line
(:class:`Outcome`) and exits 0. It asks the kernel to kill it if the node dies
(``PR_SET_PDEATHSIG``), so that a ``kill -9``\\ ed node leaves no child writing its temporary
file.

The node kills the child after
:attr:`~nvpair_wm.journal.limits.JournalLimits.compaction_timeout` seconds and when it stops
(its task is cancelled), and reaps it either way before the temporary file is removed. A child
that exits otherwise than with its answer (killed, crashed, an unreadable line) is the job's
``failure``: :meth:`~nvpair_wm.journal.file.Journal.finish_compaction` logs one warning line,
leaves the log as it was and appends on; the next check retries. When no child can be started at
all (no processes or memory to be had), that one compaction runs in a worker thread, as before,
with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Final

import msgspec

from nvpair_wm.dedup import TableLimits
from nvpair_wm.journal.compaction import Compaction
from nvpair_wm.journal.records import Damage

__all__ = ["MODULE", "Outcome", "Spec", "compact_in_child", "main"]

log = logging.getLogger(__name__)

MODULE: Final = "nvpair_wm.journal.compactor"
_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


class Spec(msgspec.Struct, frozen=True):
    """What the child compacts: the node's :class:`Compaction`, less what stays with the node."""

    path: str
    upto: int
    wall: float
    table: TableLimits
    parent: int  # the node's pid: the child exits at once if it is not its parent any more


class Outcome(msgspec.Struct, frozen=True):
    """The child's answer: the job's results (``error``: errno and text of an ``OSError``)."""

    kept: int
    size: int
    read: int
    unchanged: bool
    damage: Damage | None
    error: tuple[int, str] | None


def spec_of(job: Compaction) -> Spec:
    return Spec(str(job.path), job.upto, job.wall, job.table, os.getpid())


def outcome_of(job: Compaction) -> Outcome:
    exc = job.error
    error = (exc.errno or 0, exc.strerror or str(exc)) if exc is not None else None
    return Outcome(job.kept, job.size, job.read, job.unchanged, job.damage, error)


def take(job: Compaction, outcome: Outcome) -> None:
    """Put a child's answer into the node's job, as if the job had run here."""
    job.kept, job.size, job.read = outcome.kept, outcome.size, outcome.read
    job.unchanged, job.damage = outcome.unchanged, outcome.damage
    job.error = OSError(*outcome.error) if outcome.error is not None else None


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the compaction child was killed by {name}"
    return f"the compaction child exited with status {code}"


async def compact_in_child(job: Compaction, limit: float) -> None:
    """Run ``job`` in a child process (``limit`` seconds at most): its results, or its
    ``failure``, are in ``job`` when this returns. Cancelled, it kills and reaps the child
    first; the caller then removes the temporary file (``Journal.abandon_compaction``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    spec = msgspec.json.encode(spec_of(job)).decode()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",
            "-m",
            MODULE,
            spec,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,  # the node's stderr
            env=env,
        )
    except OSError as exc:  # no process to be had (EAGAIN, ENOMEM, no interpreter)
        log.warning(
            "journal: cannot start a compaction child (%s); compacting in a thread this time",
            exc.strerror or exc,
        )
        await asyncio.to_thread(job.run)
        return
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), limit)
    except TimeoutError:
        job.failure = f"killed after journal.compaction_timeout ({limit:g} s)"
        return
    finally:
        if proc.returncode is None:  # timed out, or the node is stopping
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()  # reaped, and no longer writing the temporary file
    code = await proc.wait()  # exited already (communicate saw its pipe close): its status
    if code != 0:
        job.failure = _exit_reason(code)
        return
    try:
        take(job, msgspec.json.decode(out, type=Outcome))
    except msgspec.DecodeError as exc:  # ValidationError is one too
        job.failure = f"the compaction child's answer is unreadable ({exc})"


def _die_with(parent: int) -> None:
    """Be killed when the node dies (Linux); exit now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes  # noqa: PLC0415 - the child only

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the node died before the request above took effect
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> int:
    """The child: one compaction, its :class:`Outcome` as one line on stdout."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {MODULE} SPEC (run by nvpair-wm, not by hand)", file=sys.stderr)
        return 2
    spec = msgspec.json.decode(args[0], type=Spec)
    _die_with(spec.parent)
    job = Compaction(Path(spec.path), spec.upto, 0, spec.wall, spec.table)
    job.run()
    sys.stdout.buffer.write(msgspec.json.encode(outcome_of(job)) + b"\n")
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
