"""The mutation check's parts: the kit's fast profile (``--fail-fast``, ``--jobs``) and
``scripts/kit_mutation.py`` (which mutants are equivalent before a run, the report's figures).

The mutation run itself is ``make kit-mutation`` (long; not part of ``make test``).
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
NVPAIR_WM = [sys.executable, "-m", "nvpair_wm", "--bind", "127.0.0.1"]


def _script() -> ModuleType:
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))  # kit_mutation imports kit_reach beside it
    spec = importlib.util.spec_from_file_location("kit_mutation", ROOT / "scripts/kit_mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kit_mutation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _kit(*args: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "nvpair_wm.conformance", "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_fail_fast_starts_no_group_after_a_failure() -> None:
    only = ["--only", "local-requests", "--only", "local-errors", "--only", "local-batches"]
    dead = ["--", sys.executable, "-c", "pass"]  # exits at once: every group fails
    status, doc = _kit(*only, "--fail-fast", "--jobs", "1", *dead)  # in turn: none after it
    assert status == 1
    assert {r["group"] for r in doc["results"]} == {"local-requests"}
    status, doc = _kit(*only, *dead)
    assert status == 1
    assert {r["group"] for r in doc["results"]} == {
        "local-requests",
        "local-errors",
        "local-batches",
    }


def test_fail_fast_stops_a_group_at_its_first_failing_case(tmp_path: Path) -> None:
    # Says it is ready, then never answers: the group starts, and its first request fails.
    mute = tmp_path / "mute.py"
    params = {"version": "0", "contractVersion": (ROOT / "schema/VERSION").read_text().strip()}
    ready = {"jsonrpc": "2.0", "method": "ready", "params": params}
    mute.write_text(f"import sys\nprint({json.dumps(json.dumps(ready))}, flush=True)\n"
                    "for line in sys.stdin:\n    pass\n")  # fmt: skip
    impl = ["--", sys.executable, str(mute)]
    status, doc = _kit("--only", "local-requests", "--fail-fast", *impl)
    assert status == 1
    passed = [r["passed"] for r in doc["results"]]
    assert passed == [True, False]  # startup, then the first request; nothing after it
    status, doc = _kit("--only", "local-requests", *impl)
    assert len(doc["results"]) > 2


def test_jobs_run_groups_at_once_each_against_its_own_process() -> None:
    # Both groups start the member under test at the same time: each needs its own cluster
    # directory (the daemon locks its own), and the results keep the groups' order.
    only = ["--only", "local-requests", "--only", "local-dedup"]
    status, doc = _kit(*only, "--jobs", "2", "--", *NVPAIR_WM)
    assert status == 0, [(r["name"], r["problems"]) for r in doc["results"] if not r["passed"]]
    groups = [r["group"] for r in doc["results"]]
    assert groups == sorted(groups, key=["local-requests", "local-dedup"].index)
    assert set(groups) == {"local-requests", "local-dedup"}


SOURCE = """\
from __future__ import annotations
import msgspec

Alias = int | None

def f(a: int | None, b: str = "x" + "y") -> list[int] | None:
    local: dict[str, int] | None = None
    return [a or 0]

class Wire(msgspec.Struct):
    field: int | None = None
