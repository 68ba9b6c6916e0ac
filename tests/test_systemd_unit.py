"""``packaging/nvpair-wm.service``: ``systemd-analyze verify`` accepts it (where systemd is
installed), its sandbox is what docs/operations.md promises, and its command lines work as
written: ``ExecStart`` (with this machine's paths put in for the unit's, and a datagram socket
standing for systemd's $NOTIFY_SOCKET) runs a node that dials its broker's socket and says
READY=1 to systemd (``Type=notify``) and pings its watchdog, ``ExecReload`` makes it read its
configuration again, SIGTERM is a clean end (exit 0: not restarted), and a configuration mistake
exits with the status the unit does not restart on."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nvpair_wm.clusterdir import init_cluster
from tests.support.ports import free_port
from tests.support.source_tree import ROOT
from tests.support.wm_process import WAIT

UNIT = ROOT / "packaging" / "nvpair-wm.service"
DAEMON = Path(sys.executable).parent / "nvpair-wm"


def directives(text: str) -> dict[str, list[str]]:
    """Key → values of the unit file (continuation lines joined, comments dropped)."""
    out: dict[str, list[str]] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith(("#", ";", "["))):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        key, _, value = (logical + line).partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
        logical = ""
    return out


UNIT_KEYS = directives(UNIT.read_text())


def one(key: str) -> str:
    [value] = UNIT_KEYS[key]
    return value


def localised(command: str, places: dict[str, str]) -> list[str]:
    for unit_path, here in places.items():
        command = command.replace(unit_path, here)
    return shlex.split(command)


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not found (apt-get install -y systemd): unit not verified")
    unit = tmp_path / UNIT.name  # the daemon's path on this machine: verify checks it exists
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/nvpair-wm", str(DAEMON)))
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # not even a warning


def systemd_environment(notify: Path) -> dict[str, str]:
    """What systemd passes a Type=notify service with WatchdogSec= (seconds) set."""
    watchdog_usec = int(float(one("WatchdogSec")) * 1_000_000)
    return {**os.environ, "NOTIFY_SOCKET": str(notify), "WATCHDOG_USEC": str(watchdog_usec)}


def notifications(sock: socket.socket) -> dict[str, str]:
    return dict(line.split("=", 1) for line in sock.recv(4096).decode().splitlines())


def test_the_sandbox_and_the_restart_policy() -> None:
    start = shlex.split(one("ExecStart"))
    cluster_dir = start[start.index("--cluster-dir") + 1]
    assert one("ReadWritePaths") == cluster_dir  # the only place it writes
    assert one("ProtectSystem") == "strict" and one("NoNewPrivileges") == "yes"
    assert one("User") not in ("", "root") and one("CapabilityBoundingSet") == ""
    assert one("Restart") == "on-failure"
    assert one("RestartPreventExitStatus") == "2"  # a configuration mistake: see below
    assert "--ipc" in start and "--metrics" in start  # the broker's socket; the probes
    assert one("Type") == "notify" and one("NotifyAccess") == "main"
    assert float(one("WatchdogSec")) > 0


def test_the_command_lines_run_as_written(tmp_path: Path) -> None:
    node = init_cluster(tmp_path / "cluster", ["node-1", "node-2"])["node-1"]
    config = tmp_path / "nvpair-wm.toml"
    config.write_text('port = 0\nbind = "127.0.0.1"\n')
    sock = tmp_path / "wm.sock"
    places = {
        "/usr/local/bin/nvpair-wm": str(DAEMON),
        "/etc/nvpair-wm/nvpair-wm.toml": str(config),
        "/var/lib/nvpair-wm/cluster": str(node),
        "/run/nvpair-broker/wm.sock": str(sock),
        "127.0.0.1:9464": f"127.0.0.1:{free_port()}",
    }
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as broker,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd,
    ):
        broker.bind(str(sock))
        broker.listen(1)
        broker.settimeout(WAIT)
        systemd.bind(str(tmp_path / "notify.sock"))
        systemd.settimeout(WAIT)
        daemon = subprocess.Popen(
            localised(one("ExecStart"), places),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=systemd_environment(tmp_path / "notify.sock"),
        )
        try:
            conn, _ = broker.accept()
            with conn:
                conn.settimeout(WAIT)
                assert json.loads(conn.makefile("rb").readline())["method"] == "ready"
                # The unit counts as started: the node said READY=1 (and goes on pinging).
                while "READY" not in (told := notifications(systemd)):
                    pass
                assert told["READY"] == "1", told
                while "WATCHDOG" not in notifications(systemd):
                    pass
                places["$MAINPID"] = str(daemon.pid)
                config.write_text('port = 0\nbind = "127.0.0.1"\nshutdown_grace = 3.0\n')
                reload = subprocess.run(
                    localised(one("ExecReload"), places), timeout=WAIT, check=False
                )
                assert reload.returncode == 0
                while "RELOADING" not in (told := notifications(systemd)):
                    pass
                while "READY" not in (told := notifications(systemd)):
                    pass
                daemon.send_signal(signal.SIGTERM)
                _, err = daemon.communicate(timeout=WAIT)
        finally:
            daemon.kill()
            daemon.wait()
    assert daemon.returncode == 0, err  # a clean end: Restart=on-failure leaves it
    assert all(json.loads(line)["level"] != "error" for line in err.splitlines()), err
    reloaded = [json.loads(line) for line in err.splitlines() if "configuration reloaded" in line]
    assert len(reloaded) == 1 and reloaded[0]["generation"] == 2, err
    assert reloaded[0]["applied"] == ["shutdown_grace"], err
    # A configuration mistake (here: the cluster root for a node's folder) is the status the
    # unit does not restart on.
    places["/var/lib/nvpair-wm/cluster"] = str(tmp_path / "cluster")
    mistake = subprocess.run(
        localised(one("ExecStart"), places),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert str(mistake.returncode) == one("RestartPreventExitStatus"), mistake.stderr
