"""The journal's compaction in a child process (nvpair_wm.journal.compactor): real child
interpreters.

The child must write the very file the in-thread path (``Journal.compact``) writes; a child
that is killed (by a signal, or by the node after ``journal.compaction_timeout``) costs one
warning line and nothing else: the log stays as it was, appending goes on and the next
compaction succeeds; a node stopping mid-compaction leaves no child and no temporary file; and a
real ``nvpair-wm`` that compacts on its own still has every event after a restart.

No event announces that a child has started: where a test must act on a running child, it polls
``/proc`` for it (bounded). The children here fold a few thousand records: they run for
hundreds of milliseconds (an interpreter start included), far longer than finding them takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.config import loads
from nvpair_wm.dedup import Removal, TableLimits, WorkloadTable
from nvpair_wm.dispatch import outbound_removal
from nvpair_wm.events import Outbound
from nvpair_wm.journal import (
    JOURNAL_FILE,
    Compaction,
    Journal,
    JournalLimits,
    decode_log,
    fsync_and_close,
    open_journal,
)
from nvpair_wm.journal.compactor import MODULE, compact_in_child
from nvpair_wm.node import Config, Node
from tests.support.cluster import Cluster, event, workload
from tests.support.frames import event_frame, line
from tests.support.frames import workload as frame_workload
from tests.support.journal import LIMITS, T0, dispatcher, outbounds
from tests.support.polling import eventually, eventually_async

FIND_WITHIN = 10.0  # seconds to find a running child in /proc (it appears within ms)
TEMP = f".{JOURNAL_FILE}.tmp"


def compactor_children(parent: int | None = None) -> list[int]:
    """Pids of the children of ``parent`` (this process) that run the compactor (/proc)."""
    me = str(parent or os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        ppid = stat.rsplit(")", 1)[1].split()[1]
        if ppid == me and MODULE.encode() in cmdline:
            found.append(int(entry.name))
    return found


async def one_child() -> int:
    """The compactor child once it runs (polled: nothing announces it)."""
    [pid] = await eventually_async(
        compactor_children, "no compactor child appeared", within=FIND_WITHIN, every=0.001
    )
    return pid


def gone(pid: int) -> bool:
    """Neither running nor a zombie: reaped (pid reuse within a test is not a concern)."""
    return not Path(f"/proc/{pid}").exists()


def busy_log(journal: Journal, workloads: int, rounds: int) -> dict[str, int]:
    """Appends ``rounds`` events of each of ``workloads`` workloads (every round supersedes the
    last, so a compaction has work); returns id → newest seq."""
    disp = dispatcher(WorkloadTable(TableLimits(max_workloads=workloads)))
    for seq in range(1, rounds + 1):
        frames = [
            event_frame("workload:started", frame_workload(id=f"w{i}", seq=seq))
            for i in range(workloads)
        ]
        for start in range(0, workloads, 500):
            journal.append(outbounds(disp, *frames[start : start + 500]), T0 + seq * 0.001)
    return {f"w{i}": rounds for i in range(workloads)}


def newest_in(path: Path) -> dict[str, int]:
    records, damage = decode_log(path.read_bytes())
    assert damage is None
    newest: dict[str, int] = {}
    for rec in records:
        if not rec.is_removal:
            seq = int(rec.body.split(b'"seq":', 1)[1].split(b",", 1)[0].rstrip(b"}"))
            newest[rec.wid] = max(seq, newest.get(rec.wid, 0))
    return newest


@contextlib.contextmanager
def warnings_of_journal(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    with caplog.at_level(logging.WARNING, logger="nvpair_wm.journal"):
        yield lambda: [r.getMessage() for r in caplog.records if r.name == "nvpair_wm.journal"]


# -- the same file as the in-thread path -----------------------------------------------------


def mixed_log(journal: Journal) -> None:
    """Garbage (superseded events), removals with and without a run, events past their TTL
    (terminal_ttl 10 s, tombstone_ttl 20 s), workloads over the cap (50)."""
    disp = dispatcher(WorkloadTable(LIMITS))
    for seq in (1, 2, 3):
        frames = [
            event_frame("workload:started", frame_workload(id=f"w{i}", seq=seq)) for i in range(60)
        ]
        journal.append(outbounds(disp, *frames), T0 + seq)
    done = [event_frame("workload:completed", frame_workload(id=f"d{i}")) for i in range(5)]
    journal.append(outbounds(disp, *done), T0)  # expired by T0 + 30
    removals: list[Outbound] = [
        outbound_removal(Removal("node-a", "w1", None)),
        outbound_removal(Removal("node-a", "w2", "run-a")),
        outbound_removal(Removal("node-a", "gone", None)),
    ]
    journal.append(removals[:2], T0 + 25)
    journal.append(removals[2:], T0 + 1)  # expired
    journal.append(outbounds(disp, event_frame("workload:started", frame_workload(id="w3"))), T0)


def damage_in_the_middle(path: Path) -> None:
    """One flipped byte inside a record in the middle: what the disk or another writer does."""
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("damaged", [False, True])
def test_the_child_writes_the_file_the_thread_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damaged: bool
) -> None:
    paths, messages = [], []
    for how in ("thread", "child"):
        directory = tmp_path / how
        directory.mkdir()
        journal, _ = open_journal(directory, JournalLimits(), LIMITS, T0)
        assert journal is not None
        mixed_log(journal)
        path = directory / JOURNAL_FILE
        if damaged:
            damage_in_the_middle(path)
        caplog.clear()
        with warnings_of_journal(caplog) as warnings:
            if how == "thread":
                journal.compact(T0 + 30)
            else:
                job = journal.begin_compaction(T0 + 30)
                assert job is not None
                asyncio.run(compact_in_child(job, 60.0))
                assert job.failure is None
                journal.finish_compaction(job)
            messages.append([m.replace(str(directory), "DIR") for m in warnings()])
        assert not (directory / TEMP).exists()
        journal.close()
        paths.append(path)
    thread, child = (p.read_bytes() for p in paths)
    assert child == thread
    assert messages[0] == messages[1]
    assert len(messages[0]) == (1 if damaged else 0)
    records, damage = decode_log(child)
    assert damage is None and 0 < len(records) < 60 * 3
    if not damaged:
        wids = {r.wid for r in records}
        assert not any(w.startswith("d") for w in wids)  # expired terminal events
        assert "gone" not in wids and "w1" in wids  # expired removal gone; w1's removal kept
        assert len([r for r in records if not r.is_removal]) == 50  # the table's cap


# -- a child that dies -------------------------------------------------------------------------


def test_a_killed_child_warns_and_the_journal_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGKILL to a running child: one warning naming it, the log as it was (plus what was
    appended meanwhile), no temporary file; the next compaction succeeds and loses nothing."""
    journal, _ = open_journal(tmp_path, JournalLimits(), TableLimits(), T0)
    assert journal is not None
    newest = busy_log(journal, workloads=2_000, rounds=3)
    path = tmp_path / JOURNAL_FILE
    disp = dispatcher(WorkloadTable(TableLimits()))
    later = event_frame("workload:started", frame_workload(id="later", seq=1))

    async def killed() -> None:
        job = journal.begin_compaction(T0 + 1)
        assert job is not None
        task = asyncio.create_task(compact_in_child(job, 60.0))
        pid = await one_child()
        os.kill(pid, signal.SIGKILL)
        journal.append(outbounds(disp, later), T0 + 1)  # the loop appends on meanwhile
        await task
        assert gone(pid)
        assert job.failure == "the compaction child was killed by SIGKILL"
        with warnings_of_journal(caplog) as warnings:
            journal.finish_compaction(job)
        [warning] = warnings()
        assert "compaction of" in warning and "killed by SIGKILL" in warning, warning
        assert "appending on" in warning

    before = path.read_bytes()
    asyncio.run(killed())
    assert not (tmp_path / TEMP).exists()
    after = path.read_bytes()
    assert after.startswith(before) and len(after) > len(before)  # untouched, then appended
    assert journal.active and journal.compaction_due(T0 + 2)  # the next one retries
    job = journal.begin_compaction(T0 + 2)
    assert job is not None
    asyncio.run(compact_in_child(job, 60.0))
    assert job.failure is None and job.read == 3 * 2_000 + 1
    journal.finish_compaction(job)
    assert newest_in(path) == newest | {"later": 1}
    assert len(decode_log(path.read_bytes())[0]) == 2_001  # compacted
    journal.close()


