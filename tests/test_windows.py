"""The daemon's Windows build, run here under Wine: the embeddable Windows CPython with the
Windows wheels (:mod:`tests.support.wine`, prepared once into a cache), this tree's code.

* the broker on stdio, and on a named pipe (``--ipc \\\\.\\pipe\\NAME``, served by a stand-in
  broker itself under Wine), with Ctrl+C and the broker's end of the channel as clean stops;
* platforms.py's Windows side (``tests/support/windows_checks.py``);
* the conformance kit, from the Linux side, against the Windows daemon in both roles;
* a cluster of a Linux node and a Windows node: events both ways, the Windows node killed and
  its journal reloaded when it starts again.

Wine is Debian's ``wine64`` (``.ci/run`` installs it); without it these tests are skipped with
one line. Wine starts a process in a few seconds: one prepared environment and one persistent
``wineserver`` serve the whole session, and the waits here allow for that start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvpair_wm.config import dumps
from nvpair_wm.journal import JOURNAL_FILE
from tests.support.cluster import Cluster, Node, event, is_upsert, workload
from tests.support.wine import WineEnv, prepare, wine_binary, zpath
from tests.support.wm_process import WmProcess

# One Wine prefix and one wineserver for every test here (the session fixture `windows`, which
# stops that wineserver at the end): make test's --dist loadfile runs them all on one worker.

if wine_binary() is None:  # one line in the summary, as for h2spec
    pytest.skip(
        "Wine is missing (apt-get install -y wine64; .ci/run installs it): the Windows build "
        "is not checked",
        allow_module_level=True,
    )

#: A Windows process's start under Wine (and the daemon's imports), on a loaded host.
START = 90.0
CONVERGE_WITHIN = 30.0
#: The kit's whole run against the Windows daemon (one Wine start per group).
KIT_TIMEOUT = 600.0
PIPE_BROKER = Path(__file__).parent / "support" / "pipe_broker.py"
WINDOWS_CHECKS = Path(__file__).parent / "support" / "windows_checks.py"
#: The kit's groups run against the Windows daemon: both roles (the local channel, the node as
#: peers' server and as their client) in about two minutes of Wine; NVPAIR_WM_WINE_KIT=all runs
#: every group that applies (all but local-ipc, a Unix socket: the named pipe is checked here),
#: five minutes more.
ALL_KIT_GROUPS = (
    *("local-requests", "local-errors", "local-framing", "local-batches", "local-dedup"),
    *("http-*", "peer-*"),
)
KIT_GROUPS = (
    ALL_KIT_GROUPS
    if os.environ.get("NVPAIR_WM_WINE_KIT") == "all"
    else ("local-requests", "http-status", "http-dedup", "peer-relay")
)
PIPE_KIT_GROUPS = ("local-framing", "http-backpressure")
#: A named pipe has no half-close: the broker's end of the channel closes both directions, so
#: the answer to a last line sent just before it cannot reach the broker (docs/windows.md).
PIPE_KIT_CANNOT = {"local-framing/exit": "expected 1 line(s), got 0"}


@pytest.fixture(scope="session")
def windows() -> Iterator[WineEnv]:
    wine = wine_binary()
    assert wine is not None  # the module is skipped without it
    env = prepare(wine)
    # One wineserver for the session: each process would otherwise start (and end) its own.
    env.start_server()
    try:
        yield env
    finally:
        env.stop_server()


def windows_node(node: Node, windows: WineEnv) -> Node:
    node.program = windows.program("-m", "nvpair_wm")
    return node


def start(node: Node) -> None:
    node.spawn()
    ready = node.recv(timeout=START)
    assert ready["method"] == "ready", ready
    node.port = node.status()["port"]


def test_platform_pieces_on_windows(windows: WineEnv, tmp_path: Path) -> None:
    """platforms.py's Windows side on Windows: locks between two processes (and freed by a
    kill), binary files, positioned IO, Ctrl+C and Ctrl+Break on the proactor loop, and the
    journal's compaction (its file replaced while it appends to it)."""
    run = subprocess.run(
        windows.program(str(WINDOWS_CHECKS), str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=START,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    checks = ["ok locks", "ok files", "ok signals", "ok compaction"]
    assert run.stdout.split("\n")[:4] == checks, run.stdout


@pytest.mark.timeout(6 * START)
def test_named_pipe_broker_and_a_mixed_cluster_with_a_kill(
    windows: WineEnv, tmp_path: Path
) -> None:
    """A Windows node dials its broker's named pipe (started first: the node retries until it
    listens), a Linux node runs beside it; events go both ways; the broker's close stops the
    node. Then on stdio: the Windows node is killed, starts again on its cluster directory and
    reloads what it originated from its journal, and Ctrl+C stops it cleanly."""
    cluster = Cluster(tmp_path / "cluster", 2)
    linux, win = cluster["node-a"], cluster["node-b"]
    pipe = f"\\\\.\\pipe\\nvpair-wm-test-{uuid.uuid4().hex[:8]}"
    # The node first, the broker once the node has failed to dial it: the node dials again
    # with backoff until the pipe exists.
    # The broker's start under Wine may take longer than the default dial budget (10 s).
    config = tmp_path / "dial.toml"
    config.write_text(dumps({"broker.dial_timeout": START}))
    flags = ["--ipc", pipe, "--bind", "127.0.0.1", "--port", "0", "--log-level", "debug"]
    flags += ["--cluster-dir", str(win.cluster_dir), "--config", str(config)]
    with WmProcess(*flags, program=windows.program("-m", "nvpair_wm")) as daemon:
        daemon.wait_stderr(f"waiting for the broker to listen on --ipc {pipe}", timeout=START)
        win.program = windows.program(str(PIPE_BROKER), pipe)
        win.spawn()
        try:
            ready = win.recv(timeout=START)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nthe node's log:\n" + "\n".join(daemon.stderr_log)
            ) from None
        assert ready["method"] == "ready", ready
        win.port = win.status()["port"]
        start(linux)
        cluster.announce()
        linux.send(event("workload:submitted", workload("node-a", "from-linux")))
        win.send(event("workload:submitted", workload("node-b", "from-windows")))
        win.send(event("workload:started", workload("node-b", "from-windows", 2, startedAt=2)))
        win.wait_for(is_upsert("from-linux"), timeout=CONVERGE_WITHIN)
        linux.wait_for(is_upsert("from-windows", 2), timeout=CONVERGE_WITHIN)
        win.status()  # answered after both events were journaled
        # The broker closes its end of the pipe: the node stops cleanly.
        win.wm.close_stdin()
        daemon.wait_stderr("broker closed the channel; shutting down", timeout=START)
        assert daemon.wait(timeout=START) == 0, daemon.stderr_log
        assert win.wm.wait(timeout=START) == 0, win.wm.stderr_log
        win.proc = None
    try:
        # Now on stdio, killed mid-run: the journal holds what it originated.
        windows_node(win, windows)
        start(win)
        assert win.status()["counters"]["workloads"] == 2
        cluster.announce(to=[win])
        win.send(event("workload:completed", workload("node-b", "from-windows", 3, completedAt=3)))
        linux.wait_for(is_upsert("from-windows", 3), timeout=CONVERGE_WITHIN)
        win.status()
        win.kill()
        assert (win.cluster_dir / JOURNAL_FILE).exists()
        start(win)
        win.wait_log("journal: reloaded 2 workloads", timeout=START)
        status = win.status()
        assert status["counters"]["workloads"] == 2, status
        cluster.announce(to=[win])
        # What it reloaded stands: the newest it originated is a duplicate now.
        win.send(event("workload:completed", workload("node-b", "from-windows", 3, completedAt=3)))
        assert win.status()["counters"]["duplicates"] == 1
        # Ctrl+C (Wine hands SIGINT to a Windows process as one): a clean stop.
        win.signal(signal.SIGINT)
        win.wait_log("SIGINT received; shutting down", timeout=START)
        assert win.wm.wait(timeout=START) == 0
        logs = "\n\n".join("\n".join(run.stderr_log) for run in win.runs)
        assert cluster.errors() == [], logs
    finally:
        cluster.close()


def kit(
    windows: WineEnv, groups: tuple[str, ...], *command: str, cannot: dict[str, str] | None = None
) -> None:
    """The kit from the Linux side with ``command`` under Wine as the implementation: every
    case of ``groups`` passes but those of ``cannot`` (case → its first problem), which fail
    with that problem."""
    only = [arg for group in groups for arg in ("--only", group)]
    kit = Path(sys.executable).with_name("nvpair-wm-conformance")
    run = subprocess.run(
        # The answer timeout allows for a start under Wine (two with the pipe's stand-in broker);
        # one group at a time, as the kit ran before two became its default: two Wine daemons
        # at once on two cores starve http-backpressure's full-queue timing.
        [
            str(kit),
            "--json",
            "--jobs",
            "1",
            "--timeout",
            str(START),
            *only,
            "--",
            *windows.program(*command),
        ],
        capture_output=True,
        text=True,
        timeout=KIT_TIMEOUT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert run.stdout, run.stderr[-4000:]
    doc: Any = json.loads(run.stdout)
    failed = {r["name"]: r["problems"] for r in doc["results"] if not r["passed"]}
    expected = cannot or {}
    assert doc["passed"] > 0 and set(failed) == set(expected), (failed, run.stderr[-4000:])
    for name, problem in expected.items():
        assert failed[name][0] == problem, failed[name]
    assert run.returncode == (1 if expected else 0), run.stderr[-4000:]


@pytest.mark.timeout(KIT_TIMEOUT + 60)
def test_conformance_kit_passes_against_the_windows_daemon(windows: WineEnv) -> None:
    """The kit from the Linux side, the daemon under Wine on stdio: the local channel, the
    node as a server to peers and as their client."""
    kit(windows, KIT_GROUPS, "-m", "nvpair_wm")


@pytest.mark.timeout(KIT_TIMEOUT + 60)
def test_conformance_kit_passes_over_the_named_pipe(windows: WineEnv) -> None:
    """The local channel again with the node on a named pipe (the stand-in broker starts it
    with ``--ipc`` and relays the kit's stdio to the pipe): framing and the end of the channel,
    and backpressure (the kit stops reading: peers get 503)."""
    pipe = f"\\\\.\\pipe\\nvpair-wm-kit-{uuid.uuid4().hex[:8]}"
    node = (zpath(windows.python), "-m", "nvpair_wm")
    kit(windows, PIPE_KIT_GROUPS, str(PIPE_BROKER), pipe, "--", *node, cannot=PIPE_KIT_CANNOT)
