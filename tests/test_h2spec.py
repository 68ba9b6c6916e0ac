"""RFC 9113 conformance: h2spec against the real connection driver and HTTP/2 session.

h2spec cannot present a client certificate and the TLS server requires one, so it runs against
the plaintext harness of ``tests/test_http2.py`` (``python -m tests.test_http2 PORT``): the same
``nvpair_wm.io.server`` driver and ``nvpair_wm.proto.h2`` session, without TLS. Takes ~2 s.

h2spec is an external tool no package registry offers: ``scripts/h2spec.sh --which`` finds it
(``$H2SPEC``, ``PATH``, ``../shared/tools/h2spec``), and without it this test is skipped with one
line in the suite's summary (README.md, "h2spec", says how to get it). CI has it beside the clone.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "h2spec.sh"
NOT_FOUND_EXIT = 3


def h2spec_binary() -> Path | None:
    """The binary ``scripts/h2spec.sh`` would run, or None when it finds none."""
    found = subprocess.run(
        ["bash", str(SCRIPT), "--which"], capture_output=True, text=True, check=False
    )
    if found.returncode == NOT_FOUND_EXIT:
        return None
    assert found.returncode == 0, f"h2spec.sh --which: exit {found.returncode}: {found.stderr}"
    return Path(found.stdout.strip())


def test_h2spec_passes_every_case() -> None:
    binary = h2spec_binary()
    if binary is None:
        pytest.skip(
            "h2spec not found ($H2SPEC, PATH, ../shared/tools/h2spec): RFC 9113 conformance "
            "not checked; README.md, section h2spec, says how to get it"
        )
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


@pytest.mark.parametrize(
    ("env", "expect"),
    [
        ({"H2SPEC": "{fake}"}, "{fake}"),  # an explicit H2SPEC wins
        ({"PATH": "{bin}:/usr/bin:/bin"}, "{bin}/h2spec"),  # then PATH
        ({"PATH": "/usr/bin:/bin"}, "{shared}"),  # then ../shared/tools/h2spec beside the clone
        ({"PATH": "/usr/bin:/bin", "NO_SHARED": "1"}, None),  # none: exit 3, one line
        ({"H2SPEC": "{tmp}/missing"}, None),  # an explicit H2SPEC that is not there: refused
    ],
    ids=["H2SPEC", "PATH", "shared", "absent", "bad-H2SPEC"],
)
def test_the_lookup_order(tmp_path: Path, env: dict[str, str], expect: str | None) -> None:
    """scripts/h2spec.sh in a copy of the layout a clone has: clone/scripts and ../shared."""
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    (clone / "scripts" / "h2spec.sh").write_bytes(SCRIPT.read_bytes())
    places = {
        "fake": tmp_path / "fake-h2spec",
        "bin": tmp_path / "bin",
        "shared": tmp_path / "shared" / "tools" / "h2spec",
        "tmp": tmp_path,
    }
    stub = "#!/bin/sh\nexit 0\n"
    for path in (places["fake"], places["bin"] / "h2spec", places["shared"]):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(stub)
        path.chmod(0o755)
    if env.pop("NO_SHARED", None):
        places["shared"].unlink()
    filled = {k: v.format(**places) for k, v in env.items()}
    base = {"PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        ["bash", str(clone / "scripts" / "h2spec.sh"), "--which"],
        env={**base, **filled},
        capture_output=True,
        text=True,
        check=False,
    )
    if expect is None:
        assert run.returncode == NOT_FOUND_EXIT, run
        assert run.stdout == ""
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    else:
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == expect.format(**places)