"""


def test_annotations_are_equivalent_only_where_python_never_evaluates_them() -> None:
    km = _script()
    spans = km._annotation_spans(SOURCE)
    lines = SOURCE.splitlines()

    def marked(text: str, line: int) -> bool:
        col = lines[line - 1].index(text)
        return any(km._inside((line, col), s) for s in spans)

    assert marked("| None, b", 6)  # a parameter
    assert marked("| None:", 6)  # the return
    assert marked("| None = None", 7)  # a local variable's annotation
    assert not marked('+ "y"', 6)  # a default value runs
    assert not marked("| None", 4)  # a type alias runs at import
    assert not marked("| None", 11)  # msgspec reads a Struct's annotations
    assert km._annotation_spans(SOURCE.replace("from __future__ import annotations", "")) == []


def test_report_counts_survivors_by_their_verdict() -> None:
    km = _script()

    def mutant(line: int, outcome: str) -> Any:
        return km.Mutant("versions.py", "NumberReplacer", 0, line, outcome, "-a\n+b", "")

    mutants = [
        *(mutant(n, "killed") for n in range(1, 17)),
        mutant(20, "timeout"),
        mutant(21, "survived"),  # killed by a vector added since
        mutant(22, "survived"),  # equivalent
        mutant(23, "survived"),  # not explained
        mutant(25, "survived"),  # changes what the contract leaves free
        mutant(24, "equivalent"),
    ]
    triage = {
        "versions.py:21:NumberReplacer:0": "killed: by generated-x",
        "versions.py:22:NumberReplacer:0": "equivalent: same answer",
        "versions.py:25:NumberReplacer:0": "equivalent (contract): a repeat it allows",
    }
    rechecked = {"versions.py:21:NumberReplacer:0": {"outcome": "killed", "failure": "x"}}
    text = km.render(mutants, triage, rechecked)
    assert "| versions.py | 22 | 16 | 1 | 4 | 1 | 0 | 0 | 0 |" in text
    # (16 killed + 1 timeout + 1 killed since) / (22 - 1 equivalent - 2 equivalent survivors)
    assert "**94.7%** of the 19 non-equivalent" in text
    assert "`versions.py:23:NumberReplacer:0` — unexplained" in text
    # said killed, but not run again: counted as a gap, not as killed
    assert "**89.5%**" in km.render(mutants, triage, {})
    # a mutant outside the sufficient operator set is counted apart and scores nothing
    unselected = km.Mutant("versions.py", "ReplaceBinaryOperator_Add_Mod", 0, 30, "unselected",
                           "", "")  # fmt: skip
    text = km.render([*mutants, unselected], triage, rechecked)
    assert "| versions.py | 23 | 16 | 1 | 4 | 1 | 0 | 1 | 0 |" in text
    assert "**94.7%** of the 19 non-equivalent" in text


def test_the_sufficient_operator_set_keeps_the_inverse_and_the_boundary_replacements() -> None:
    km = _script()
    run = [
        "core/ReplaceBinaryOperator_Add_Sub",
        "ReplaceBinaryOperator_LShift_RShift",
        "ReplaceComparisonOperator_Lt_LtE",  # the boundary
        "ReplaceComparisonOperator_Lt_NotEq",
        "ReplaceComparisonOperator_Eq_NotEq",  # the negation
        "ReplaceComparisonOperator_Is_IsNot",
        "NumberReplacer",  # every other operator runs whole
        "AddNot",
    ]
    skipped = [
        "ReplaceBinaryOperator_Add_LShift",
        "ReplaceBinaryOperator_Add_Mod",
        "ReplaceComparisonOperator_Lt_Is",
        "ReplaceComparisonOperator_Lt_GtE",  # subsumed by Lt_LtE and Lt_NotEq
        "ReplaceComparisonOperator_IsNot_Lt",
    ]
    assert all(km.sufficient(op) for op in run)
    assert not any(km.sufficient(op) for op in skipped)


def test_the_report_checks_the_sufficient_set_where_every_replacement_ran() -> None:
    km = _script()

    def mutant(line: int, change: str, outcome: str) -> Any:
        op = f"ReplaceComparisonOperator_{change}"
        return km.Mutant("dedup.py", op, 0, line, outcome, "", "")

    others = ["Lt_Gt", "Lt_GtE", "Lt_Eq", "Lt_Is", "Lt_IsNot"]
    site = [mutant(5, "Lt_LtE", "killed"), mutant(5, "Lt_NotEq", "killed")]
    mutants = [*site, *(mutant(5, c, "killed") for c in others[1:]), mutant(5, "Lt_Gt", "survived")]
    missed = mutants[-1].key
    # a site not run whole (one replacement outside the set) proves nothing either way
    mutants += [mutant(9, "Lt_LtE", "killed"), mutant(9, "Lt_Gt", "unselected")]
    line = km._subsumption_lines(mutants, {})[0]
    assert "at 1 of the 1 operator sites run whole" in line
    assert f"1 other replacements survived there and are not equivalent (`{missed}`)" in line
    line = km._subsumption_lines(mutants, {missed: "equivalent: same order"})[0]
    assert "0 other replacements survived" in line


REACHED = """\
import os

LIMIT = 3


def decide(n: int) -> str:
    if n > LIMIT:
        return "big"
    try:
        os.stat("x")
    except OSError:
        return "none"
    total = (n +
             1)
    return str(total)
