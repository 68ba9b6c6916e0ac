"""``WatchedPins``: the pin set cached until inotify reports a change in trusted/ (real files)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from nvpair_wm.clusterdir import cert_fingerprint, init_cluster, make_self_signed
from nvpair_wm.io.pin_watch import WatchedPins
from nvpair_wm.pins import PinSet


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
