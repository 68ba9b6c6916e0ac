"""A journal whose writes fail (a full disk) says so and recovers: ``manager:status`` and the
metrics show it failing and since when; the node retries with backoff and, once writing works
again, rewrites the whole current state, so that a ``kill -9`` after that loses nothing.

The fault is real: ``strace -e inject=write:error=ENOSPC`` fails the node's writes to its
journal (and to the temporary file a rewrite goes through) from the 3rd to the 5th, so that
one append fails and the first two rewrite attempts fail too, as a disk that is still full
would; every write after those succeeds, as on a disk with room again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.dirlock import LOCK_FILE
from nvpair_wm.endpoint import EVENTS_PATH
from nvpair_wm.journal import HEADER, JOURNAL_FILE
from nvpair_wm.journal.health import (
    APPENDING,
    TRANSITIONS,
    Event,
    Health,
    IllegalTransition,
    JournalHealth,
)
from nvpair_wm.pins import CERT_FILE, KEY_FILE
from tests.support.probes import get
from tests.support.tools import tool
from tests.support.wm_process import WAIT, WmProcess

W = {
    "model": "m",
    "engine": "vllm",
    "runId": "r1",
    "state": "queued",
    "originatedFrom": "node-1",
    "createdAt": 1,
    "startedAt": None,
    "completedAt": None,
    "error": None,
    "seq": 1,
}


def submit(wm: WmProcess, wid: str) -> None:
    reply = wm.request("workload:submitted", {"workloadInfo": {**W, "id": wid}})
    assert reply["result"]["outcome"] == "applied", reply


def scrape(port: int) -> dict[str, float]:
    out = subprocess.run(
        ["curl", "-sS", f"http://127.0.0.1:{port}/metrics"],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=True,
    ).stdout
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^(nvpair_wm_journal_\w+) (\S+)$", out, re.MULTILINE)
    }


def journal(wm: WmProcess) -> Any:
    return wm.status()["journal"]


def test_a_full_disk_is_shown_retried_and_repaired_by_a_rewrite(tmp_path: Path) -> None:
    strace = tool("strace")
    tool("curl")
    node = init_cluster(tmp_path / "cluster", ["node-1"])["node-1"]
    config = tmp_path / "wm.toml"
    config.write_text("[journal]\nretry_backoff = 0.5\nretry_backoff_max = 2.0\n")
    args = ["--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1"]
    args += ["--config", str(config), "--metrics", "127.0.0.1:0"]
    fault = [strace, "-f", "-o", "/dev/null", "-e", "trace=write"]
    fault += ["-P", str(node / "journal.log"), "-P", str(node / ".journal.log.tmp")]
    fault += ["-e", "inject=write:error=ENOSPC:when=3..5"]
    with WmProcess(*args, prefix=fault) as wm:
        assert wm.recv()["method"] == "ready"
        line = wm.wait_stderr("metrics endpoint listening on")
        metrics = int(re.search(r":(\d+)/metrics", line).group(1))  # type: ignore[union-attr]
        submit(wm, "1")  # write 2: the first append (write 1 made the file at start)
        assert journal(wm) == {"state": "healthy", "failingSince": None, "lastError": None}
        assert scrape(metrics) == {"nvpair_wm_journal_healthy": 1.0}
        before = time.time()
        submit(wm, "2")  # write 3: ENOSPC
        failing = journal(wm)
        assert failing["state"] == "failing", failing
        assert "No space left on device" in failing["lastError"], failing
        assert before - 5 <= failing["failingSince"] / 1000 <= time.time() + 1, failing
        seen = scrape(metrics)
        assert seen["nvpair_wm_journal_healthy"] == 0.0, seen
        since = seen["nvpair_wm_journal_failing_since_timestamp_seconds"]
        assert since == failing["failingSince"] / 1000
        status, body = get(metrics, "/readyz")  # not ready while the journal fails
        assert status == 503 and body["reasons"] == [
            f"the journal is failing: {failing['lastError']}"
        ], body
        submit(wm, "3")  # while failing: in the table, not in the file
        wm.wait_stderr("works again")  # writes 4 and 5 (two rewrites) failed, the third worked
        assert journal(wm)["state"] == "healthy"
        assert scrape(metrics) == {"nvpair_wm_journal_healthy": 1.0}
        assert get(metrics, "/readyz") == (200, {"ready": True})
        submit(wm, "4")  # appended to the rewritten log
        assert wm.status()["counters"]["workloads"] == 4
        errors = [ln for ln in wm.stderr_log if "ERROR" in ln]
        assert len(errors) == 1 and "No space left on device" in errors[0], errors
        pid = int((node / LOCK_FILE).read_text())  # the daemon, strace's child
        os.kill(pid, signal.SIGKILL)
        wm.wait()
    # Restarted after kill -9 on a healthy disk: every workload is back, 3 included.
    with WmProcess(*args[:6]) as again:
        assert again.recv()["method"] == "ready"
        assert again.status()["counters"]["workloads"] == 4
        assert "reloaded 4 workloads" in again.wait_stderr("journal: reloaded")
        assert journal(again)["state"] == "healthy"
        again.close_stdin()
        assert again.wait() == 0


def test_without_a_cluster_dir_the_journal_is_off() -> None:
    with WmProcess("--port", "0", "--bind", "127.0.0.1") as wm:
        assert wm.recv()["method"] == "ready"
        assert journal(wm) == {"state": "off", "failingSince": None, "lastError": None}
        wm.close_stdin()
        assert wm.wait() == 0


def post_as_peer(port: int, member: Path, frames: list[dict[str, Any]]) -> None:
    """POST frames to a node's inter-node endpoint as ``member`` (its own certificate, which the
    node pins), with real curl; the node has dispatched them when the 202 comes back."""
    command = ["curl", "-sS", "-k", "--http1.1", "--max-time", str(WAIT)]
    command += ["--cert", str(member / CERT_FILE), "--key", str(member / KEY_FILE)]
    command += ["-H", "content-type: application/json", "--data-binary", json.dumps(frames)]
    command += ["-o", "/dev/null", "-w", "%{http_code}", f"https://127.0.0.1:{port}{EVENTS_PATH}"]
    out = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=WAIT + 5,
        check=False,
    )
    assert out.stdout == "202", (out.stdout, out.stderr)


def peer_event(method: str, wid: str, seq: int, state: str) -> dict[str, Any]:
    info = {**W, "id": wid, "seq": seq, "state": state, "originatedFrom": "node-a"}
    return {"jsonrpc": "2.0", "method": method, "params": {"workloadInfo": info}}


def test_what_was_forwarded_while_the_disk_was_full_is_rewritten_too(tmp_path: Path) -> None:
    """Issue 24's records through issue 22's recovery: what node B forwarded to its broker
    while its journal could not be written (a newer seq of w1, the removal of w2) is in the
    rewrite once the disk has room again. After a ``kill -9`` the peer's older copies (w1 at
    seq 1, w2 at all) are stale and removed, not news for a broker that already has newer;
    only w1 at the seq the broker has goes to it once more. The fault fails B's 3rd and 4th
    journal writes: the append of w1's seq 3, then the first rewrite attempt."""
    strace = tool("strace")
    tool("curl")
    nodes = init_cluster(tmp_path / "cluster", ["node-a", "node-b"])
    a, b = nodes["node-a"], nodes["node-b"]
    config = tmp_path / "wm.toml"
    config.write_text("[journal]\nretry_backoff = 2.0\nretry_backoff_max = 2.0\n")
    args = ["--cluster-dir", str(b), "--port", "0", "--bind", "127.0.0.1"]
    fault = [strace, "-f", "-o", "/dev/null", "-e", "trace=write"]
    fault += ["-P", str(b / "journal.log"), "-P", str(b / ".journal.log.tmp")]
    fault += ["-e", "inject=write:error=ENOSPC:when=3..4"]
    with WmProcess(*args, "--config", str(config), prefix=fault) as wm:
        assert wm.recv()["method"] == "ready"
        port = wm.status()["port"]
        # Write 2 (write 1 made the file at start): both forwarded, journaled.
        post_as_peer(port, a, [peer_event("workload:submitted", w, 1, "queued") for w in "12"])
        post_as_peer(port, a, [peer_event("workload:started", "1", 3, "running")])  # write 3
        removal = {"originatedFrom": "node-a", "workloadId": "2", "runId": "r1"}
        post_as_peer(port, a, [{"jsonrpc": "2.0", "method": "workloads:remove", "params": removal}])
        told: list[Any] = []
        st = wm.request("manager:status", keep=told)["result"]
        # Still failing (the first rewrite is due 2 s after the failure): the removal was
        # forwarded while nothing could be written.
        assert st["journal"]["state"] == "failing", st["journal"]
        assert [(f["method"], f["params"].get("workloadInfo", {}).get("seq")) for f in told] == [
            ("workloads:upsert", 1),
            ("workloads:upsert", 1),
            ("workloads:upsert", 3),
            ("workloads:remove", None),
        ], told
        line = wm.wait_stderr("works again")  # write 4 (a rewrite) failed, write 5 worked
        assert "rewrote the current state (2 records)" in line, line  # w1 at 3, w2 removed
        pid = int((b / LOCK_FILE).read_text())  # the daemon, strace's child
        os.kill(pid, signal.SIGKILL)
        wm.wait()
    with WmProcess(*args) as again:
        assert again.recv()["method"] == "ready"
        assert "reloaded 1 workloads and 1 tombstones" in again.wait_stderr("journal: reloaded")
        port = again.status()["port"]
        # The peer's snapshot after the restart: what it holds is older than the broker's view.
        post_as_peer(
            port,
            a,
            [
                peer_event("workload:submitted", "1", 1, "queued"),  # stale: the broker has 3
                peer_event("workload:submitted", "2", 1, "queued"),  # removed
                peer_event("workload:started", "1", 3, "running"),  # the broker's seq, once more
            ],
        )
        told = []
        st = again.request("manager:status", keep=told)["result"]
        peer = st["counters"]["byChannel"]["peer"]
        assert (peer["stale"], peer["suppressed"]) == (1, 1), peer
        assert [(f["method"], f["params"]["workloadInfo"]["seq"]) for f in told] == [
            ("workloads:upsert", 3)
        ], told
        again.close_stdin()
        assert again.wait() == 0


