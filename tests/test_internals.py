"""Every private API nvpair-wm uses (``nvpair_wm.internals``): on with the dependency versions
``pyproject.toml`` allows, taken where they are meant to be, and reported.

A fast path that goes off falls back to a public path without an error, so only a test that
asks can notice: this one fails when pyOpenSSL, cryptography or CPython's asyncio moved what
the fast paths use, within the bounds the project declares.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import re
import socket
import tomllib

import pytest
from nvpair_wm_schema.manager_status_schema import FastPaths
from OpenSSL import SSL
from packaging.requirements import Requirement

from nvpair_wm import internals
from nvpair_wm.internals import FastPath
from nvpair_wm.io.batch import EndOfBatch
from nvpair_wm.io.readsize import READ_SIZE, cap_reads
from nvpair_wm.proto.tls import TLSMachine
from tests.support.source_tree import ROOT
from tests.support.wm_process import WmProcess

#: The libraries whose internals are used: their upper bound is what this test vouches for.
BOUNDED = ("pyOpenSSL", "cryptography")


def _requirement(name: str) -> str:
    """``name``'s requirement on this platform (a win32-only line does not apply here)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = [
        str(req.specifier)
        for req in map(Requirement, deps)
        if req.name.lower() == name.lower() and (req.marker is None or req.marker.evaluate())
    ]
    assert len(found) == 1, f"{name} in pyproject.toml's dependencies: {found}"
    return found[0]


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+", maxsplit=1)[0])[:3])


@pytest.mark.parametrize("name", BOUNDED)
def test_each_library_with_internals_in_use_has_an_upper_bound_that_admits_this_one(
    name: str,
) -> None:
    spec = _requirement(name)
    upper = re.search(r"<\s*([0-9][0-9.]*)", spec)
    assert upper is not None, f"{spec!r}: no upper bound (its internals may move in any release)"
    installed = importlib.metadata.version(name)
    assert _release(installed) < _release(upper.group(1)), (installed, spec)


def test_every_fast_path_is_on_with_the_installed_versions() -> None:
    async def look() -> dict[FastPath, str | None]:
        return dict(internals.check(asyncio.get_running_loop()))

    found = asyncio.run(look())
    assert set(found) == set(FastPath)
    assert {path: why for path, why in found.items() if why is not None} == {}
    assert internals.report() == {path.value: True for path in FastPath}


def test_the_tls_machine_takes_the_direct_record_path() -> None:
    assert internals.OPENSSL is not None
    machine = TLSMachine(SSL.Connection(SSL.Context(SSL.TLS_METHOD), None))
    assert internals.ssl_parts(SSL.Connection(SSL.Context(SSL.TLS_METHOD), None)) is not None
    assert machine._raw is not None


def test_the_end_of_batch_sees_the_loop_run_queue() -> None:
    async def look() -> bool:
        loop = asyncio.get_running_loop()
        return EndOfBatch(loop)._run_queue is internals.run_queue(loop) is not None

    assert asyncio.run(look())


def test_socket_and_pipe_transports_take_the_read_size() -> None:
    async def look() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        sock_transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
        read_end, write_end = socket.socketpair()
        pipe_transport, _ = await loop.connect_read_pipe(asyncio.Protocol, read_end.makefile("rb"))
        try:
            cap_reads(sock_transport)
            cap_reads(pipe_transport)
            return sock_transport.max_size, pipe_transport.max_size  # type: ignore[attr-defined]
        finally:
            sock_transport.close()
            pipe_transport.close()
            for s in (theirs, write_end):
                s.close()

    assert asyncio.run(look()) == (READ_SIZE, READ_SIZE)


def test_manager_status_says_which_fast_paths_are_on() -> None:
    with WmProcess("--port", "0", "--log-level", "warn") as wm:
        assert wm.recv()["method"] == "ready"
        assert wm.status()["fastPaths"] == {path.value: True for path in FastPath}
        assert set(FastPaths.__struct_fields__) == {path.value for path in FastPath}
        assert not [line for line in wm.stderr_log if "fast path" in line]


def test_no_module_but_internals_names_a_private_api() -> None:
    """``grep -rn "_ready|OpenSSL._util|max_size" src/nvpair_wm`` finds internals.py alone."""
    pattern = re.compile(r"_ready|OpenSSL\._util|max_size")
    package = ROOT / "src" / "nvpair_wm"
    found = {
        p.relative_to(package).as_posix()
        for p in package.rglob("*.py")
        if pattern.search(p.read_text())
    }
    assert found == {"internals.py"}
