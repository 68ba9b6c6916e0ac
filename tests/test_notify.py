"""systemd's notify protocol: a real datagram socket stands for systemd, a real daemon sends to it.

READY=1 comes with ``ready`` to the broker (the moment /readyz turns 200), STATUS= says what the
node does, WATCHDOG=1 comes from the event loop every half interval, and stops while the process
is stopped (SIGSTOP: the loop cannot run) and resumes after SIGCONT; STOPPING=1 comes at the end.
Without $NOTIFY_SOCKET nothing is sent; $WATCHDOG_PID naming another process turns the pings off.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.dirlock import LOCK_FILE
from nvpair_wm.notify import Notifier, NotifySettings
from tests.support.cluster import workload
from tests.support.polling import eventually
from tests.support.tools import tool
from tests.support.wm_process import WAIT, WmProcess

WATCHDOG_USEC = 400_000  # pings every 0.2 s


class FakeSystemd:
    """The receiving end of $NOTIFY_SOCKET: every datagram, as its KEY=VALUE lines."""

    def __init__(self, sock: socket.socket, env_value: str) -> None:
        self.sock = sock
        self.env_value = env_value

    def next(self, timeout: float = WAIT) -> dict[str, str]:
        self.sock.settimeout(timeout)
        data = self.sock.recv(4096)
        return dict(line.split("=", 1) for line in data.decode().splitlines())

    def until(self, key: str, timeout: float = WAIT) -> tuple[dict[str, str], list[dict[str, str]]]:
        """The first datagram carrying ``key``, and the ones before it."""
        before: list[dict[str, str]] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {key} within {timeout} s; got {before}")
            try:
                message = self.next(left)
            except TimeoutError:
                raise AssertionError(f"no {key} within {timeout} s; got {before}") from None
            if key in message:
                return message, before
            before.append(message)

    def drain(self) -> list[dict[str, str]]:
        out = []
        while True:
            try:
                out.append(self.next(0.0))
            except (TimeoutError, BlockingIOError):
                return out


@contextmanager
def fake_systemd(tmp_path: Path, *, abstract: bool = False) -> Iterator[FakeSystemd]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        if abstract:
            name = f"nvpair-wm-test-{os.getpid()}-{tmp_path.name}"
            sock.bind("\0" + name)
            yield FakeSystemd(sock, "@" + name)
        else:
            path = tmp_path / "notify.sock"
            sock.bind(str(path))
            yield FakeSystemd(sock, str(path))


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


@pytest.mark.serial  # a wall-clock bound: run alone (Makefile: test)
@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_ready_status_watchdog_and_stopping(tmp_path: Path, abstract: bool) -> None:
    with fake_systemd(tmp_path, abstract=abstract) as systemd:
        env = {"NOTIFY_SOCKET": systemd.env_value, "WATCHDOG_USEC": str(WATCHDOG_USEC)}
        with WmProcess("--port", "0", "--bind", "127.0.0.1", env=env) as wm:
            ready, before = systemd.until("READY")
            assert ready["READY"] == "1"
            assert ready["STATUS"].startswith("relaying: 0 peers"), ready
            assert all("STOPPING" not in m for m in before)
            # READY=1 is sent in the same turn of the loop as ``ready`` to the broker.
            assert wm.recv()["method"] == "ready"
            # The pings come every half interval.
            systemd.until("WATCHDOG")
            t0 = time.monotonic()
            systemd.until("WATCHDOG")
            systemd.until("WATCHDOG")
            assert time.monotonic() - t0 < WATCHDOG_USEC / 1e6 * 2, "pings too slow"
            wm.send_frame({"jsonrpc": "2.0", "method": "manager:status", "id": 1})
            assert wm.recv()["id"] == 1
            wm.close_stdin()
            stopping, _ = systemd.until("STOPPING")
            assert stopping == {"STOPPING": "1", "STATUS": "stopping"}
            assert wm.wait() == 0


def test_watchdog_pings_stop_while_the_loop_is_stalled(tmp_path: Path) -> None:
    with fake_systemd(tmp_path) as systemd:
        env = {"NOTIFY_SOCKET": systemd.env_value, "WATCHDOG_USEC": str(WATCHDOG_USEC)}
        with WmProcess("--port", "0", "--bind", "127.0.0.1", env=env) as wm:
            systemd.until("READY")
            systemd.until("WATCHDOG")
            wm.proc.send_signal(signal.SIGSTOP)
            try:
                eventually(lambda: process_state(wm.proc.pid) == "T", "the node stopped")
                systemd.drain()  # sent before the stop took effect
                stalled = WATCHDOG_USEC / 1e6 * 3  # three intervals, six missed pings
                with pytest.raises(TimeoutError):
                    systemd.next(stalled)
            finally:
                wm.proc.send_signal(signal.SIGCONT)
            resumed, _ = systemd.until("WATCHDOG", timeout=WATCHDOG_USEC / 1e6 * 2)
            assert resumed["WATCHDOG"] == "1"
            wm.close_stdin()
            systemd.until("STOPPING")
            assert wm.wait() == 0


def test_status_says_the_node_waits_for_its_broker(tmp_path: Path) -> None:
    ipc = tmp_path / "broker.sock"  # nobody listens: the node keeps dialing
    with fake_systemd(tmp_path) as systemd:
        env = {"NOTIFY_SOCKET": systemd.env_value}
        with WmProcess("--port", "0", "--bind", "127.0.0.1", "--ipc", str(ipc), env=env) as wm:
            message, _ = systemd.until("STATUS")
            assert message["STATUS"] == f"waiting for the broker on --ipc {ipc}"
            assert "READY" not in message
            wm.terminate()
            systemd.until("STOPPING")
            assert wm.wait() == 0


def test_nothing_without_the_variable() -> None:
    settings = NotifySettings.from_environ({"WATCHDOG_USEC": "1000000"}, pid=42)
    assert settings == NotifySettings(None, None)
    notifier = Notifier(settings)
    assert not notifier.enabled
    notifier.ready("x")  # no socket, no error
    notifier.watchdog()


def test_the_watchdog_belongs_to_the_pid_systemd_names() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "2000000"}
    assert NotifySettings.from_environ(env, pid=42).watchdog_interval == 2.0
    assert NotifySettings.from_environ({**env, "WATCHDOG_PID": "42"}, 42).ping_every == 1.0
    assert NotifySettings.from_environ({**env, "WATCHDOG_PID": "7"}, 42).watchdog_interval is None
    assert NotifySettings.from_environ({**env, "WATCHDOG_USEC": "0"}, 42).watchdog_interval is None
    abstract = NotifySettings.from_environ({"NOTIFY_SOCKET": "@sd"}, 42)
    assert abstract.address == b"\0sd"


def test_a_gone_systemd_is_no_error(tmp_path: Path) -> None:
    notifier = Notifier(NotifySettings(str(tmp_path / "nobody"), 1.0))
    notifier.ready("x")
    notifier.watchdog()
    notifier.stopping()
    notifier.close()


def test_status_says_when_the_journal_fails(tmp_path: Path) -> None:
    """A real fault (strace injects ENOSPC into the journal's writes): STATUS= says so."""
    strace = tool("strace")
    node = init_cluster(tmp_path / "cluster", ["node-1"])["node-1"]
    config = tmp_path / "wm.toml"
    config.write_text("[journal]\nretry_backoff = 30.0\nretry_backoff_max = 30.0\n")
    args = ["--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1"]
    args += ["--config", str(config)]
    fault = [strace, "-f", "-o", "/dev/null", "-e", "trace=write"]
    fault += ["-P", str(node / "journal.log"), "-e", "inject=write:error=ENOSPC"]
    with fake_systemd(tmp_path) as systemd:
        env = {"NOTIFY_SOCKET": systemd.env_value, "WATCHDOG_USEC": str(WATCHDOG_USEC)}
        with WmProcess(*args, prefix=fault, env=env) as wm:
            ready, _ = systemd.until("READY")
            assert "journal" not in ready["STATUS"], ready
            assert wm.recv()["method"] == "ready"
            w = workload("node-1", "w1")
            wm.request("workload:submitted", {"workloadInfo": w})  # its append fails
            while "journal failing" not in (told := systemd.until("STATUS")[0])["STATUS"]:
                pass
            assert "No space left on device" in told["STATUS"], told
            assert "not ready: the journal is failing" in told["STATUS"], told
            pid = int((node / LOCK_FILE).read_text())  # the daemon, strace's child
            os.kill(pid, signal.SIGTERM)
            systemd.until("STOPPING")
            assert wm.wait() == 0


def test_ready_waits_for_what_readyz_waits_for(tmp_path: Path) -> None:
    """No identity in the cluster directory: the node writes ``ready`` to its broker, but
    /readyz says 503, so systemd is told why (STATUS=) and not READY=1, until node.crt and
    node.key are back."""
    node = init_cluster(tmp_path / "cluster", ["node-1", "node-2"])["node-1"]
    stash = tmp_path / "stash"
    stash.mkdir()
    for name in ("node.crt", "node.key"):
        (node / name).rename(stash / name)
    args = ["--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1"]
    with fake_systemd(tmp_path) as systemd:
        env = {"NOTIFY_SOCKET": systemd.env_value, "WATCHDOG_USEC": str(WATCHDOG_USEC)}
        with WmProcess(*args, env=env) as wm:
            assert wm.recv()["method"] == "ready"
            waiting: list[dict[str, str]] = []
            while "no cluster identity" not in (told := systemd.until("STATUS")[0])["STATUS"]:
                waiting.append(told)
            assert "not ready" in told["STATUS"], told
            assert all("READY" not in m for m in [*waiting, told])
            for name in ("node.key", "node.crt"):  # each atomically: a copy, then a rename
                (node / f".{name}.tmp").write_bytes((stash / name).read_bytes())
                (node / f".{name}.tmp").rename(node / name)
            ready, _ = systemd.until("READY")
            assert ready["READY"] == "1" and "not ready" not in ready["STATUS"], ready
            wm.close_stdin()
            systemd.until("STOPPING")
            assert wm.wait() == 0