# -- one path for every failure, at start or while running -------------------------------------


@dataclass(frozen=True)
class Fault:
    """One injected failure: ``syscall`` on ``path`` (of the node's directory: a file name,
    or "" for the directory itself) fails with ``errno`` the first time a thread of the daemon
    makes it there (strace counts per thread); ``while_running``: after ``ready``, on a
    journal that exists (so that the start writes nothing), else during the journal's opening
    at a first start; ``compaction``: the fault is in a compaction's install, so the test makes
    one due."""

    syscall: str
    path: str
    errno: str
    reason: str
    while_running: bool = False
    compaction: bool = False


EIO = "Input/output error"
FAULTS = {
    # At a first start (no journal yet: it is written, fsynced, renamed into place, its
    # directory fsynced, then opened for appending). A rename is matched by its first path.
    "start-open": Fault("openat", "journal.log", "EIO", EIO),
    "start-write": Fault("write", ".journal.log.tmp", "ENOSPC", "No space left on device"),
    "start-fsync": Fault("fsync", ".journal.log.tmp", "EIO", EIO),
    "start-rename": Fault("rename", ".journal.log.tmp", "EIO", EIO),
    "start-directory-fsync": Fault("fsync", "", "EIO", EIO),
    # While running: the group commit's fsync, and a compaction's install (its rename, then
    # the fsync of the directory after it, in the group commit).
    "running-fsync": Fault("fsync", "journal.log", "EIO", EIO, while_running=True),
    "running-compaction-rename": Fault(
        "rename", ".journal.log.tmp", "EIO", EIO, while_running=True, compaction=True
    ),
    "running-compaction-directory-fsync": Fault(
        "fsync", "", "EIO", EIO, while_running=True, compaction=True
    ),
}


