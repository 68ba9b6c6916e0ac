"""The seeded exploration (``nvpair-wm-conformance --explore``) and the one-bug daemons of
``tests/unseen_wm.py``, which no hand-written vector was written for.

A planted bug is found, shrunk to a small scenario, written as a vector file, and the command
the kit prints replays it (and fails the same way). Each unseen stand-in is caught by the kit:
by a generated vector, or by a seeded scenario judged by the model. Kit runs start real
nvpair-wm processes: a few seconds each, so the scenario budgets are small and fixed.
"""

from __future__ import annotations

import importlib.util
import json
import random
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from nvpair_wm.conformance import explore, vectors
from nvpair_wm.conformance.model import Model

ROOT = Path(__file__).resolve().parents[1]
UNSEEN = [sys.executable, str(ROOT / "tests" / "unseen_wm.py")]
BEHAVIOUR = ROOT / "schema" / "conformance" / "behaviour"


def kit(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvpair_wm.conformance", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


# -- pure parts --------------------------------------------------------------------------------


def test_scenarios_are_seeded() -> None:
    a = [explore.scenario(random.Random(5)) for _ in range(3)]
    b = [explore.scenario(random.Random(5)) for _ in range(3)]
    assert a == b
    assert a != [explore.scenario(random.Random(6)) for _ in range(3)]


def test_a_scenario_is_a_valid_vector_group() -> None:
    schema = json.loads((BEHAVIOUR / "behaviour-vector.schema.json").read_text())
    steps = explore.scenario(random.Random(3))
    group = explore.group_of(steps, "explore-3-0")
    jsonschema.validate([group], schema)
    ops = {s["op"] for s in steps}
    assert {"event", "nodes"} <= ops


def test_shrink_finds_a_minimal_failing_sublist() -> None:
    steps: list[dict[str, Any]] = [{"op": "x", "n": i} for i in range(40)]

    def fails(candidate: list[dict[str, Any]]) -> bool:
        ns = {s["n"] for s in candidate}
        return {7, 23} <= ns

    assert [s["n"] for s in explore.shrink(steps, fails)] == [7, 23]


def test_the_model_calls_a_narrowed_removal() -> None:
    """A removal narrowed by its runId leaves the other run of the id alone; one without runId
    covers the newest run seen, and goes to the peers with it."""
    m = Model()
    m.nodes([{"nodeId": "p"}])
    m.take_deliveries("p")
    info = {"id": "w", "model": "m", "engine": "e", "runId": "a", "state": "queued",
            "originatedFrom": "subject", "createdAt": 1, "startedAt": None,
            "completedAt": None, "error": None, "seq": 1}  # fmt: skip
    assert m.local_event("workload:submitted", info) == "applied"
    assert m.local_event("workload:submitted", {**info, "runId": "b"}) == "applied"
    assert m.local_remove({"workloadId": "w", "originatedFrom": "subject"}) == "applied"
    sent = list(m.take_deliveries("p").due.values())
    assert sent[-1]["params"] == {"workloadId": "w", "originatedFrom": "subject", "runId": "b"}
    assert m.local_event("workload:started", {**info, "seq": 2}) == "applied"  # run a lives
    assert m.local_event("workload:started", {**info, "runId": "b", "seq": 2}) == "removed"


# -- against processes ---------------------------------------------------------------------------


def test_a_planted_bug_is_found_shrunk_and_replayed(tmp_path: Path) -> None:
    """tests/unseen_wm.py stale-as-duplicate: found by seed 4, shrunk, and the printed command
    replays the written vector file and fails it again."""
    out = tmp_path / "failures"
    command = [*UNSEEN, "stale-as-duplicate", "--bind", "127.0.0.1"]
    proc = kit("--explore", "--seed", "4", "--scenarios", "6", "--failures", str(out), "--",
               *command)  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    files = sorted(out.glob("*.json"))
    assert files, proc.stderr
    groups = vectors.load(out)
    shrunk = groups[0]["scenario"]
    assert 1 <= len(shrunk) <= 6, shrunk  # from 29 steps
    replay = [line for line in proc.stderr.splitlines() if "--vectors" in line]
    assert len(replay) == 1, proc.stderr
    args = shlex.split(replay[0])
    assert args[0] == "nvpair-wm-conformance"
    again = kit("--json", *args[1:])
    assert again.returncode == 1, again.stdout + again.stderr
    doc = json.loads(again.stdout)
    failed = [r for r in doc["results"] if not r["passed"]]
    assert failed and all(r["group"] == groups[0]["group"] for r in failed)
    assert any('"outcome": "stale"' in " ".join(r["problems"]) for r in failed), failed
    # The same vector file passes against nvpair-wm: the failure is the bug's.
    fine = kit("--vectors", str(out), "--only", groups[0]["group"], "--", sys.executable, "-m",
               "nvpair_wm", "--bind", "127.0.0.1")  # fmt: skip
    assert fine.returncode == 0, fine.stdout + fine.stderr


DISAGREEMENT = ("expected", "nothing arrived matching", "unexpected frame", "status")

# Each unseen stand-in: how the kit is run to catch it (kit arguments before --).
CAUGHT_BY: dict[str, list[str]] = {
    "tomb-every-run": ["--explore", "--seed", "1", "--scenarios", "6"],
    "stale-as-duplicate": ["--explore", "--seed", "1", "--scenarios", "6"],
    "restart-forgets": ["--explore", "--seed", "1", "--scenarios", "6"],
    "first-run": ["--explore", "--seed", "2", "--scenarios", "6"],
    "snapshot-no-removals": ["--explore", "--seed", "1", "--scenarios", "6"],
    "version-h1": ["--only", "generated-schema"],
    "409-final": ["--only", "generated-versions-as-client"],
    "batch-bound": ["--only", "generated-schema"],
}


def test_every_unseen_stand_in_has_a_way_to_be_caught() -> None:
    spec = importlib.util.spec_from_file_location("unseen_wm", ROOT / "tests" / "unseen_wm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert set(module.MODES) == set(CAUGHT_BY)


@pytest.mark.parametrize("mode", sorted(CAUGHT_BY))
def test_kit_catches_an_unseen_bug(mode: str, tmp_path: Path) -> None:
    proc = kit("--json", "--no-shrink", "--failures", str(tmp_path), *CAUGHT_BY[mode], "--",
               *UNSEEN, mode, "--bind", "127.0.0.1")  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    problems = [p for r in doc["results"] if not r["passed"] for p in r["problems"]]
    # A disagreement with what the contract says, not a process that was slow to answer.
    assert any(word in p for p in problems for word in DISAGREEMENT), problems
