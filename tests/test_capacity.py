"""The limits that follow the member count (``nvpair_wm.capacity``), and the line a node writes,
at start and in ``manager:status``, when a configured limit caps it below its members."""

from __future__ import annotations

import resource
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nvpair_wm.capacity import (
    Shortfall,
    Watch,
    connection_limit,
    descriptors_needed,
    listen_backlog,
    shortfalls,
    strangers_limit,
)
from nvpair_wm.clusterdir import init_cluster, make_self_signed
from nvpair_wm.http.core import Limits
from nvpair_wm.turns import Turns
from tests.conftest import TLSCluster
from tests.support.polling import eventually
from tests.support.tools import tool
from tests.support.wm_process import WAIT, WmProcess


def test_the_unset_defaults_follow_the_member_count() -> None:
    lim = Limits()
    assert strangers_limit(lim, 3) == 128 and strangers_limit(lim, 1000) == 1000
    assert connection_limit(lim, 3) == 1024  # a small cluster: the floor
    assert connection_limit(lim, 1000) == 2 * 1000 + 1000  # and every member handshaking
    assert listen_backlog(lim, 3) == 3 + 128
    assert listen_backlog(lim, 1000) == 1000 + 128
    # every member's connections here, its outbound one, and the node's own
    assert descriptors_needed(lim, 1000) == 3000 + 1000 + 64
    for members in (0, 1, 10, 100, 448, 449, 1000, 10_000):
        assert shortfalls(lim, members, None, None) == [], members


def test_a_configured_limit_is_used_as_is_and_named_when_it_caps_the_cluster() -> None:
    lim = Limits(max_connections=1024, listen_backlog=576, max_unauthenticated_connections=128)
    assert connection_limit(lim, 1000) == 1024 and listen_backlog(lim, 1000) == 576
    assert shortfalls(lim, 128, None, None) == []
    assert [s.key for s in shortfalls(lim, 129, None, None)] == [
        "http.max_unauthenticated_connections"  # 129 members cannot all be handshaking
    ]
    found = shortfalls(lim, 1000, None, None)
    assert found == [
        Shortfall("http.max_unauthenticated_connections", 128, 1000, 1000),
        Shortfall("http.max_connections", 1024, 2128, 1000),
        Shortfall("http.listen_backlog", 576, 1128, 1000),
    ]
    assert "set http.max_connections in the --config file" in found[1].message()


def test_the_system_limits_are_named_with_what_raises_them() -> None:
    lim = Limits()
    found = shortfalls(lim, 1000, 1024, 512)
    assert [s.key for s in found] == ["net.core.somaxconn", "RLIMIT_NOFILE"]
    assert found[1].needed == descriptors_needed(lim, 1000)
    assert "ulimit -Hn" in found[1].message() and "sysctl" in found[0].message()
    assert found[0].needed == 1000 + 128
    assert shortfalls(lim, 1000, 1_048_576, 4096) == []


def test_a_watch_reports_a_shortfall_once_and_again_when_it_changes() -> None:
    watch = Watch(Limits(max_connections=200, max_unauthenticated_connections=128))
    assert watch.check(10, None, None) == []
    first = watch.check(100, None, None)
    assert [s.key for s in first] == ["http.max_connections"]
    assert watch.check(100, None, None) == []  # nothing new: not logged again
    assert watch.check(101, None, None)[0].needed == 2 * 101 + 128
    assert watch.check(100, None, None)[0].needed == 2 * 100 + 128  # smaller: new numbers
    assert watch.check(10, None, None) == [] and watch.current == []


def _node_dir(tmp_path: Path, extra_pins: int) -> Path:
    node = init_cluster(tmp_path / "cluster", ["node-a", "node-b"])["node-a"]
    for i in range(extra_pins):
        cert, _ = make_self_signed(f"m-{i}")
        (node / "trusted" / f"m-{i}.crt").write_bytes(cert)
    return node


def test_a_node_says_at_start_and_in_status_which_limit_caps_it(tmp_path: Path) -> None:
    node = _node_dir(tmp_path, extra_pins=9)  # 10 members pinned
    conf = tmp_path / "wm.toml"
    conf.write_text("[http]\nmax_connections = 64\n")
    args = ("--cluster-dir", str(node), "--bind", "127.0.0.1", "--port", "0")
    with WmProcess(*args, "--config", str(conf)) as wm:
        assert wm.recv()["method"] == "ready"
        line = wm.wait_stderr("caps this node below its 10 members")
        assert "http.max_connections = 64" in line and "need 148" in line  # 2 x 10 + 128
        status = wm.status()
        assert status["capacity"] == [
            {"key": "http.max_connections", "limit": 64, "needed": 148, "members": 10}
        ]
    with WmProcess(*args) as wm:  # the defaults follow the members: nothing caps it
        assert wm.recv()["method"] == "ready"
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        expected = [] if soft >= descriptors_needed(Limits(), 10) else ["RLIMIT_NOFILE"]
        assert [c["key"] for c in wm.status()["capacity"]] == expected
        assert not any("caps this node" in line for line in wm.stderr_log)