def report(wm: WmProcess, wid: str, seq: int) -> None:
    info = {**W, "id": wid, "seq": seq, "state": "running"}
    reply = wm.request("workload:started", {"workloadInfo": info})
    assert reply["result"]["outcome"] == "applied", reply


def assert_failing(wm: WmProcess, metrics: int, fault: Fault) -> None:
    """What every failure shows, wherever it happened: status, metrics, /readyz."""
    failing = journal(wm)
    assert failing["state"] == "failing", failing
    assert fault.reason in failing["lastError"], failing
    assert failing["failingSince"] is not None, failing
    seen = scrape(metrics)
    assert seen["nvpair_wm_journal_healthy"] == 0.0, seen
    assert seen["nvpair_wm_journal_failing_since_timestamp_seconds"] * 1000 == pytest.approx(
        failing["failingSince"]
    )
    status, body = get(metrics, "/readyz")
    assert status == 503 and body["reasons"] == [
        f"the journal is failing: {failing['lastError']}"
    ], body


@pytest.mark.parametrize("name", list(FAULTS))
def test_every_journal_failure_takes_one_path(tmp_path: Path, name: str) -> None:
    """Each failure, at start or while running, turns the journal to failing (never off),
    shows in status, metrics and /readyz, is retried with backoff, and the rewrite makes it
    healthy again; a ``kill -9`` after that loses nothing the node's broker reported, what it
    reported while the journal was failing included."""
    fault = FAULTS[name]
    strace = tool("strace")
    tool("curl")
    node = init_cluster(tmp_path / "cluster", ["node-1"])["node-1"]
    config = tmp_path / "wm.toml"
    settings = "[journal]\nretry_backoff = 2.0\nretry_backoff_max = 2.0\nfsync_interval = 0.2\n"
    if fault.compaction:  # due after a few appends of one workload (garbage by the count)
        settings += "compact_min_records = 4\ncompact_growth = 0\n"
    config.write_text(settings)
    args = ["--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1"]
    args += ["--config", str(config), "--metrics", "127.0.0.1:0"]
    path = node / fault.path if fault.path else node
    if fault.while_running:  # a sound, empty journal: opened as it is, nothing written
        (node / JOURNAL_FILE).write_bytes(HEADER)
    inject = f"inject={fault.syscall}:error={fault.errno}:when=1"
    prefix = [strace, "-f", "-o", "/dev/null", "-e", f"trace={fault.syscall}"]
    prefix += ["-P", str(path), "-e", inject]
    with WmProcess(*args, prefix=prefix) as wm:
        assert wm.recv()["method"] == "ready"
        line = wm.wait_stderr("metrics endpoint listening on")
        metrics = int(re.search(r":(\d+)/metrics", line).group(1))  # type: ignore[union-attr]
        if fault.while_running:
            assert journal(wm)["state"] == "healthy"
            submit(wm, "1")
            for seq in range(2, 6 if fault.compaction else 2):
                report(wm, "1", seq)  # a compaction's garbage: one workload, many records
            wm.wait_stderr("journal: cannot")
        assert_failing(wm, metrics, fault)
        submit(wm, "2")  # while failing: in the table, not in the file
        wm.wait_stderr("works again")
        assert journal(wm) == {"state": "healthy", "failingSince": None, "lastError": None}
        assert scrape(metrics) == {"nvpair_wm_journal_healthy": 1.0}
        assert get(metrics, "/readyz") == (200, {"ready": True})
        submit(wm, "3")  # appended to the rewritten log
        errors = [ln for ln in wm.stderr_log if "ERROR" in ln]
        assert len(errors) == 1 and fault.reason in errors[0], errors
        held = wm.status()["counters"]["workloads"]
        assert held == 3 if fault.while_running else held == 2
        pid = int((node / LOCK_FILE).read_text())  # the daemon, strace's child
        os.kill(pid, signal.SIGKILL)
        wm.wait()
    with WmProcess(*args[:6]) as again:  # kill -9, then a healthy disk: everything is back
        assert again.recv()["method"] == "ready"
        assert again.status()["counters"]["workloads"] == held
        assert journal(again)["state"] == "healthy"
        again.close_stdin()
        assert again.wait() == 0