"""


def test_a_mutant_runs_only_the_groups_that_execute_its_statement() -> None:
    km = _script()
    kit_reach = km.kit_reach  # the module kit_mutation imported

    # Lines as coverage reports them: a multi-line statement under its first line.
    reach = {"groups": ["a", "b"], "lines": {"m.py": {"7": ["a", "b"], "8": ["b"], "13": ["a"]}}}

    def chosen(old: str, new: str, line: int) -> set[str] | None:
        lines = REACHED.splitlines()
        assert old in lines[line - 1]
        lines[line - 1] = lines[line - 1].replace(old, new)
        mutated = "\n".join(lines) + "\n"
        result: set[str] | None = kit_reach.select(reach, "m", REACHED, mutated)
        return result

    assert chosen("n > LIMIT", "n >= LIMIT", 7) == {"a", "b"}
    assert chosen('"big"', '"small"', 8) == {"b"}
    assert chosen("OSError", "ValueError", 11) == set()  # an except clause never entered
    assert chosen("1)", "2)", 14) == {"a"}  # the second line of a statement: its first line's
    assert chosen("LIMIT = 3", "LIMIT = 4", 3) is None  # at import: every group
    assert kit_reach.select(reach, "m", REACHED, REACHED) is None  # unmutated: the whole kit
    assert kit_reach.selection_args({"a", "b", kit_reach.EXPLORE}, ["a", "b"]) == []
    assert kit_reach.selection_args({"b"}, ["a", "b"]) == ["--only", "b"]
    assert kit_reach.selection_args({kit_reach.EXPLORE}, ["a", "b"])[0] == "--explore"
    assert km.NOT_REACHED == "not reached by the kit"


JUMPS = """\
def first(items: list[int]) -> int:
    for n in items:
        if n < 0:
            continue
        return n
    return 0
"""


def test_a_lone_jump_is_reached_by_the_groups_of_the_statement_holding_it() -> None:
    # CPython emits no line event for a lone `continue`, so coverage never lists its line: the
    # `if` that holds it stands for it, or a mutant there would pass as "not reached".
    kit_reach = _script().kit_reach
    reach = {"groups": ["a", "b"], "lines": {"m.py": {"2": ["a", "b"], "3": ["a"], "5": ["b"]}}}
    mutated = JUMPS.replace("continue", "break")
    assert kit_reach.select(reach, "m", JUMPS, mutated) == {"a"}


def _session(path: Path, specs: list[tuple[str, int, int, int, int]]) -> Path:
    """A session file as cosmic-ray makes it, holding only what ``key_map`` reads: each spec is
    (operator, occurrence, first row, column, last row)."""
    con = sqlite3.connect(path)
    with con:
        con.execute(
            "create table mutation_specs (operator_name, occurrence, start_pos_row,"
            " start_pos_col, end_pos_row, job_id)"
        )
        con.executemany(
            "insert into mutation_specs values (?, ?, ?, ?, ?, ?)",
            [(f"core/{op}", occ, row, col, end, f"{op}{occ}") for op, occ, row, col, end in specs],
        )
    con.close()
    return path


def test_an_edit_carries_the_outcomes_of_the_lines_it_left_alone(tmp_path: Path) -> None:
    """A line added above moves the keys (line and occurrence) of what follows; a changed line,
    or a span one of whose lines changed, loses its outcome and runs again."""
    km = _script()
    old = "a = 1\nif a < 2:\n    b = (a <\n         3)\nc = a < 4\n"
    new = "z = 0 < 1\na = 1\nif a < 2:\n    b = (a <\n         5)\nc = a < 4\n"
    assert km.line_map(old, new) == {1: 2, 2: 3, 3: 4, 5: 6}
    lt = "ReplaceComparisonOperator_Lt_Gt"
    old_db = _session(
        tmp_path / "old.sqlite", [(lt, 0, 2, 3, 2), (lt, 1, 3, 9, 4), (lt, 2, 5, 4, 5)]
    )
    new_db = _session(
        tmp_path / "new.sqlite",
        [(lt, 0, 1, 4, 1), (lt, 1, 3, 3, 3), (lt, 2, 4, 9, 5), (lt, 3, 6, 4, 6)],
    )
    mapping = km.key_map("m", old_db, old, new_db, new)
    assert mapping == {f"m.py:2:{lt}:0": f"m.py:3:{lt}:1", f"m.py:5:{lt}:2": f"m.py:6:{lt}:3"}


def test_changed_only_holds_back_what_was_pending_before_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--changed-only`` runs the mutants of changed lines: it holds back the ones the results
    listed as pending when the session was made, not the changed ones a later export lists as
    pending too; without it, everything pending runs."""
    km = _script()
    monkeypatch.setattr(km, "WORK", tmp_path)
    lt = "ReplaceComparisonOperator_Lt_Gt"
    db = _session(tmp_path / "s.sqlite", [(lt, 0, 2, 3, 2), (lt, 1, 5, 4, 5)])
    with sqlite3.connect(db) as con:
        con.execute(
            "create table work_results (worker_outcome, output, test_outcome, diff, job_id)"
        )
    (tmp_path / "m").mkdir()
    km.pending_before("m").write_text(json.dumps([f"m.py:2:{lt}:0"]))
    assert km.hold_back(db, "m", changed_only=True) == 1
    with sqlite3.connect(db) as con:
        held = con.execute("select job_id from work_results where output = ?", (km.HELD_BACK,))
        assert [job for (job,) in held] == [f"{lt}0"]
    assert km.hold_back(db, "m", changed_only=False) == 0
