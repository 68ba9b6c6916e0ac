"""RFC 9113 conformance: h2spec against the real connection driver and HTTP/2 session.

h2spec cannot present a client certificate and the TLS server requires one, so it runs against
the plaintext harness of ``tests/test_http2.py`` (``python -m tests.test_http2 PORT``): the same
``nvpair_wm.io.server`` driver and ``nvpair_wm.proto.h2`` session, without TLS. Takes ~2 s.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL = (
    "put the static h2spec binary at ../shared/tools/h2spec (a sibling of the clone) or set "
    "H2SPEC=/path/to/h2spec; to build it: "
    "GOFLAGS=-mod=mod go install github.com/summerwind/h2spec/cmd/h2spec@latest"
)


def h2spec_binary() -> Path:
    """``$H2SPEC``, else ``shared/tools/h2spec`` beside the clone (or beside its worktrees)."""
    candidates = [Path(os.environ["H2SPEC"])] if os.environ.get("H2SPEC") else []
    candidates += [
        ROOT.parent / "shared" / "tools" / "h2spec",
        ROOT.parent.parent / "shared" / "tools" / "h2spec",  # /work/wt/<name> worktrees
    ]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    pytest.fail(f"h2spec not found (looked at {[str(p) for p in candidates]}); {INSTALL}")


def test_h2spec_passes_every_case() -> None:
    binary = h2spec_binary()
    harness = subprocess.Popen(
        [sys.executable, "-m", "tests.test_http2", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert harness.stdout is not None
        line = harness.stdout.readline()  # "h2 harness on 127.0.0.1:<port>" once listening
        match = re.search(r":(\d+)$", line.strip())
        assert match, (
            f"the harness did not start: {line!r} {harness.stderr.read() if harness.stderr else ''}"
        )
        run = subprocess.run(
            [str(binary), "--host", "127.0.0.1", "--port", match.group(1), "--timeout", "2"],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,  # the summary says what failed
        )
    finally:
        harness.terminate()
        harness.wait(10)
    summary = re.search(r"(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed", run.stdout)
    failures = run.stdout[run.stdout.find("Failures:") :] if "Failures:" in run.stdout else ""
    assert summary, f"no h2spec summary (exit {run.returncode}):\n{run.stdout[-3000:]}{run.stderr}"
    total, passed = int(summary.group(1)), int(summary.group(2))
    assert (total, passed) == (146, 146), f"h2spec {passed}/{total}:\n{failures[:5000]}"