def test_a_journal_unread_at_start_keeps_its_records_through_the_rewrite(tmp_path: Path) -> None:
    """A journal the start could not read (its open fails once) was not reloaded: the node
    runs failing, and the rewrite, once the file reads, keeps the file's records ahead of the
    table's state, so a ``kill -9`` after it loses neither what was in the file nor what was
    reported meanwhile."""
    strace = tool("strace")
    node = init_cluster(tmp_path / "cluster", ["node-1"])["node-1"]
    config = tmp_path / "wm.toml"
    config.write_text("[journal]\nretry_backoff = 2.0\nretry_backoff_max = 2.0\n")
    args = ["--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1"]
    with WmProcess(*args) as first:
        assert first.recv()["method"] == "ready"
        submit(first, "1")
        submit(first, "2")
        first.close_stdin()
        assert first.wait() == 0
    fault = [strace, "-f", "-o", "/dev/null", "-e", "trace=openat"]
    fault += ["-P", str(node / JOURNAL_FILE), "-e", "inject=openat:error=EIO:when=1"]
    with WmProcess(*args, "--config", str(config), prefix=fault) as wm:
        assert wm.recv()["method"] == "ready"
        failing = journal(wm)
        assert failing["state"] == "failing" and failing["lastError"].startswith("read: "), failing
        assert wm.status()["counters"]["workloads"] == 0  # not reloaded
        submit(wm, "3")
        line = wm.wait_stderr("works again")
        assert "rewrote the current state (1 records)" in line, line
        pid = int((node / LOCK_FILE).read_text())
        os.kill(pid, signal.SIGKILL)
        wm.wait()
    with WmProcess(*args) as again:
        assert again.recv()["method"] == "ready"
        assert again.status()["counters"]["workloads"] == 3
        again.close_stdin()
        assert again.wait() == 0