def test_a_child_over_its_timeout_is_killed_and_the_journal_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``journal.compaction_timeout`` from the config (as an operator sets it; 1 ms: no
    interpreter starts that fast): the node's timer task kills the child, reaps it, warns once
    with the limit's name, removes nothing from the log, and journals on."""
    cdir = init_cluster(tmp_path / "cluster", ["node-a"])["node-a"]
    config = loads(
        f'cluster_dir = "{cdir}"\n[journal]\n'
        "fsync_interval = 0.01\ncompact_min_records = 10\ncompaction_timeout = 0.001\n"
    )
    assert config.journal.compaction_timeout == 0.001
    path = cdir / JOURNAL_FILE

    async def run() -> None:
        node = Node(config)
        journal = node.journal
        assert journal is not None
        warned = asyncio.Event()
        messages: list[str] = []

        class Waiter(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                messages.append(record.getMessage())
                warned.set()

        handler = Waiter(logging.WARNING)
        logging.getLogger("nvpair_wm.journal").addHandler(handler)
        for seq in range(1, 31):
            frame = event_frame("workload:started", frame_workload(id="1", seq=seq))
            node.publish(node.dispatcher.local(line(frame)).outbound)
        task = asyncio.create_task(node._journal_forever(journal))
        try:
            await asyncio.wait_for(warned.wait(), 30)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            logging.getLogger("nvpair_wm.journal").removeHandler(handler)
        assert "journal.compaction_timeout (0.001 s)" in messages[0], messages
        assert compactor_children() == []
        assert not (cdir / TEMP).exists()
        assert len(decode_log(path.read_bytes())[0]) == 30  # as it was: nothing dropped
        frame = event_frame("workload:started", frame_workload(id="1", seq=31))
        node.publish(node.dispatcher.local(line(frame)).outbound)
        assert len(decode_log(path.read_bytes())[0]) == 31  # appending goes on
        journal.close()

    asyncio.run(run())


# -- the node stopping mid-compaction -----------------------------------------------------------


def test_stopping_mid_compaction_leaves_no_child_and_no_temp_file(tmp_path: Path) -> None:
    """The node's journal task cancelled (what ``Node.run`` does at shutdown) while its child
    compacts: the child is killed and reaped, its temporary file removed, the log intact."""
    cdir = init_cluster(tmp_path / "cluster", ["node-a"])["node-a"]
    limits = JournalLimits(fsync_interval=0.01, compact_min_records=10)
    config = Config(cluster_dir=cdir, journal=limits)
    path = cdir / JOURNAL_FILE

    async def run() -> None:
        node = Node(config)
        journal = node.journal
        assert journal is not None
        newest = busy_log(journal, workloads=2_000, rounds=3)
        before = path.read_bytes()
        task = asyncio.create_task(node._journal_forever(journal))
        pid = await one_child()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert gone(pid) and compactor_children() == []
        assert not (cdir / TEMP).exists()
        assert path.read_bytes() == before and newest_in(path) == newest
        journal.close()

    asyncio.run(run())


# -- black box: a real nvpair-wm ----------------------------------------------------------------


def test_a_real_node_compacts_in_a_child_and_keeps_every_event(tmp_path: Path) -> None:
    """A real ``nvpair-wm`` with a small ``compact_min_records`` (its --config) gets events that
    supersede each other: it compacts in a child (logged at debug), and after a graceful stop
    and a restart every workload is back at its newest seq, from a compacted journal."""
    cluster = Cluster(
        tmp_path / "c",
        1,
        config={"journal.compact_min_records": 50, "journal.fsync_interval": 0.05},
    )
    try:
        a = cluster["node-a"]
        a.start()
        ids = [f"w{i}" for i in range(40)]
        for seq in (1, 2, 3):
            a.send_all(event("workload:started", workload("node-a", w, seq)) for w in ids)
        assert a.status()["counters"]["workloads"] == 40  # every line dispatched, journaled
        compacted = a.wait_log("journal: compacted")
        assert "records read" in compacted, compacted  # a rewrite: every due one drops some
        for seq in (4, 5):  # more, after the compaction, up to the stop
            a.send_all(event("workload:started", workload("node-a", w, seq)) for w in ids)
        assert a.status()["counters"]["workloads"] == 40
        assert a.stop() == 0
        path = a.cluster_dir / JOURNAL_FILE
        assert newest_in(path) == dict.fromkeys(ids, 5)
        assert len(decode_log(path.read_bytes())[0]) < 5 * 40  # it did compact
        assert not (a.cluster_dir / TEMP).exists()
        a.start()
        st = a.status()
        assert st["counters"]["workloads"] == 40, st
        a.wait_log("journal: reloaded 40 workloads and 0 tombstones")
    finally:
        cluster.close()
    assert cluster.errors() == []
    runs = [r for n in cluster for r in n.runs]
    assert not any("compaction of" in line for r in runs for line in r.stderr_log)
    # The child's answer went to its own pipe: the node's stdout held JSON-RPC frames only.
    assert all(json.loads(raw)["jsonrpc"] == "2.0" for r in runs for raw in r.stdout_log)


def test_a_real_node_waits_for_compact_growth_times_what_it_kept(tmp_path: Path) -> None:
    """``journal.compact_growth = 2`` in a real ``nvpair-wm``'s --config: after a compaction
    that kept 40 records (40 workloads) and a restart, 79 superseding events (under 2 x 40) leave
    the log alone through many checks (one per ``fsync_interval``), and the 80th makes the next
    check compact all 120 records to 40. With the old rule (growth 1) it would have compacted
    after 40 of them, reading 80 records."""
    every = 0.05  # the node's check: fsync_interval
    cluster = Cluster(
        tmp_path / "c",
        1,
        config={
            "journal.compact_growth": 2,
            "journal.compact_min_records": 10,
            "journal.fsync_interval": every,
        },
    )
    try:
        a = cluster["node-a"]
        a.start()
        ids = [f"w{i}" for i in range(40)]
        a.send_all(event("workload:started", workload("node-a", w, s)) for s in (1, 2) for w in ids)
        assert a.status()["counters"]["workloads"] == 40
        a.wait_log("journal: compacted")  # 80 records, half garbage: to a checkpoint of 40
        assert a.stop() == 0
        a.start()
        a.wait_log("journal: reloaded 40 workloads and 0 tombstones")
        superseding = [
            event("workload:started", workload("node-a", w, s)) for s in (3, 4) for w in ids
        ]
        a.send_all(superseding[:79])
        assert a.status()["counters"]["workloads"] == 40  # every line dispatched, journaled
        time.sleep(20 * every)  # what does not happen can only be waited for: 20 checks
        assert a.log_lines("journal: compacted") == []
        path = a.cluster_dir / JOURNAL_FILE
        assert len(decode_log(path.read_bytes())[0]) == 40 + 79  # as appended
        a.send_all(superseding[79:])
        compacted = a.wait_log("journal: compacted")
        assert "120 records read, 40 kept" in compacted, compacted
        assert newest_in(path) == dict.fromkeys(ids, 4)
        assert a.stop() == 0
    finally:
        cluster.close()
    assert cluster.errors() == []


def test_catching_up_off_the_loop_installs_the_same_file(tmp_path: Path) -> None:
    """``Compaction.catch_up`` (the node's worker thread) copies most of what was appended
    during the compaction; ``finish_compaction`` then copies only the rest: the installed file
    is the one ``finish_compaction`` alone makes, and appending goes on into it."""
    files = []
    for catch_up in (False, True):
        directory = tmp_path / str(catch_up)
        directory.mkdir()
        journal, _ = open_journal(directory, JournalLimits(), TableLimits(), T0)
        assert journal is not None
        busy_log(journal, workloads=300, rounds=2)
        job = journal.begin_compaction(T0 + 1)
        assert job is not None
        job.run()
        disp = dispatcher(WorkloadTable(TableLimits()))
        during = [
            event_frame("workload:started", frame_workload(id=f"n{i}", seq=1)) for i in range(40)
        ]
        journal.append(outbounds(disp, *during[:30]), T0 + 1)
        if catch_up:
            upto = job.upto
            job.catch_up(journal.size)
            assert job.error is None and job.upto == journal.size > upto
        journal.append(outbounds(disp, *during[30:]), T0 + 1)
        journal.finish_compaction(job)
        journal.append(outbounds(disp, event_frame("workload:submitted")), T0 + 2)
        journal.close()
        files.append((directory / JOURNAL_FILE).read_bytes())
        assert not (directory / TEMP).exists()
    assert files[0] == files[1]
    assert len(decode_log(files[1])[0]) == 300 + 40 + 1


def test_without_a_child_to_be_had_it_compacts_in_a_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interpreter that cannot be started (here: the path of one that does not exist; in
    life EAGAIN or ENOMEM from fork) costs one warning, and that compaction runs in a thread."""
    journal, _ = open_journal(tmp_path, JournalLimits(), TableLimits(), T0)
    assert journal is not None
    newest = busy_log(journal, workloads=50, rounds=2)
    job = journal.begin_compaction(T0 + 1)
    assert job is not None
    monkeypatch.setattr("sys.executable", str(tmp_path / "no-python"))
    with caplog.at_level(logging.WARNING, logger="nvpair_wm.journal.compactor"):
        asyncio.run(compact_in_child(job, 60.0))
    [warning] = [r.getMessage() for r in caplog.records]
    assert "cannot start a compaction child" in warning and "in a thread" in warning
    assert job.failure is None and job.error is None and job.kept == 50
    journal.finish_compaction(job)
    path = tmp_path / JOURNAL_FILE
    assert newest_in(path) == newest and len(decode_log(path.read_bytes())[0]) == 50
    journal.close()


def test_a_temporary_file_left_by_a_crash_is_removed_at_start(tmp_path: Path) -> None:
    """A node killed mid-compaction leaves ``.journal.log.tmp``: never installed, removed at the
    next start (under the directory's lock), the journal itself reloaded as it was."""
    journal, _ = open_journal(tmp_path, JournalLimits(), TableLimits(), T0)
    assert journal is not None
    newest = busy_log(journal, workloads=5, rounds=1)
    journal.close()
    (tmp_path / TEMP).write_bytes(b"half a compaction")
    again, records = open_journal(tmp_path, JournalLimits(), TableLimits(), T0 + 1)
    assert again is not None and not (tmp_path / TEMP).exists()
    assert {r.wid for r in records} == set(newest)
    again.close()


HELPER = """
import asyncio, sys, time
from pathlib import Path
from nvpair_wm.journal.compactor import compact_in_child
from nvpair_wm.dedup import TableLimits
from nvpair_wm.journal import Compaction
path = Path(sys.argv[1])
job = Compaction(path, path.stat().st_size, 0, time.time(), TableLimits())
asyncio.run(compact_in_child(job, 60))
"""


def state_of(pid: int) -> str:
    """A process's state letter (``Z``: a zombie), or "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_a_child_does_not_outlive_a_node_killed_mid_compaction(tmp_path: Path) -> None:
    """``kill -9`` of the process that started a compaction: its child does not go on to
    write its result. The child is stopped before its parent is killed, so that it cannot finish
    meanwhile; continued, it either gets the kernel's SIGKILL (PR_SET_PDEATHSIG, when it had
    asked for it already) or finds that its parent is gone and exits: either way, its temporary
    file is never written whole (the next start removes what there is)."""
    journal, _ = open_journal(tmp_path, JournalLimits(), TableLimits(), T0)
    assert journal is not None
    busy_log(journal, workloads=1_000, rounds=2)
    journal.close()
    path = tmp_path / JOURNAL_FILE
    whole = Compaction(path, path.stat().st_size, 0, T0, TableLimits())
    whole.run()  # what the child would write: its size
    assert whole.error is None and whole.size == (tmp_path / TEMP).stat().st_size
    (tmp_path / TEMP).unlink()
    helper = subprocess.Popen(
        [sys.executable, "-c", HELPER, str(tmp_path / JOURNAL_FILE)], stdin=subprocess.DEVNULL
    )
    try:

        def child_pids() -> list[int]:
            pids = compactor_children(helper.pid)
            assert pids or helper.poll() is None, "no child appeared"
            return pids

        [child] = eventually(child_pids, "no child appeared", within=FIND_WITHIN, every=0.001)
        os.kill(child, signal.SIGSTOP)
        helper.kill()
        helper.wait()
        os.kill(child, signal.SIGCONT)
        eventually(  # reaped by init, or dead and not yet reaped
            lambda: state_of(child) in ("", "Z"),
            f"child {child} outlived its parent",
            within=FIND_WITHIN,
            every=0.001,
        )
        temp = tmp_path / TEMP
        assert not temp.exists() or temp.stat().st_size < whole.size
    finally:
        helper.kill()
        helper.wait()


def test_an_install_without_fsync_leaves_both_to_the_group_commit(tmp_path: Path) -> None:
    """``finish_compaction(sync=False)`` (the node, so that no fsync runs on its loop) installs
    the same file, and hands the group commit the file (``sync_descriptor``), the directory of
    the rename (``directory_to_sync``) and the old log's descriptor to close (closing it frees
    the old file), once each; with ``sync=True`` there is nothing left to commit."""
    files = []
    for sync in (True, False):
        directory = tmp_path / str(sync)
        directory.mkdir()
        journal, _ = open_journal(directory, JournalLimits(), TableLimits(), T0)
        assert journal is not None
        busy_log(journal, workloads=20, rounds=2)
        journal.sync()
        job = journal.begin_compaction(T0 + 1)
        assert job is not None
        job.run()
        journal.finish_compaction(job, sync=sync)
        fd = journal.sync_descriptor()
        if sync:
            assert fd is None and journal.directory_to_sync() is None
            assert journal.retired_descriptor() is None
        else:
            assert fd is not None and fsync_and_close(fd) is None
            assert journal.directory_to_sync() == directory
            assert journal.directory_to_sync() is None and journal.sync_descriptor() is None
            old = journal.retired_descriptor()
            assert old is not None and journal.retired_descriptor() is None
            os.close(old)  # the replaced log's: still open until the group commit closes it
        journal.close()
        files.append((directory / JOURNAL_FILE).read_bytes())
    assert files[0] == files[1] and len(decode_log(files[0])[0]) == 20