def test_the_listen_backlog_follows_the_pins_at_start(tmp_path: Path) -> None:
    """ss shows a listener's backlog as Send-Q; /proc/net/tcp does not, so ask the socket."""
    node = _node_dir(tmp_path, extra_pins=300)  # 301 members: 301 + 128 > asyncio's 100
    with WmProcess("--cluster-dir", str(node), "--bind", "127.0.0.1", "--port", "0") as wm:
        assert wm.recv()["method"] == "ready"
        port = wm.status()["port"]
        backlog = _listen_backlog(port)
        assert backlog == min(301 + 128, _somaxconn()), backlog


def _somaxconn() -> int:
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


def _listen_backlog(port: int) -> int:
    """The backlog of the listener on 127.0.0.1:``port``, from sock_diag (``ss -ltn``)."""
    ss = tool("ss", "iproute2")
    out = subprocess.run(
        [ss, "-Hltn", "sport", f"= :{port}"], capture_output=True, text=True, check=True
    ).stdout
    fields = out.split()
    assert fields and fields[0] == "LISTEN", out
    return int(fields[2])  # State Recv-Q Send-Q: Send-Q is the backlog of a listener


def test_handshakes_take_turns_first_come_first_served(
    start_wm_server: Callable[..., Any],
    https_client: Callable[..., Any],
    tls_cluster: TLSCluster,
) -> None:
    """With one turn, a connection that sends no ClientHello holds it: a second client's
    handshake completes only after the first one is gone (before: at once, all in parallel)."""
    wm = start_wm_server(max_handshakes_at_once=1, handshake_timeout=5.0)
    finished: list[float] = []

    def second() -> None:
        https_client(wm.port, tls_cluster.pair("b"))  # returns once its handshake is done
        finished.append(time.monotonic())

    with socket.create_connection(("127.0.0.1", wm.port), timeout=WAIT):
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.5)  # the first connection holds the turn this long (the scenario)
        gone_at = time.monotonic()
    waiter.join(WAIT)
    assert finished and finished[0] >= gone_at, (finished, gone_at)
    # The client is done at its Finished; the server gives the turn back when it reads it.
    turns = wm.server._turns
    eventually(lambda: turns.holding == 0 and turns.waiting == 0, "every turn given back")


def test_turns_go_first_come_first_served_and_skip_who_left() -> None:
    gone: set[str] = set()
    turns = Turns[str](2, lambda who: who in gone)
    assert turns.take("a") and turns.take("b")
    assert not turns.take("c") and not turns.take("d") and not turns.take("e")
    gone.add("c")  # its connection closed while it waited
    assert turns.release() == "d"  # c is skipped, d is next
    assert turns.release() == "e" and turns.holding == 2 and turns.waiting == 0
    assert turns.release() is None and turns.release() is None and turns.holding == 0


def test_a_larger_turn_limit_gives_the_new_turns_to_the_waiters_in_order() -> None:
    gone: set[str] = set()
    turns = Turns[str](1, lambda who: who in gone)
    assert turns.take("a")
    assert not turns.take("b") and not turns.take("c") and not turns.take("d")
    gone.add("b")
    assert turns.set_limit(3) == ["c", "d"] and turns.holding == 3 and turns.waiting == 0
    assert turns.set_limit(1) == [] and turns.holding == 3  # holders keep theirs
    assert not turns.take("e")


def test_waiters_that_left_do_not_pile_up_in_the_queue() -> None:
    """A flood of connections that close while they wait (evicted strangers) is swept from the
    queue as it grows: it stays within about twice the waiters still there."""
    gone: set[int] = set()
    turns = Turns[int](1, lambda who: who in gone)
    assert turns.take(-1)
    for i in range(10_000):
        assert not turns.take(i)
        if i % 100:  # one in a hundred stays
            gone.add(i)
    assert turns.waiting <= 2 * 100 + 64, turns.waiting
    assert turns.release() == 0 and turns.release() == 100  # still first come, first served
