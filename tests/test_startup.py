"""An operator's mistakes at start-up are refused with the fix named, and a stop signal during
start-up ends the process cleanly. Every case runs the real ``nvpair-wm`` process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.dirlock import LOCK_FILE
from tests.support.polling import eventually
from tests.support.tools import tool
from tests.support.wm_process import WAIT, WmProcess, ipc_broker, run_cli


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a directory)."""
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_cluster_root_is_refused_naming_its_node_folders(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    init_cluster(root, ["node-1", "node-2", "node-3"])
    before = tree(root)
    done = run_cli("--cluster-dir", str(root), "--port", "0")
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert f"--cluster-dir {root}: a cluster root" in line
    assert "node-1, node-2, node-3" in line and f"--cluster-dir {root / 'node-1'}" in line
    assert tree(root) == before  # nothing written: no journal.log, no lock in the root
    assert done.stdout == ""


def test_a_second_daemon_on_one_cluster_dir_is_refused_naming_the_lock_and_holder(
    tmp_path: Path,
) -> None:
    node = init_cluster(tmp_path / "cluster", ["node-1", "node-2"])["node-1"]
    with WmProcess("--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1") as first:
        assert first.recv()["method"] == "ready"
        lock = node / LOCK_FILE
        assert lock.read_text().strip() == str(first.proc.pid)
        before = tree(node)
        done = run_cli("--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1")
        assert done.returncode == 2, done.stderr
        line = one_line(done)
        assert f"in use by process {first.proc.pid}" in line and str(lock) in line, line
        assert tree(node) == before  # the lock still names the first; its journal untouched
        assert first.status()["hasIdentity"] is True  # the first runs on
        first.close_stdin()
        assert first.wait() == 0
    # The lock went with its holder: the next daemon starts (and exits 0 on EOF).
    done = run_cli("--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1")
    assert done.returncode == 0, done.stderr


def test_metrics_on_an_address_not_of_this_host_names_metrics(tmp_path: Path) -> None:
    done = run_cli("--port", "0", "--metrics", "192.0.2.1:9464")  # TEST-NET-1: nobody's
    assert done.returncode == 2, done.stderr
    assert "--metrics 192.0.2.1:9464: not an address of this host" in one_line(done)


def test_print_config_previews_a_config_for_another_host(tmp_path: Path) -> None:
    """The file may be meant for another host: its addresses, directories and sockets are
    not looked for here; a value no host could use is still refused."""
    cfg = tmp_path / "other-host.toml"
    cfg.write_text(
        'bind = "192.0.2.1"\nmetrics = "192.0.2.1:9464"\n'
        'cluster_dir = "/nonexistent/cluster/node-7"\nipc = "/nonexistent/broker.sock"\n'
    )
    done = run_cli("--config", str(cfg), "--print-config")
    assert done.returncode == 0, done.stderr
    for line in ('bind = "192.0.2.1"', 'cluster_dir = "/nonexistent/cluster/node-7"'):
        assert line in done.stdout
    done = run_cli("--config", str(cfg), "--print-config", "--bind", "999.1.1.1")
    assert done.returncode == 2
    assert "--bind 999.1.1.1: not a valid IPv4 or IPv6 address" in one_line(done)
    done = run_cli("--config", str(cfg))  # run here: the same file is refused
    assert done.returncode == 2
    assert ": bind: not an address of this host" in one_line(done)


def test_ipc_says_once_at_once_that_it_waits_for_the_broker(tmp_path: Path) -> None:
    path = tmp_path / "broker.sock"
    with WmProcess("--ipc", str(path), "--port", "0") as wm:
        line = wm.wait_stderr("waiting for the broker")
        assert f"--ipc {path}" in line and "up to 10 s" in line, line
        # Still dialing: a broker that listens now is reached, and no second line was said.
        with ipc_broker(path) as (conn, _):
            conn.shutdown(socket.SHUT_WR)
            assert wm.wait() == 0
    assert sum("waiting for the broker" in ln for ln in wm.stderr_log) == 1, wm.stderr_log


def test_a_signal_while_waiting_for_the_broker_exits_0(tmp_path: Path) -> None:
    with WmProcess("--ipc", str(tmp_path / "broker.sock"), "--port", "0") as wm:
        wm.wait_stderr("waiting for the broker")
        wm.terminate()
        assert wm.wait() == 0
    assert [ln for ln in wm.stderr_log if "SIGTERM" in ln] == [wm.stderr_log[-1]]
    assert len(wm.stderr_log) == 2, wm.stderr_log  # the wait, the signal: nothing else


def _state(pid: int) -> tuple[str, str]:
    """(process state letter, the syscall it is in) from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    state = stat[stat.rindex(")") + 2]
    try:
        syscall = Path(f"/proc/{pid}/syscall").read_text().split()[0]
    except (OSError, IndexError):
        syscall = ""
    return state, syscall


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_start_up_exits_0_with_one_line(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """The start-up is held where it is slowest (the journal's open, before the event loop
    runs) by strace delaying that one openat; the signal comes while it is held."""
    strace = tool("strace")
    node = init_cluster(tmp_path / "cluster", ["node-1"])["node-1"]
    journal = node / "journal.log"
    argv = [
        strace,
        "-f",
        "-o",
        "/dev/null",
        "-P",
        str(journal),
        "-e",
        "trace=openat",
        "-e",
        "inject=openat:delay_enter=1500000",  # 1.5 s; the signal is handled once it returns
        sys.executable,
        "-m",
        "nvpair_wm",
        "--cluster-dir",
        str(node),
        "--port",
        "0",
    ]
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        lock = node / LOCK_FILE

        def stopped_daemon() -> int:
            """The daemon's pid once strace holds it in openat(journal.log), else 0 (the lock
            names the daemon, strace's child)."""
            text = lock.read_text().strip() if lock.exists() else ""
            if text.isdigit() and _state(pid := int(text)) == ("t", "257"):
                return pid
            return 0

        pid = eventually(
            stopped_daemon,
            lambda: f"the daemon never reached the journal's open: {proc.communicate()}",
        )
        os.kill(pid, sig)
        out, err = proc.communicate(timeout=WAIT)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert out == ""  # no ready: it never started
    [line] = err.strip().splitlines()
    assert f"{sig.name} received during start-up; exiting" in line, line