# -- the state machine, sans-IO ---------------------------------------------------------------


def test_every_state_but_off_is_reachable_and_only_the_table_moves_it() -> None:
    """From OPENING, the table's events reach every state but OFF (configuration's: no
    journal object has it); a pair not in the table raises; ``appending`` follows the state."""
    seen = {JournalHealth.OPENING}
    frontier = [JournalHealth.OPENING]
    while frontier:
        state = frontier.pop()
        for (src, _), dst in TRANSITIONS.items():
            if src is state and dst not in seen:
                seen.add(dst)
                frontier.append(dst)
    assert seen == set(JournalHealth) - {JournalHealth.OFF}
    health = Health(0.5, 2.0)
    with pytest.raises(IllegalTransition):
        health.move(Event.COMMITTED)  # nothing to commit before the file is open
    assert health.state is JournalHealth.OPENING and not health.appending
    for event, appending in (
        (Event.OPENED, True),
        (Event.BEGAN, True),
        (Event.INSTALLED, True),
        (Event.FAILED, False),
        (Event.ENDED, False),
        (Event.RECOVERED, True),
        (Event.CLOSED, False),
    ):
        health.move(event)
        assert health.appending is appending is (health.state in APPENDING), event
    assert {s.status for s in JournalHealth} == {"off", "healthy", "failing"}
    assert JournalHealth.OFF.status == "off" and JournalHealth.FAILING.status == "failing"


def test_failures_back_off_and_a_recovery_clears_them() -> None:
    """The first failure of a run is reported (True) and sets since when; the retry waits
    ``backoff``; each failed rewrite after it doubles the next pause up to ``backoff_max``."""
    health = Health(0.5, 2.0)
    health.move(Event.OPENED)
    assert health.recovery_delay(0.0) is None
    assert health.fail("fsync: Input/output error", 1000.0, 10.0)
    assert (health.failing_since, health.last_error) == (1000.0, "fsync: Input/output error")
    delays = [health.recovery_delay(10.0)]
    for mono in (10.5, 11.0, 12.0, 14.0):
        assert not health.fail("rewrite: No space left on device", 2000.0, mono)
        delays.append(health.recovery_delay(mono))
    assert delays == [0.5, 0.5, 1.0, 2.0, 2.0]
    assert health.failing_since == 1000.0
    assert health.last_error == "rewrite: No space left on device"
    health.recovered()
    assert health.state is JournalHealth.OK and health.failing_since is None
    assert health.last_error is None and health.recovery_delay(20.0) is None
    assert health.fail("write to: No space left on device", 3000.0, 30.0)  # a new run
    assert health.recovery_delay(30.0) == 0.5 and health.failing_since == 3000.0
