"""The kit against one-bug nvpair-wms written blind (``tests/blind_wm.py``, and a second round
in ``tests/blind2_wm.py``).

Those stand-ins were written from the contract and the daemon's code before the kit's vectors
were read, as an outside judge of issue 29 would write them. The ones the default kit run
missed then are caught now by vectors added for their class (mostly
``schema/conformance/behaviour/edges.json``). Each runs here against the slice of its group
that catches it (written to a vector directory of its own, after the cases it needs first, such
as a peer group's ``announce``), so that the set costs a few seconds per stand-in.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from nvpair_wm.conformance import vectors

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("blind_wm", "blind2_wm")
EDGES = ROOT / "schema" / "conformance" / "behaviour" / "edges.json"


class Catch(NamedTuple):
    """The cases of ``group`` from ``first`` to ``last`` (they depend on nothing before), and
    words of the problem the kit must report."""

    group: str
    first: str
    last: str
    words: str
    before: tuple[str, ...] = ()  # cases of the group run first (a peer group's announce)


# Each stand-in the default kit run missed before edges.json.
CAUGHT_BY: dict[str, Catch] = {
    "cr-not-counted": Catch(
        "edge-local",
        "crlf-line-of-exactly-1MiB-with-its-CR",
        "crlf-line-over-1MiB-by-its-CR",
        '/id is "cr2", expected null',
    ),
    "invalid-not-counted": Catch(
        "edge-local",
        "invalid-counter-starts-at-0",
        "invalid-request-counted",
        "/result/counters/invalid is 0, expected 1",
    ),
    # Written after the measurement began (not blind): the local rules were checked over --ipc
    # by six cases and no last line without LF.
    "ipc-last-line-dropped": Catch(
        "edge-local",
        "invalid-counter-starts-at-0",
        "invalid-counter-starts-at-0",
        "edge-local/exit expected 1 line(s), got 0",
    ),
    "415-before-409": Catch("edge-http", "409-before-415", "409-before-415", "status 415"),
    "retry-after-millis-sent": Catch(
        "edge-http", "pause-broker", "resume-broker", "header retry-after: '1000'"
    ),
    "journal-without-tombstones": Catch(
        "edge-http", "peer-event", "local-removal-stays-after-restart", '"outcome": "removed"'
    ),
    "journal-local-only": Catch(
        "edge-http", "peer-event", "local-removal-stays-after-restart", '"outcome": "stale"'
    ),
}


# tests/blind2_wm.py: the second round. First the stand-ins the default kit run missed (caught by
# the vectors added for their class), then the ones it caught, each on the slice that does.
CAUGHT_BY_2: dict[str, Catch] = {
    "unknown-method-before-id": Catch(
        "edge-local",
        "wins-id-over-unknown-method",
        "wins-id-over-unknown-method",
        "/error/code is -32601, expected -32600",
    ),
    "peer-only-method-before-params": Catch(
        "edge-http",
        "peer-nodes-update-refused-params-before-not-a-peers-method",
        "peer-nodes-update-refused-params-before-not-a-peers-method",
        "/error/code is -32601, expected -32602",
    ),
    "pins-read-at-update": Catch(
        "peer-retry",
        "event-before-unpinning",
        "unpinned-busy-gets-nothing",
        "expected an array of 0 elements, got 1",
        ("announce",),
    ),
    "dropped-counts-batches": Catch(
        "peer-retry",
        "busy-refuses-with-404",
        "status-counts-each-frame-dropped",
        "/result/peers/0/dropped is 1, expected 3",
        ("announce",),
    ),
    # Written after the first measurement (not blind), missed by the vectors of that time.
    "partial-400-retried": Catch(
        "peer-retry",
        "busy-names-a-refused-frame",
        "nothing-sent-again-after-a-400-naming-a-frame",
        "expected an array of 0 elements, got 2",
        ("announce",),
    ),
    "pin-checked-per-connection": Catch(
        "edge-http",
        "open-a-kept-connection",
        "refused-on-the-kept-connection",
        "status 400, expected 403",
    ),
    "empty-nodes-update-ignored": Catch(
        "peer-retry",
        "announce-nobody",
        "busy-left-out-gets-nothing",
        "expected an array of 0 elements, got 1",
        ("announce",),
    ),
    "restart-removal-repeat-applied": Catch(
        "edge-http",
        "local-removal-re-sent-after-restart-duplicate",
        "local-removal-re-sent-after-restart-duplicate",
        '"outcome": "applied"',
        ("local-event-and-removal", "restart"),
    ),
    # Caught by the default run before: the ones after a change of state or at an order of checks.
    "restart-rereport-applied": Catch(
        "edge-http",
        "several-paths-duplicate-after-restart",
        "several-paths-duplicate-after-restart",
        '"outcome": "applied"',
        (
            "kept-across-restart-several-paths-1",
            "kept-across-restart-several-paths-2",
            "kept-across-restart-several-paths-3",
            "restart",
        ),
    ),
    "peer-stale-forwarded": Catch(
        "edge-http",
        "older-seq-after-terminal-stale",
        "older-seq-after-terminal-stale",
        '"outcome": "applied"',
        ("terminal-applied",),
    ),
    "size-before-version": Catch("edge-http", "409-before-413", "409-before-413", "status 413"),
    "oversize-resumes-mid-line": Catch(
        "local-framing", "oversize-then-resync", "oversize-then-resync", "/id is null, expected 8"
    ),
}

CAUGHT_BY_MODULE: dict[str, dict[str, Catch]] = {
    "blind_wm": CAUGHT_BY,
    "blind2_wm": CAUGHT_BY_2,
}


def groups_with_a_stand_in() -> set[str]:
    """The vector groups a blind stand-in here fails (``tests/test_behaviour.py`` asks that
    every group have one)."""
    return {catch.group for caught in CAUGHT_BY_MODULE.values() for catch in caught.values()}


def _slice(catch: Catch) -> dict[str, object]:
    group = next(g for g in vectors.load(EDGES.parent) if g["group"] == catch.group)
    names = [c["name"] for c in group["cases"]]
    first = [group["cases"][names.index(name)] for name in catch.before]
    cases = group["cases"][names.index(catch.first) : names.index(catch.last) + 1]
    return {**group, "cases": first + cases}


@pytest.mark.parametrize("module_name", MODULES)
def test_every_stand_in_named_here_exists(module_name: str) -> None:
    path = ROOT / "tests" / f"{module_name}.py"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    caught = CAUGHT_BY_MODULE[module_name]
    assert set(caught) <= set(module.MODES)
    assert all(_slice(catch)["cases"] for catch in caught.values())


@pytest.mark.parametrize(
    ("module_name", "mode"),
    [(name, mode) for name in MODULES for mode in sorted(CAUGHT_BY_MODULE[name])],
)
def test_kit_catches_a_blind_bug(module_name: str, mode: str, tmp_path: Path) -> None:
    catch = CAUGHT_BY_MODULE[module_name][mode]
    group = _slice(catch)
    group.pop("file", None)
    (tmp_path / "edges.json").write_text(json.dumps([group]))
    kit = [sys.executable, "-m", "nvpair_wm.conformance", "--json", "--vectors", str(tmp_path)]
    stand_in = [sys.executable, str(ROOT / "tests" / f"{module_name}.py"), mode]
    proc = subprocess.run(
        [*kit, "--only", catch.group, "--", *stand_in, "--bind", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    failed = [(r["name"], p) for r in doc["results"] if not r["passed"] for p in r["problems"]]
    assert any(catch.words in f"{name} {p}" for name, p in failed), failed
