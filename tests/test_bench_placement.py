"""``realpeer``'s placement (bench/realpeer.py): the server's core is the server's alone, and the
harness's broker drain runs with the generator. Checked on a real process and a real drain
thread; the benchmark measures what the placement is worth."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bench.internode import Server
from bench.procs import Drain
from bench.realpeer import cores_apart, pin_server


@pytest.fixture
def proc() -> Iterator[subprocess.Popen[bytes]]:
    """A stand-in server process: it lives until its stdin closes."""
    p = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        yield p
    finally:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(10)


def test_the_server_has_its_core_and_the_broker_drain_goes_with_the_generator(
    proc: subprocess.Popen[bytes],
) -> None:
    server_core, client_core = cores_apart()
    mine = os.sched_getaffinity(0)
    r, w = os.pipe()
    drain = Drain(r, "test-drain")
    drain.start()
    try:
        assert drain.native_id is not None
        pin_server(Server("ours", "nvpair-wm", 0, proc.pid, drain), server_core, client_core)
        assert os.sched_getaffinity(proc.pid) == {server_core}
        assert os.sched_getaffinity(drain.native_id) == {client_core}
        assert os.sched_getaffinity(0) == mine  # the caller's thread is left where it was
        os.write(w, b"a line\nanother\n")  # the pinned drain still drains
    finally:
        os.close(w)
        drain.join(10)
    assert not drain.is_alive()
    assert drain.lines == 2


def test_a_drain_that_has_ended_does_not_stop_the_server_being_pinned(
    proc: subprocess.Popen[bytes],
) -> None:
    """nginx's drain reads a pipe with no writer: it has ended (its thread id is gone) before
    the server is pinned."""
    server_core, client_core = cores_apart()
    r, w = os.pipe()
    os.close(w)
    drain = Drain(r, "test-ended-drain")
    drain.start()
    drain.join(10)
    pin_server(Server("nginx", "nginx", 0, proc.pid, drain), server_core, client_core)
    assert os.sched_getaffinity(proc.pid) == {server_core}
