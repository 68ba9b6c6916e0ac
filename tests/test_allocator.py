"""The daemon pins glibc's mmap threshold at startup (see nvpair_wm.allocator)."""

from __future__ import annotations

import platform
import sys

import pytest

from nvpair_wm import allocator
from tests.support.wm_process import run_cli

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_pins_on_glibc() -> None:
    assert allocator.pin_mmap_threshold() is True


def test_operator_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert allocator.pin_mmap_threshold() is False


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_the_daemon_pins_at_startup() -> None:
    done = run_cli("--port", "0", "--bind", "127.0.0.1", "--log-level", "debug")
    assert done.returncode == 0
    assert "malloc mmap threshold pinned" in done.stderr
