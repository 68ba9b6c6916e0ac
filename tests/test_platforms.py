"""The platform pieces (:mod:`nvpair_wm.platforms`) on this system, and the Windows-side code
that runs here too: the stdio threads' bounds (every pipe on Windows goes through them), the
named-pipe form of ``--ipc``, pins read without inotify. The Windows sides that need Windows
run under Wine in ``tests/test_windows.py``.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nvpair_wm import cli, local, platforms
from nvpair_wm.clusterdir import cert_fingerprint, init_cluster, make_self_signed
from nvpair_wm.io import pin_watch
from nvpair_wm.pins import CERT_FILE, KEY_FILE, TRUSTED_DIR, Identity, PinSet
from tests.support.polling import eventually_async

HOLD = """
import sys, time
sys.path[:0] = {paths!r}
from pathlib import Path
from nvpair_wm import platforms
fd = platforms.lock_directory(Path(sys.argv[1]))
print("locked", flush=True)
sys.stdin.read()
"""


def holder(directory: Path) -> subprocess.Popen[str]:
    """Another process holding ``directory``'s lock until its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(paths=sys.path), str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "locked\n"
    return proc


def test_a_locked_directory_is_refused_and_freed_when_its_holder_dies(tmp_path: Path) -> None:
    proc = holder(tmp_path)
    try:
        with pytest.raises(BlockingIOError):
            platforms.lock_directory(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    fd = platforms.lock_directory(tmp_path)  # released by the holder's end, however it ended
    os.close(fd)


def test_positioned_reads_and_writes(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert platforms.write_at(fd, b"hello\nworld\n", 0) == 12
        assert platforms.write_at(fd, b"W", 6) == 1
        assert platforms.read_at(fd, 5, 6) == b"World"
        assert platforms.read_at(fd, 100, 10) == b"d\n"
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"hello\nWorld\n"  # binary: no \r added


def test_sync_directory_and_descriptor_limit(tmp_path: Path) -> None:
    platforms.sync_directory(tmp_path)
    with pytest.raises(OSError):
        platforms.sync_directory(tmp_path / "missing")
    assert platforms.raise_descriptor_limit() is None


@pytest.mark.parametrize(
    ("path", "pipe"),
    [
        ("\\\\.\\pipe\\nvpair-wm", True),
        ("\\\\.\\PIPE\\broker", True),
        ("//./pipe/broker", True),
        ("/run/broker.sock", False),
        ("\\\\.\\pipes\\x", False),
        ("pipe\\x", False),
    ],
)
def test_named_pipe_paths(path: str, pipe: bool) -> None:
    assert platforms.is_named_pipe(path) is pipe


def test_ipc_is_refused_when_it_names_the_other_systems_endpoint() -> None:
    why = cli.ipc_problem("\\\\.\\pipe\\broker")
    assert why is not None and "named pipe" in why


def test_stop_signals_reach_the_loop() -> None:
    got: list[signal.Signals] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()

        def stop(sig: signal.Signals) -> None:
            got.append(sig)
            stopped.set()

        platforms.on_stop_signals(loop, stop)
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(stopped.wait(), 10)
        finally:
            for sig in platforms.STOP_SIGNALS:
                loop.remove_signal_handler(sig)

    asyncio.run(main())
    assert got == [signal.SIGTERM]


def test_the_stdin_thread_stays_a_bounded_distance_ahead(tmp_path: Path) -> None:
    """The thread that reads what asyncio cannot watch (every stdio pipe on Windows) stops
    reading once THREAD_BUFFER_BYTES wait unread, and everything arrives, in order, at EOF."""
    data = bytes(range(256)) * (8 * local.THREAD_BUFFER_BYTES // 256)
    (tmp_path / "in").write_bytes(data)
    bound = local.THREAD_BUFFER_BYTES + local.READ_CHUNK

    async def main(stream: io.FileIO) -> bytes:
        reader = local.BrokerReader()
        local._feed_from_thread(asyncio.get_running_loop(), reader, stream)
        # The reading task reads nothing meanwhile: the thread stops once the bound is reached.
        await eventually_async(lambda: not reader.room.is_set(), "the reader thread paused")
        assert stream.tell() <= bound, stream.tell()
        got = b""
        while chunk := await reader.read(local.READ_CHUNK):
            assert stream.tell() - len(got) <= bound + len(chunk)
            got += chunk
        return got

    with open(tmp_path / "in", "rb", buffering=0) as stream:
        assert asyncio.run(asyncio.wait_for(main(stream), 30)) == data


def test_the_stdout_thread_applies_the_brokers_backpressure() -> None:
    """ThreadWriter (stdout where asyncio cannot write it, as on Windows): drain() waits while
    more than THREAD_BUFFER_BYTES are unwritten, and returns once the broker reads."""
    r, w = os.pipe()

    async def main(out: io.FileIO) -> None:
        writer = local.ThreadWriter(out, asyncio.get_running_loop())
        frame = b"x" * 1000 + b"\n"
        for _ in range(2 * local.THREAD_BUFFER_BYTES // len(frame)):
            writer.write(frame)  # the pipe (64 KiB) fills: the thread blocks
        assert writer.get_write_buffer_size() > local.THREAD_BUFFER_BYTES
        drain = asyncio.ensure_future(writer.drain())
        done, _ = await asyncio.wait([drain], timeout=0.2)
        assert not done  # the broker reads nothing: drain waits
        total = 2 * local.THREAD_BUFFER_BYTES // len(frame) * len(frame)
        got = bytearray()

        def broker() -> None:
            while len(got) < total:
                got.extend(os.read(r, 65536))

        reading = threading.Thread(target=broker)
        reading.start()
        await asyncio.wait_for(drain, 10)
        writer.close()
        reading.join(10)
        assert len(got) == total

    try:
        asyncio.run(main(io.FileIO(w, "wb")))
    finally:
        os.close(r)


def test_pins_and_identity_without_inotify_follow_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where there is no inotify (Windows), the sources compare ``stat`` signatures on each
    use: a removed pin is refused and a new identity used by the very next look."""
    monkeypatch.setattr(pin_watch, "open_watch", lambda: None)  # what it answers off Linux
    dirs = init_cluster(tmp_path / "c", ["a", "b"])
    a = dirs["a"]
    pins = pin_watch.WatchedPins(PinSet(a / TRUSTED_DIR))
    identity = pin_watch.WatchedIdentity(Identity(a))
    tick = pin_watch.PerTick(identity, pins)
    b_fp = cert_fingerprint((dirs["b"] / CERT_FILE).read_bytes())
    assert pins.is_pinned(b_fp) and tick.is_pinned(b_fp)
    (a / TRUSTED_DIR / "b.crt").unlink()
    assert not pins.is_pinned(b_fp)
    assert not tick.is_pinned(b_fp)
    before = identity.current()
    assert before is not None and tick.identity() == before
    cert, key = make_self_signed("a")
    (a / "new.key").write_bytes(key)
    (a / "new.crt").write_bytes(cert)
    os.replace(a / "new.key", a / KEY_FILE)
    os.replace(a / "new.crt", a / CERT_FILE)
    after = identity.current()
    assert after is not None and after.fingerprint == cert_fingerprint(cert)
    assert tick.identity() == after
