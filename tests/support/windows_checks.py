"""The Windows side of :mod:`nvpair_wm.platforms`, checked on Windows (under Wine, by
``tests/test_windows.py``): ``python.exe windows_checks.py DIR`` runs each check, prints
``ok NAME`` for each, and fails (a traceback, exit 1) at the first that does not hold.

``python.exe windows_checks.py --hold DIR`` is the other process of the lock checks: it takes
the cluster directory's lock and the journal's, says ``held``, and keeps them until its stdin
closes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from nvpair_wm import dirlock, platforms
from nvpair_wm.dedup import TableLimits, WorkloadTable
from nvpair_wm.errors import ClusterDirInUse
from nvpair_wm.journal import JOURNAL_FILE, JournalLimits, decode_log, open_journal
from tests.support.frames import event_frame, workload
from tests.support.journal import dispatcher, outbounds


def hold(directory: Path) -> None:
    lock = dirlock.acquire(directory)
    fd = platforms.lock_directory(directory)
    print("held", flush=True)
    sys.stdin.read()
    os.close(fd)
    lock.release()


def check_locks(directory: Path) -> None:
    """Another process's locks refuse ours (the refusal names its pid: a Windows lock is
    mandatory, and the pid is written outside the locked byte); its end frees them."""
    other = subprocess.Popen(
        [sys.executable, __file__, "--hold", str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert other.stdout is not None and other.stdin is not None
    assert other.stdout.readline().strip() == "held"
    try:
        dirlock.acquire(directory)
    except ClusterDirInUse as exc:
        assert exc.pid == other.pid, (exc.pid, other.pid)
    else:
        raise AssertionError("the cluster directory's lock was taken twice")
    try:
        platforms.lock_directory(directory)
    except BlockingIOError:
        pass
    else:
        raise AssertionError("the journal's lock was taken twice")
    other.kill()  # however it ends, its locks go with it
    other.wait()
    dirlock.acquire(directory).release()
    os.close(platforms.lock_directory(directory))


def check_files(directory: Path) -> None:
    """os.open is binary (no \\r added), positioned reads and writes, no directory fsync."""
    path = directory / "binary"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, b"a\nb\n")
        assert platforms.write_at(fd, b"B", 2) == 1
        assert platforms.read_at(fd, 10, 0) == b"a\nB\n"
    finally:
        os.close(fd)
    assert path.read_bytes() == b"a\nB\n"
    platforms.sync_directory(directory)
    assert platforms.raise_descriptor_limit() is None
    assert platforms.is_named_pipe("\\\\.\\pipe\\x")


def check_compaction(directory: Path) -> None:
    """The journal compacts: its new file replaces the one it appends to (on Windows an open
    file cannot be replaced, so the old descriptor is closed first), and it reads back."""
    limits, table = JournalLimits(compact_min_records=20), TableLimits()
    journal, _ = open_journal(directory, limits, table, 1000.0)
    assert journal is not None
    disp = dispatcher(WorkloadTable(table))
    compactions = 0
    for seq in range(1, 60):
        frames = (event_frame("workload:started", workload(id=f"w{i}", seq=seq)) for i in range(3))
        journal.append(outbounds(disp, *frames), 1000.0 + seq * 0.001)
        if journal.compaction_due(1001.0):
            journal.compact(1001.0)
            assert journal.failing_since is None, journal.last_error
            compactions += 1
    assert compactions >= 2, compactions
    journal.close()
    records, damage = decode_log((directory / JOURNAL_FILE).read_bytes())
    assert damage is None and sorted({r.wid for r in records}) == ["w0", "w1", "w2"], records
    assert len(records) < 60, len(records)


def check_signals() -> None:
    """Ctrl+C (SIGINT) and Ctrl+Break (SIGBREAK) reach the proactor loop as stop requests."""
    got: list[signal.Signals] = []
    ctrl_break = signal.Signals["SIGBREAK"]  # Windows only

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert type(loop).__name__ == "ProactorEventLoop", loop
        for sig in (signal.SIGINT, ctrl_break):
            stopped = asyncio.Event()

            def stop(received: signal.Signals, stopped: asyncio.Event = stopped) -> None:
                got.append(received)
                stopped.set()

            platforms.on_stop_signals(loop, stop)
            wakeup = signal.set_wakeup_fd(-1)  # still the loop's self-pipe
            assert wakeup != -1
            signal.set_wakeup_fd(wakeup, warn_on_full_buffer=False)
            signal.raise_signal(sig)
            await asyncio.wait_for(stopped.wait(), 10)

    asyncio.run(main())
    assert got == [signal.SIGINT, ctrl_break], got


def main(argv: list[str]) -> int:
    if argv[0] == "--hold":
        hold(Path(argv[1]))
        return 0
    directory = Path(argv[0])
    assert platforms.WINDOWS and sys.platform == "win32"
    check_locks(directory)
    print("ok locks", flush=True)
    check_files(directory)
    print("ok files", flush=True)
    check_signals()
    print("ok signals", flush=True)
    (directory / "journal").mkdir()
    check_compaction(directory / "journal")
    print("ok compaction", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
