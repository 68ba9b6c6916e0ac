"""``WatchedPins`` and ``WatchedIdentity``: cached until inotify reports a change (real files)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from pathlib import Path

from nvpair_wm.clusterdir import cert_fingerprint, init_cluster, make_self_signed
from nvpair_wm.endpoint import EVENTS_PATH
from nvpair_wm.io.pin_watch import PerTick, WatchedIdentity, WatchedPins, open_watch
from nvpair_wm.pins import CERT_FILE, KEY_FILE, Identity, NodeIdentity, PinSet
from tests.support.curl import base_args, parse
from tests.support.frames import event
from tests.support.polling import eventually_async
from tests.support.tools import tool
from tests.support.wm_process import WAIT, WmProcess


class CountingPins(PinSet):
    def __init__(self, trusted_dir: Path) -> None:
        super().__init__(trusted_dir)
        self.scans = 0

    def current(self) -> frozenset[str]:
        self.scans += 1
        return super().current()


def test_every_change_is_seen_by_the_very_next_call_and_nothing_else_rescans(
    tmp_path: Path,
) -> None:
    dirs = init_cluster(tmp_path / "c", ["a", "b", "c"])
    trusted = dirs["a"] / "trusted"
    b = cert_fingerprint((dirs["b"] / "node.crt").read_bytes())
    c = cert_fingerprint((dirs["c"] / "node.crt").read_bytes())
    pins = CountingPins(trusted)
    watched = WatchedPins(pins)
    assert watched.is_pinned(b) and watched.is_pinned(c)
    for _ in range(100):
        assert watched.is_pinned(b)
    assert pins.scans == 1  # unchanged directory: one scan

    (trusted / "b.crt").unlink()
    assert not watched.is_pinned(b)  # removal: refused at once
    assert watched.is_pinned(c)

    pem, _ = make_self_signed("d")
    (trusted / "c.crt").write_bytes(pem)  # rewritten in place (no rename)
    assert not watched.is_pinned(c)
    assert watched.is_pinned(cert_fingerprint(pem))

    moved = trusted.parent / "trusted.old"
    trusted.rename(moved)  # the directory itself replaced
    assert not watched.is_pinned(cert_fingerprint(pem))
    shutil.copytree(moved, trusted)
    assert watched.is_pinned(cert_fingerprint(pem))
    (trusted / "c.crt").unlink()  # the new directory is watched too
    assert not watched.is_pinned(cert_fingerprint(pem))


def test_a_symlinked_pin_is_never_cached(tmp_path: Path) -> None:
    dirs = init_cluster(tmp_path / "c", ["a", "b"])
    trusted = dirs["a"] / "trusted"
    target = tmp_path / "elsewhere.crt"
    os.replace(trusted / "b.crt", target)
    (trusted / "b.crt").symlink_to(target)
    pins = CountingPins(trusted)
    watched = WatchedPins(pins)
    b = cert_fingerprint(target.read_bytes())
    assert watched.is_pinned(b)
    pem, _ = make_self_signed("e")
    target.write_bytes(pem)  # outside trusted/: inotify cannot see it, the scan does
    assert not watched.is_pinned(b)
    assert pins.scans == 2


class CountingIdentity(Identity):
    def __init__(self, cluster_dir: Path) -> None:
        super().__init__(cluster_dir)
        self.reads = 0

    def current(self) -> NodeIdentity | None:
        self.reads += 1
        return super().current()


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def test_identity_changes_are_seen_by_the_very_next_call_and_nothing_else_rereads(
    tmp_path: Path,
) -> None:
    d = init_cluster(tmp_path / "c", ["a", "b"])["a"]
    (d / "journal.log").touch()
    ident = CountingIdentity(d)
    watched = WatchedIdentity(ident)
    first = watched.current()
    assert first is not None
    assert first.fingerprint == cert_fingerprint((d / "node.crt").read_bytes())
    with open(d / "journal.log", "ab") as journal:  # the journal lives there too
        for _ in range(100):
            journal.write(b"x" * 100)
            journal.flush()
            assert watched.current() is first
    assert ident.reads == 1  # unchanged files: one read

    cert, key = make_self_signed("a2")
    _replace(d / "node.key", key)
    assert watched.current() is None  # the key no longer matches the certificate
    _replace(d / "node.crt", cert)  # rotated by rename: a new inode under the name
    rotated = watched.current()
    assert rotated is not None and rotated.fingerprint == cert_fingerprint(cert)

    (d / "node.crt").unlink()
    assert watched.current() is None  # removed: no identity at once
    (d / "node.crt").write_bytes(cert)  # back, written in place
    assert watched.current() == rotated

    cert3, key3 = make_self_signed("a3")
    (d / "node.key").write_bytes(key3)  # rewritten in place (same inode)
    (d / "node.crt").write_bytes(cert3)
    third = watched.current()
    assert third is not None and third.fingerprint == cert_fingerprint(cert3)

    moved = d.parent / "a.old"
    d.rename(moved)  # the directory itself moved away
    assert watched.current() is None
    shutil.copytree(moved, d)
    assert watched.current() == third
    (d / "node.crt").unlink()  # the new directory is watched too
    assert watched.current() is None


def test_a_symlinked_identity_file_is_never_cached(tmp_path: Path) -> None:
    d = init_cluster(tmp_path / "c", ["a"])["a"]
    target = tmp_path / "elsewhere.crt"
    os.replace(d / "node.crt", target)
    (d / "node.crt").symlink_to(target)
    ident = CountingIdentity(d)
    watched = WatchedIdentity(ident)
    assert watched.current() is not None
    cert, _ = make_self_signed("x")
    target.write_bytes(cert)  # outside the directory: inotify cannot see it, the stat does
    assert watched.current() is None  # the key no longer matches
    assert ident.reads == 2


def test_pins_and_identity_share_one_descriptor(tmp_path: Path) -> None:
    dirs = init_cluster(tmp_path / "c", ["a", "b"])
    d = dirs["a"]
    watch = open_watch()
    assert watch is not None, "inotify_init1 failed on Linux"
    pins = CountingPins(d / "trusted")
    ident = CountingIdentity(d)
    watched_pins, watched_ident = WatchedPins(pins, watch), WatchedIdentity(ident, watch)
    b = cert_fingerprint((dirs["b"] / "node.crt").read_bytes())
    for _ in range(10):
        assert watched_pins.is_pinned(b)
        assert watched_ident.current() is not None
    assert (pins.scans, ident.reads) == (1, 1)

    (d / "trusted" / "b.crt").unlink()  # seen by the pins although the identity looked first
    assert watched_ident.current() is not None
    assert not watched_pins.is_pinned(b)
    (d / "node.key").unlink()  # and the other way round
    assert not watched_pins.is_pinned(b)
    assert watched_ident.current() is None


def test_one_look_at_both_sources_through_their_shared_descriptor(tmp_path: Path) -> None:
    """The broadcaster's look before each batch (``PerTick.both``): one ``FIONREAD`` while
    nothing changed, every change seen by the very next look, a symlinked pin read per look."""
    dirs = init_cluster(tmp_path / "c", ["a", "b"])
    d = dirs["a"]
    watch = open_watch()
    assert watch is not None, "inotify_init1 failed on Linux"
    pins = CountingPins(d / "trusted")
    ident = CountingIdentity(d)
    fresh = PerTick(WatchedIdentity(ident, watch), WatchedPins(pins, watch))
    b = cert_fingerprint((dirs["b"] / "node.crt").read_bytes())
    for _ in range(20):
        own, pinned = fresh.both()
        assert own is not None and b in pinned
    assert (pins.scans, ident.reads) == (1, 1)

    (d / "trusted" / "b.crt").unlink()
    assert b not in fresh.both()[1]
    (d / "node.key").unlink()
    assert fresh.both()[0] is None

    target = tmp_path / "elsewhere.crt"
    target.write_bytes((dirs["b"] / "node.crt").read_bytes())
    (d / "trusted" / "b.crt").symlink_to(target)
    assert b in fresh.both()[1]
    scans = pins.scans
    pem, _ = make_self_signed("e")
    target.write_bytes(pem)  # outside trusted/: no event; read per look, so seen all the same
    assert b not in fresh.both()[1]
    assert pins.scans == scans + 1


def test_a_watch_the_loop_polls_is_checked_without_asking_the_descriptor(tmp_path: Path) -> None:
    """Polled by the loop (:meth:`Watch.poll_with`, as the node does), a change is seen once the
    loop drained its event, not before; after ``stop_polling`` every check asks again."""
    dirs = init_cluster(tmp_path / "c", ["a", "b", "c"])
    trusted = dirs["a"] / "trusted"
    b = cert_fingerprint((dirs["b"] / "node.crt").read_bytes())
    c = cert_fingerprint((dirs["c"] / "node.crt").read_bytes())
    watch = open_watch()
    assert watch is not None, "inotify_init1 failed on Linux"
    watched = WatchedPins(PinSet(trusted), watch)

    async def main() -> None:
        watch.poll_with(asyncio.get_running_loop())
        assert watched.is_pinned(b)
        (trusted / "b.crt").unlink()
        # Queued, not drained yet: this check is a comparison and still holds the old answer.
        assert watched.is_pinned(b)
        await eventually_async(lambda: not watched.is_pinned(b), "the loop drains the event")
        assert watched.is_pinned(c)
        watch.stop_polling()
        (trusted / "c.crt").unlink()
        assert not watched.is_pinned(c)  # not polled: the check asks the descriptor at once

    asyncio.run(main())


_FIONREAD = re.compile(r"ioctl\(\d+, FIONREAD")


def test_a_daemon_checks_pins_per_request_without_a_syscall_and_refuses_a_removed_one(
    tmp_path: Path,
) -> None:
    """A real daemon under ``strace``: after the first, forty requests in turn on one connection
    (each its own read, its own pin check) ask the inotify descriptor no ``FIONREAD`` (the event
    loop polls it), and the request after the caller's pin is removed is refused all the same."""
    strace = tool("strace")
    tool("curl")
    cluster = init_cluster(tmp_path / "cluster", ["node-1", "node-2"])
    node, member = cluster["node-1"], cluster["node-2"]
    trace = tmp_path / "trace"
    prefix = [strace, "-f", "-o", str(trace), "-e", "trace=ioctl"]
    body = tmp_path / "body"
    body.write_bytes(event("workload:submitted"))
    args = ["--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1"]
    requests = 40

    def post(count: int) -> list[int]:
        curl = base_args("--http2", WAIT, member / CERT_FILE, member / KEY_FILE)
        curl += ["--data-binary", f"@{body}", "-H", "Content-Type: application/json"]
        url = f"https://127.0.0.1:{port}{EVENTS_PATH}"
        done = subprocess.run(
            [*curl, *[url] * count], capture_output=True, timeout=WAIT * 3, check=False
        )
        assert done.returncode == 0, done.stderr.decode()
        results = parse(done.stdout)
        assert all(r.http_version == "2" for r in results)
        assert sum(r.new_connections for r in results) == 1  # one connection, in turn
        return [r.status for r in results]

    with WmProcess(*args, prefix=prefix) as wm:
        assert wm.recv()["method"] == "ready"
        port = wm.status()["port"]
        assert post(1) == [202]  # the first look reads trusted/ (and asks the descriptor)
        before = len(_FIONREAD.findall(trace.read_text()))
        assert post(requests) == [202] * requests
        asked = len(_FIONREAD.findall(trace.read_text())) - before
        (node / "trusted" / "node-2.crt").unlink()
        assert post(1) == [403]
        wm.close_stdin()
        assert wm.wait() == 0
    assert asked == 0, f"{asked} FIONREAD for {requests} requests"
