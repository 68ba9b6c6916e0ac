"""The mutation check of the conformance kit: cosmic-ray over the daemon's decision code, with
the kit run against ``python -m nvpair_wm`` as the test command (``make kit-mutation``).

Why cosmic-ray: it writes each mutant to the file on disk and runs any command, so the daemon
the kit starts as a subprocess imports the mutant (mutmut 3 switches mutants inside the pytest
process through trampolines and an environment variable, which a black-box subprocess started
by another tool only sees by accident). The mutants are written to a copy of ``src`` under
``build/mutation/src`` that only the daemon sees (``PYTHONPATH``): the kit itself, and the
worktree, stay unmutated while a run goes on.

    python scripts/kit_mutation.py run MODULE...   # init (once) and exec, one session per module
    python scripts/kit_mutation.py recheck         # the kit now, on survivors said killed since
    python scripts/kit_mutation.py report          # results file and the report, from the sessions

A mutant inside an annotation of a module with ``from __future__ import annotations`` (outside a
msgspec Struct, which reads its annotations) is never evaluated: it is marked equivalent before
the run instead of costing a kit run. ``report`` exports every session to
``schema/conformance/mutation/mutation-results.json`` (committed, so the report regenerates
without the sessions) and writes ``schema/conformance/mutation/mutation-report.md``, with each
survivor's verdict from ``schema/conformance/mutation/mutation-triage.json``.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import queue
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import kit_reach

ROOT: Final = Path(__file__).resolve().parents[1]
WORK: Final = ROOT / "build" / "mutation"
CONFORMANCE: Final = ROOT / "schema" / "conformance"
RESULTS: Final = CONFORMANCE / "mutation" / "mutation-results.json"
TRIAGE: Final = CONFORMANCE / "mutation" / "mutation-triage.json"
RECHECK: Final = CONFORMANCE / "mutation" / "mutation-recheck.json"
SOUNDNESS: Final = CONFORMANCE / "mutation" / "mutation-soundness.json"
REPORT: Final = CONFORMANCE / "mutation" / "mutation-report.md"
# The daemon's decision code, in the order a run takes them (smallest first).
MODULES: Final = (
    "versions",
    "sync",
    "endpoint",
    "dispatch",
    "dedup",
    "broadcaster",
    "codec",
    "jsontext",
    "outbox",
)
# Per mutant: a kit run that fails fast takes seconds, a surviving one about 30 s on a loaded
# machine; anything past this hangs.
MUTANT_TIMEOUT_S: Final = 300.0
KIT_JOBS: Final = 2
ANNOTATION: Final = "equivalent: inside an annotation, never evaluated (postponed annotations)"
NOT_REACHED: Final = "not reached by the kit"
UNSELECTED: Final = "not run: outside the sufficient operator set (--operators all runs it)"
HELD_BACK: Final = "not run: held back by --changed-only"
# Selective mutation: cosmic-ray replaces a binary operator with each of 11 others and a
# comparison with each of 9, mostly redundant (``a + b`` as ``a << b``, ``a < b`` as
# ``a is b``). By default only the replacements that subsume the rest are run: the inverse
# operator, and for comparisons the sufficient set of Kaminski, Ammann and Offutt ("Better
# predicate testing", 2011) without its constant true/false (AddNot stands for negation).
# Every other operator runs all its mutants. ``--operators all`` runs everything.
SUFFICIENT: Final[dict[str, dict[str, frozenset[str]]]] = {
    "ReplaceBinaryOperator": {
        "Add": frozenset({"Sub"}),
        "Sub": frozenset({"Add"}),
        "Mul": frozenset({"Div", "FloorDiv"}),
        "Div": frozenset({"Mul"}),
        "FloorDiv": frozenset({"Mul"}),
        "Mod": frozenset({"FloorDiv"}),
        "Pow": frozenset({"Mul"}),
        "LShift": frozenset({"RShift"}),
        "RShift": frozenset({"LShift"}),
        "BitOr": frozenset({"BitAnd"}),
        "BitAnd": frozenset({"BitOr"}),
        "BitXor": frozenset({"BitOr"}),
    },
    "ReplaceComparisonOperator": {
        "Lt": frozenset({"LtE", "NotEq"}),
        "Gt": frozenset({"GtE", "NotEq"}),
        "LtE": frozenset({"Lt", "Eq"}),
        "GtE": frozenset({"Gt", "Eq"}),
        "Eq": frozenset({"NotEq", "LtE", "GtE"}),
        "NotEq": frozenset({"Eq", "Lt", "Gt"}),
        "Is": frozenset({"IsNot"}),
        "IsNot": frozenset({"Is"}),
        "In": frozenset({"NotIn"}),
        "NotIn": frozenset({"In"}),
    },
}


def sufficient(operator: str) -> bool:
    """Whether the default run runs this cosmic-ray operator (``core/`` prefix optional)."""
    family, _, change = operator.removeprefix("core/").partition("_")
    table = SUFFICIENT.get(family)
    if table is None:
        return True
    original, _, replacement = change.partition("_")
    return replacement in table.get(original, frozenset())


def test_command(python: Path, module: str, work: str | None = None) -> str:
    """cosmic-ray's test command: ``kit_mutation.py test``, the kit on the groups that reach
    the mutated lines (``work``: the session whose copy of src is mutated; default module's)."""
    src = WORK / (work or module) / "src"
    return f"{python} {Path(__file__).resolve()} test {module} --src {src}"


def kit_argv(python: Path, src: Path, selection: list[str]) -> list[str]:
    kit = python.parent / "nvpair-wm-conformance"
    return [
        str(kit), "--fail-fast", "--no-shrink", "--jobs", str(KIT_JOBS), *selection,
        "--", "env", f"PYTHONPATH={src}", str(python), "-m", "nvpair_wm", "--bind", "127.0.0.1",
    ]  # fmt: skip


def test(module: str, src: Path, python: Path, *, full: bool) -> int:
    """Run the kit against the mutant in ``src``: only the groups the reach map says execute
    the mutated lines (all of them when the map is stale or the lines run at import). A
    mutant no group reaches survives without a run, said "not reached by the kit"."""
    original = (ROOT / "src" / "nvpair_wm" / f"{module}.py").read_text()
    mutated = (src / "nvpair_wm" / f"{module}.py").read_text()
    doc = None if full else kit_reach.load(python, MODULES, rebuild=False)
    chosen = None if doc is None else kit_reach.select(doc, module, original, mutated)
    if chosen is not None and not chosen:
        print(f"{NOT_REACHED}: no group executes the mutated lines", flush=True)
        return 0
    groups: list[str] = list(doc["groups"]) if doc is not None else []  # type: ignore[call-overload]
    selection = [] if chosen is None else kit_reach.selection_args(chosen, groups)
    shown = "the whole kit" if not selection else " ".join(sorted(chosen or ()))
    print(f"kit-mutation: selected {shown}", flush=True)
    proc = subprocess.run(
        kit_argv(python, src, selection), check=False, capture_output=True, text=True
    )
    print(proc.stdout, flush=True)
    return 1 if proc.returncode else 0


def config_text(module: str, python: Path) -> str:
    return (
        "[cosmic-ray]\n"
        f'module-path = "src/nvpair_wm/{module}.py"\n'
        f"timeout = {MUTANT_TIMEOUT_S}\n"
        "excluded-modules = []\n"
        f'test-command = "{test_command(python, module)}"\n\n'
        "[cosmic-ray.distributor]\n"
        'name = "local"\n'
    )


def _annotation_spans(source: str) -> list[tuple[int, int, int, int]]:
    """(row, col, end_row, end_col) of every annotation Python never evaluates here."""
    tree = ast.parse(source)
    postponed = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    )
    if not postponed:
        return []
    struct_bodies: list[ast.ClassDef] = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef) and any("Struct" in ast.unparse(b) for b in n.bases)
    ]
    in_struct = {id(x) for c in struct_bodies for x in ast.walk(c)}
    spans = []
    for node in ast.walk(tree):
        notes: list[ast.expr | None] = []
        if isinstance(node, ast.arg):
            notes.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            notes.append(node.returns)
        elif isinstance(node, ast.AnnAssign) and id(node) not in in_struct:
            notes.append(node.annotation)
        for note in notes:
            if note is not None and note.end_lineno is not None and note.end_col_offset is not None:
                spans.append((note.lineno, note.col_offset, note.end_lineno, note.end_col_offset))
    return spans


def _inside(pos: tuple[int, int], span: tuple[int, int, int, int]) -> bool:
    return (span[0], span[1]) <= pos < (span[2], span[3])


def mark_annotations(db: Path, module_file: Path) -> int:
    spans = _annotation_spans(module_file.read_text())
    con = sqlite3.connect(db)
    with con:
        rows = con.execute(
            "select job_id, start_pos_row, start_pos_col from mutation_specs where job_id not in"
            " (select job_id from work_results)"
        ).fetchall()
        marked = [(job,) for job, row, col in rows if any(_inside((row, col), s) for s in spans)]
        con.executemany(
            "insert into work_results (worker_outcome, output, test_outcome, diff, job_id)"
            f" values ('SKIPPED', '{ANNOTATION}', NULL, NULL, ?)",
            marked,
        )
    con.close()
    return len(marked)


# What cosmic-ray stores for an outcome of the committed results: (worker, test, output).
_STORED: Final = {
    "killed": ("NORMAL", "KILLED"),
    "timeout": ("NORMAL", "KILLED"),
    "survived": ("NORMAL", "SURVIVED"),
    "equivalent": ("SKIPPED", None),
    "incompetent": ("ABNORMAL", None),
}


def seed(db: Path, module: str, module_file: Path) -> int:
    """Give a new session the outcomes the committed results hold, so that what was run is not
    run again: a mutant is the same when its key matches and the line its diff removes is still
    the source's line (a changed module runs its changed mutants again)."""
    source = module_file.read_text().splitlines()
    known = {m.key: m for m in load_results() if m.module == f"{module}.py"}
    con = sqlite3.connect(db)
    with con:
        rows = con.execute(
            "select job_id, operator_name, occurrence, start_pos_row from mutation_specs"
            " where job_id not in (select job_id from work_results)"
        ).fetchall()
        stored = []
        for job, op, occ, row in rows:
            m = known.get(f"{module}.py:{row}:{op.removeprefix('core/')}:{occ}")
            if m is None or m.outcome not in _STORED:
                continue
            removed = [ln[1:] for ln in m.diff.splitlines() if ln.startswith("-")]
            if removed and (row > len(source) or source[row - 1] not in removed):
                continue
            worker, test = _STORED[m.outcome]
            output = "timeout" if m.outcome == "timeout" else m.note
            stored.append((worker, output, test, m.diff, job))
        con.executemany(
            "insert into work_results (worker_outcome, output, test_outcome, diff, job_id)"
            " values (?, ?, ?, ?, ?)",
            stored,
        )
    con.close()
    return len(stored)


def session(module: str) -> Path:
    return WORK / module / "session.sqlite"


def snapshot(module: str) -> Path:
    """The module's source as it was when its session was made."""
    return WORK / module / "source.py"


def _spans(db: Path) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(operator, occurrence) -> (first row, column, last row) of each mutant of a session."""
    con = sqlite3.connect(db)
    rows = con.execute(
        "select operator_name, occurrence, start_pos_row, start_pos_col, end_pos_row"
        " from mutation_specs"
    ).fetchall()
    con.close()
    return {(op.removeprefix("core/"), occ): (row, col, end) for op, occ, row, col, end in rows}


def line_map(old: str, new: str) -> dict[int, int]:
    """The lines (1-based) of ``old`` that ``new`` keeps unchanged, to their number there."""
    kept: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            kept.update((i1 + k + 1, j1 + k + 1) for k in range(i2 - i1))
    return kept


def key_map(
    module: str, old_db: Path, old_source: str, new_db: Path, new_source: str
) -> dict[str, str]:
    """Old key -> new key for every mutant whose lines the edit left as they were: same
    operator, same column, every line of its span kept and still together. cosmic-ray numbers
    an operator's mutants through the module, so a new site shifts the occurrences after it;
    mutants at one place keep their order."""
    lines = line_map(old_source, new_source)
    new_at: dict[tuple[str, int, int, int], list[int]] = {}
    for (op, occ), (row, col, end) in _spans(new_db).items():
        new_at.setdefault((op, row, col, end), []).append(occ)
    old_at: dict[tuple[str, int, int, int], list[int]] = {}
    for (op, occ), (row, col, end) in _spans(old_db).items():
        old_at.setdefault((op, row, col, end), []).append(occ)
    mapping: dict[str, str] = {}
    name = f"{module}.py"
    for (op, row, col, end), occs in old_at.items():
        moved = [lines.get(r) for r in range(row, end + 1)]
        first = moved[0]
        if first is None or moved != list(range(first, first + end - row + 1)):
            continue  # a line of it changed: it runs again
        twins = new_at.get((op, first, col, first + end - row), [])
        if len(twins) != len(occs):
            continue
        for old_occ, new_occ in zip(sorted(occs), sorted(twins), strict=True):
            mapping[f"{name}:{row}:{op}:{old_occ}"] = f"{name}:{first}:{op}:{new_occ}"
    return mapping


def rekey(module: str, mapping: dict[str, str]) -> int:
    """Move the module's committed outcomes and verdicts to their new keys; those of mutants
    the edit changed are dropped (they run again). Returns how many are dropped."""
    name = f"{module}.py"
    mutants = load_results() if RESULTS.exists() else []
    kept: list[Mutant] = []
    for m in mutants:
        if m.module != name:
            kept.append(m)
        elif m.key in mapping:
            _module, line, _op, occ = mapping[m.key].split(":")
            kept.append(replace(m, line=int(line), occurrence=int(occ)))
    write_results(kept)
    for path in (TRIAGE, RECHECK, SOUNDNESS):
        if path.exists():
            doc = json.loads(path.read_text())
            moved = {
                mapping.get(k, k): v
                for k, v in doc.items()
                if not k.startswith(f"{name}:") or k in mapping
            }
            path.write_text(json.dumps(moved, indent=1, ensure_ascii=False) + "\n")
    return len(mutants) - len(kept)


def pending_before(module: str) -> Path:
    """The keys the committed results listed as pending when the module's session was made:
    what ``--changed-only`` holds back (what was never run before the edit, not what it
    changed)."""
    return WORK / module / "pending-before.json"


def hold_back(db: Path, module: str, *, changed_only: bool) -> int:
    """With ``changed_only``, mark the mutants that were pending before the session was made as
    not to run, so that only those of changed lines run; without it, unmark them. Returns how
    many are held back."""
    record = pending_before(module)
    pending = set(json.loads(record.read_text())) if record.exists() else set()
    con = sqlite3.connect(db)
    with con:
        con.execute("delete from work_results where output = ?", (HELD_BACK,))
        if changed_only:
            rows = con.execute(
                "select job_id, operator_name, occurrence, start_pos_row from mutation_specs"
                " where job_id not in (select job_id from work_results)"
            ).fetchall()
            con.executemany(
                "insert into work_results (worker_outcome, output, test_outcome, diff, job_id)"
                " values ('SKIPPED', ?, NULL, NULL, ?)",
                [
                    (HELD_BACK, job)
                    for job, op, occ, row in rows
                    if f"{module}.py:{row}:{op.removeprefix('core/')}:{occ}" in pending
                ],
            )
        (held,) = con.execute(
            "select count(*) from work_results where output = ?", (HELD_BACK,)
        ).fetchone()
    con.close()
    return int(held)


def select_operators(db: Path, *, everything: bool) -> int:
    """Mark the mutants outside the sufficient operator set as not to run (``everything``:
    unmark them, so they run); returns how many are marked."""
    con = sqlite3.connect(db)
    with con:
        con.execute("delete from work_results where output = ?", (UNSELECTED,))
        if not everything:
            rows = con.execute(
                "select job_id, operator_name from mutation_specs where job_id not in"
                " (select job_id from work_results)"
            ).fetchall()
            con.executemany(
                "insert into work_results (worker_outcome, output, test_outcome, diff, job_id)"
                " values ('SKIPPED', ?, NULL, NULL, ?)",
                [(UNSELECTED, job) for job, op in rows if not sufficient(op)],
            )
        (marked,) = con.execute(
            "select count(*) from work_results where output = ?", (UNSELECTED,)
        ).fetchone()
    con.close()
    return int(marked)


def run(
    modules: list[str],
    python: Path,
    *,
    init_only: bool = False,
    all_operators: bool = False,
    changed_only: bool = False,
) -> int:
    cr = python.parent / "cosmic-ray"
    if not init_only:
        kit_reach.load(python, MODULES, rebuild=True)  # made again only when src changed
    for module in modules:
        # Each module's session mutates its own copy of src: sessions may run at once. A fresh
        # copy each time: a run stopped in the middle of a mutant leaves it on disk.
        work = WORK / module
        if (work / "src").exists():
            shutil.rmtree(work / "src")
        shutil.copytree(ROOT / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__"))
        cfg = work / "cosmic-ray.toml"
        db = session(module)
        cfg.write_text(config_text(module, python))
        source = (ROOT / "src" / "nvpair_wm" / f"{module}.py").read_text()
        old_source = snapshot(module).read_text() if snapshot(module).exists() else source
        old_db = db.with_name("session.old.sqlite")
        if db.exists() and old_source != source:
            # The module changed since its session was made: keep what the session holds,
            # make a new one, and carry every outcome whose lines the edit left alone.
            write_results(current_results())
            db.replace(old_db)
        if not db.exists():
            subprocess.run([cr, "init", cfg, db], cwd=work, check=True)
            snapshot(module).write_text(source)
            if old_db.exists():
                mapping = key_map(module, old_db, old_source, db, source)
                dropped = rekey(module, mapping)
                old_db.unlink()
                print(f"kit-mutation: {module}: changed; {len(mapping)} outcomes carried over,"
                      f" {dropped} of changed lines to run again")  # fmt: skip
            n = mark_annotations(db, work / "src" / "nvpair_wm" / f"{module}.py")
            print(f"kit-mutation: {module}: {n} mutants in annotations marked equivalent")
            if RESULTS.exists():
                n = seed(db, module, work / "src" / "nvpair_wm" / f"{module}.py")
                print(f"kit-mutation: {module}: {n} outcomes taken from the committed results")
            pending = [
                m.key
                for m in current_results(from_sessions=False)
                if m.module == f"{module}.py" and m.outcome == "pending"
            ]
            pending_before(module).write_text(json.dumps(pending) + "\n")
            if not init_only:
                base = subprocess.run(
                    [cr, "baseline", cfg], cwd=work, check=False, capture_output=True, text=True
                )
                if base.returncode != 0:
                    print(f"kit-mutation: the kit fails the unmutated daemon:\n{base.stdout}")
                    return 1
        n = select_operators(db, everything=all_operators)
        print(f"kit-mutation: {module}: {n} mutants outside the sufficient operator set not run")
        n = hold_back(db, module, changed_only=changed_only)
        if n:
            print(f"kit-mutation: {module}: {n} pending mutants of unchanged lines held back")
        if init_only:
            continue
        print(f"kit-mutation: {module}: running the remaining mutants", flush=True)
        subprocess.run([cr, "exec", cfg, db], cwd=work, check=True)
    return 0


def mutate_and_test(python: Path, m: Mutant, work: str, *, full: bool) -> dict[str, str]:
    """One mutant, written to a fresh copy of src under ``WORK/work``, and the kit on it."""
    module = m.module.removesuffix(".py")
    copy = WORK / work
    if (copy / "src").exists():
        shutil.rmtree(copy / "src")
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__"))
    command = test_command(python, module, work) + (" --full" if full else "")
    proc = subprocess.run(
        [python.parent / "cosmic-ray", "mutate-and-test", f"src/nvpair_wm/{module}.py",
         f"core/{m.operator}", str(m.occurrence), command],
        cwd=copy, capture_output=True, text=True, check=False,
    )  # fmt: skip
    result = json.loads(proc.stdout)
    outcome = str(result.get("test_outcome") or result.get("worker_outcome")).lower()
    output = str(result.get("output") or "")
    if output == "timeout":
        outcome = "timeout"
    return {"outcome": outcome, "failure": _first_failure(output), "selected": output[:400]}


def recheck(python: Path, jobs: int = 1) -> int:
    """Run the kit as it is now against every survivor whose verdict says a new vector or
    model rule kills it, and keep what happened (the proof of each ``killed:`` verdict);
    ``jobs`` mutants at once, each in its own copy of src."""
    triage: dict[str, str] = json.loads(TRIAGE.read_text()) if TRIAGE.exists() else {}
    done: dict[str, dict[str, str]] = json.loads(RECHECK.read_text()) if RECHECK.exists() else {}
    todo = [
        m
        for m in current_results()
        if m.outcome == "survived"
        and triage.get(m.key, "").startswith("killed")
        # the kit only grows: what it killed stays killed
        and done.get(m.key, {}).get("outcome") != "killed"
    ]
    if todo:
        kit_reach.load(python, MODULES, rebuild=True)  # the groups of the kit as it is now
    copies: queue.Queue[str] = queue.Queue()
    for n in range(max(1, jobs)):
        copies.put(f"recheck-{n}")
    lock = threading.Lock()

    def one(m: Mutant) -> None:
        work = copies.get()
        try:
            # The groups that reach the mutant suffice: a kill there is a kill by the whole kit.
            result = mutate_and_test(python, m, work, full=False)
        finally:
            copies.put(work)
        with lock:
            done[m.key] = {"outcome": result["outcome"], "failure": result["failure"]}
            print(f"kit-mutation: recheck {m.key}: {result['outcome']}", flush=True)
            RECHECK.write_text(json.dumps(done, indent=1, sort_keys=True) + "\n")

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        list(pool.map(one, todo))
    return 0


def soundness(python: Path, sample: int, seed: int) -> int:
    """The differential check of the group selection: a sample of survivors (half of them not
    reached by the kit, when there are that many) run again, once on the groups the reach map
    selects and once against the whole kit, with the kit as it is now; the two verdicts must
    agree. (A mutant the selected groups kill, the whole kit kills too: it runs those groups,
    and fail-fast stops at none before them; so survivors are where they could differ.)
    Kept in ``mutation-soundness.json``."""
    done: dict[str, dict[str, str]] = (
        json.loads(SOUNDNESS.read_text()) if SOUNDNESS.exists() else {}
    )
    pool = [m for m in current_results() if m.outcome == "survived" and m.key not in done]
    reached = [m for m in pool if m.note != NOT_REACHED]
    unreached = [m for m in pool if m.note == NOT_REACHED]
    rng = random.Random(seed)
    chosen = rng.sample(unreached, min(sample // 2, len(unreached)))
    chosen += rng.sample(reached, min(sample - len(chosen), len(reached)))

    def verdict(outcome: str) -> str:
        return "killed" if outcome in ("killed", "timeout") else outcome

    for m in chosen:
        selected = verdict(mutate_and_test(python, m, "soundness", full=False)["outcome"])
        whole = verdict(mutate_and_test(python, m, "soundness", full=True)["outcome"])
        done[m.key] = {
            "selected": selected,
            "whole kit": whole,
            "agree": "yes" if selected == whole else "NO",
        }
        print(f"kit-mutation: soundness {m.key}: selected {selected}, whole {whole}", flush=True)
        SOUNDNESS.write_text(json.dumps(done, indent=1, sort_keys=True) + "\n")
    return 0 if all(d["agree"] == "yes" for d in done.values()) else 1


# -- the report ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mutant:
    module: str
    operator: str
    occurrence: int
    line: int
    # killed, timeout, survived, equivalent (skipped), incompetent, pending, unselected (outside
    # the sufficient operator set)
    outcome: str
    diff: str
    note: str

    @property
    def key(self) -> str:
        return f"{self.module}:{self.line}:{self.operator}:{self.occurrence}"


def _diff_lines(diff: str | None) -> str:
    if not diff:
        return ""
    keep = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return "\n".join(keep)


def _first_failure(output: str | None) -> str:
    if not output:
        return ""
    for line in output.splitlines():
        if "FAIL" in line:
            return " ".join(line.replace("│", " ").split())[:160]
    return ""


def export_sessions() -> list[Mutant]:
    mutants: list[Mutant] = []
    for module in MODULES:
        db = session(module)
        if not db.exists():
            continue
        con = sqlite3.connect(db)
        rows = con.execute(
            "select s.operator_name, s.occurrence, s.start_pos_row, r.worker_outcome,"
            " r.test_outcome, r.diff, r.output from mutation_specs s left join work_results r"
            " on s.job_id = r.job_id order by s.start_pos_row, s.operator_name, s.occurrence"
        ).fetchall()
        con.close()
        for op, occ, row, worker_name, test_name, diff, output in rows:
            # cosmic-ray stores its enums by name (NORMAL, KILLED, ...).
            worker = worker_name.lower() if worker_name else None
            test = test_name.lower() if test_name else None
            if worker is None:
                outcome, note = "pending", ""
            elif worker == "skipped" and output == UNSELECTED:
                outcome, note = "unselected", ""
            elif worker == "skipped" and output == HELD_BACK:
                outcome, note = "pending", ""
            elif worker == "skipped":
                outcome, note = "equivalent", output or ""
            elif worker != "normal":
                outcome, note = "incompetent", (output or "")[-160:]
            elif test == "killed" and output == "timeout":
                outcome, note = "timeout", ""
            elif test == "survived" and (output or "").startswith(NOT_REACHED):
                outcome, note = "survived", NOT_REACHED
            else:
                outcome, note = str(test), _first_failure(output)
            mutants.append(
                Mutant(
                    f"{module}.py",
                    op.removeprefix("core/"),
                    occ,
                    row,
                    outcome,
                    _diff_lines(diff),
                    note,
                )
            )
    return mutants


def load_results() -> list[Mutant]:
    return [Mutant(**m) for m in json.loads(RESULTS.read_text())]


def write_results(mutants: list[Mutant]) -> None:
    doc = [{f: getattr(m, f) for f in Mutant.__dataclass_fields__} for m in mutants]
    RESULTS.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def render(
    mutants: list[Mutant],
    triage: dict[str, str],
    rechecked: dict[str, dict[str, str]],
    sound: dict[str, dict[str, str]] | None = None,
) -> str:
    """The report: figures per module, then every survivor with its verdict."""
    by_module: dict[str, Counter[str]] = {}
    verdicts: Counter[str] = Counter()
    # A timeout with a verdict is read as a survivor: the kit hung once on an equivalent mutant.
    survivors = [
        m
        for m in mutants
        if m.outcome == "survived" or (m.outcome == "timeout" and m.key in triage)
    ]
    for m in mutants:
        by_module.setdefault(m.module, Counter())[m.outcome] += 1

    def verdict(m: Mutant) -> str:
        said = triage.get(m.key, "unexplained: not yet triaged")
        if said.startswith("killed"):
            again = rechecked.get(m.key, {})
            if again.get("outcome") != "killed":
                return f"gap: said killed, but the kit run again says {again.get('outcome')}"
            return f"{said} (run again: killed, {again.get('failure') or 'kit failed'})"
        return said

    for m in survivors:
        verdicts[verdict(m).split(":")[0]] += 1
    out = [
        "# Mutation report of the conformance kit",
        "",
        "Generated by `python scripts/kit_mutation.py report` from the cosmic-ray sessions",
        "(`make kit-mutation`); do not edit. Each mutant is one change to the daemon's decision",
        "code; the test command is the kit (`nvpair-wm-conformance --fail-fast --no-shrink`) run",
        "against `python -m nvpair_wm`, on the groups that execute the mutated statement (the",
        "reach map, `scripts/kit_reach.py`; a mutant no group executes survives without a run,",
        "noted *not reached by the kit*). A mutant is **killed** when the kit fails, **timeout**",
        "when the kit did not finish in time (counted as killed), **survived** when the kit",
        "passed it, **equivalent** when it cannot change behaviour (listed with its reason). A",
        "survivor said killed by a vector added since counts as killed only when the kit, run",
        "again on it (`kit_mutation.py recheck`, `mutation-recheck.json`), fails. Mutants run",
        "before a vector was added were judged by the kit of their time.",
        "",
        "Operators: by default the sufficient set (`SUFFICIENT` in `scripts/kit_mutation.py`):",
        "of cosmic-ray's replacements of a binary or comparison operator, only those that",
        "subsume the rest; every other operator with all its mutants. The others are counted",
        "under *not selected*; modules run before the set was chosen ran every mutant.",
        "",
        "| module | mutants | killed | timeout | survived | equivalent | incompetent"
        " | not selected | not run |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    total: Counter[str] = Counter()
    for module, c in by_module.items():
        total.update(c)
        out.append(
            f"| {module} | {sum(c.values())} | {c['killed']} | {c['timeout']} | {c['survived']}"
            f" | {c['equivalent']} | {c['incompetent']} | {c['unselected']} | {c['pending']} |"
        )
    out.append(
        f"| **all** | {sum(total.values())} | {total['killed']} | {total['timeout']} |"
        f" {total['survived']} | {total['equivalent']} | {total['incompetent']} |"
        f" {total['unselected']} | {total['pending']} |"
    )
    contract_free = verdicts["equivalent (contract)"]
    score, strict, non_equivalent = _score(mutants, survivors, verdict)
    in_set = [m for m in mutants if sufficient(m.operator)]
    set_score, set_strict, set_non_equivalent = _score(
        in_set, [m for m in survivors if sufficient(m.operator)], verdict
    )
    out += [
        "",
        f"Of the mutants run, {len(survivors)} survived the kit (or timed out and are explained):"
        f" {verdicts['killed']} are "
        f"now killed by a vector or model rule added for them, {verdicts['equivalent']} are "
        f"equivalent, {contract_free} change only what the contract leaves free, "
        f"{verdicts['gap'] + verdicts['unexplained']} are still gaps. "
        f"Killed: **{score:.1f}%** of the {non_equivalent} non-equivalent mutants run "
        "(killed and timeouts, plus survivors killed since, over everything run but the "
        "equivalent). Counting the survivors that change only what the contract leaves free "
        f"as not killed: {strict:.1f}%. Over the sufficient operator set alone (the default"
        f" run; {set_non_equivalent} non-equivalent mutants): **{set_score:.1f}%**, and"
        f" {set_strict:.1f}% counting those that change only what the contract leaves free.",
        "",
        f"{total['pending']} mutants are not run yet; `make kit-mutation` resumes the sessions "
        "where they stopped (`MUTATE=module` for one module). The figure above is over what was "
        "run only.",
        "",
        *_soundness_lines(mutants, sound or {}),
        *_subsumption_lines(mutants, triage),
        "## Survivors",
        "",
        "Verdicts come from `mutation-triage.json` (key: module:line:operator:occurrence).",
        "",
    ]
    for m in survivors:
        out.append(f"- `{m.key}` — {verdict(m)}")
        out.append("")
        out.append("  ```diff")
        out += [f"  {ln}" for ln in m.diff.splitlines()]
        out.append("  ```")
    out += ["", "## Equivalent before the run", ""]
    eq = Counter(m.note for m in mutants if m.outcome == "equivalent")
    out += [f"- {n} mutants: {reason}" for reason, n in eq.items()]
    return "\n".join(out).rstrip() + "\n"


def _score(
    mutants: list[Mutant], survivors: list[Mutant], verdict: Callable[[Mutant], str]
) -> tuple[float, float, int]:
    """The share of non-equivalent mutants killed, the same counting the survivors that change
    only what the contract leaves free as not killed, and how many are non-equivalent."""
    total = Counter(m.outcome for m in mutants)
    verdicts = Counter(verdict(m).split(":")[0] for m in survivors)
    contract_free = verdicts["equivalent (contract)"]
    timeouts_read = sum(m.outcome == "timeout" for m in survivors)
    caught = total["killed"] + total["timeout"] - timeouts_read + verdicts["killed"]
    non_equivalent = (
        caught
        + total["survived"]
        + timeouts_read
        - verdicts["killed"]
        - verdicts["equivalent"]
        - contract_free
    )
    if not non_equivalent:
        return 100.0, 100.0, 0
    return (
        100.0 * caught / non_equivalent,
        100.0 * caught / (non_equivalent + contract_free),
        non_equivalent,
    )


def current_results(from_sessions: bool = True) -> list[Mutant]:
    """The committed results, with what the sessions hold instead for modules that have one."""
    mutants = load_results() if RESULTS.exists() else []
    fresh = export_sessions() if from_sessions else []
    if fresh:
        modules = {f.module for f in fresh}
        mutants = sorted(
            [m for m in mutants if m.module not in modules] + fresh,
            key=lambda m: (MODULES.index(m.module[:-3]), m.line, m.operator, m.occurrence),
        )
    return mutants


def _subsumption_lines(mutants: list[Mutant], triage: dict[str, str]) -> list[str]:
    """The evidence for the sufficient operator set, from the sites run with every replacement
    of their operator: where the set's replacements were all killed, did any other
    replacement survive that is not equivalent?"""
    sites: dict[tuple[str, int, str, str], list[Mutant]] = {}
    for m in mutants:
        family, _, change = m.operator.partition("_")
        if family in SUFFICIENT:
            sites.setdefault((m.module, m.line, family, change.partition("_")[0]), []).append(m)
    run = ("killed", "timeout", "survived")
    whole = [ms for ms in sites.values() if all(m.outcome in run for m in ms)]
    covered = [
        ms
        for ms in whole
        if any(sufficient(m.operator) for m in ms)
        and all(m.outcome != "survived" for m in ms if sufficient(m.operator))
    ]
    missed = [
        m.key
        for ms in covered
        for m in ms
        if m.outcome == "survived" and not triage.get(m.key, "").startswith("equivalent")
    ]
    return [
        f"The sufficient operator set, checked where every replacement ran: at {len(covered)}"
        f" of the {len(whole)} operator sites run whole, the set's replacements were all killed;"
        f" {len(missed)} other replacements survived there and are not equivalent"
        + (f" ({', '.join(f'`{k}`' for k in missed)})." if missed else "."),
        "",
    ]


def _soundness_lines(mutants: list[Mutant], sound: dict[str, dict[str, str]]) -> list[str]:
    """The differential check of the group selection, as the report states it."""
    unreached = sum(m.note == NOT_REACHED for m in mutants)
    lines = [
        f"{unreached} survivors were not reached by the kit (no group executes their lines).",
    ]
    if sound:
        agree = [k for k, v in sound.items() if v.get("agree") == "yes"]
        lines[0] += (
            f" The selection was checked (`kit_mutation.py soundness`, `mutation-soundness.json`):"
            f" {len(sound)} survivors, reached or not, run again on the selected groups and"
            f" against the whole kit, with the kit of the time: {len(agree)} got the same verdict."
        )
        lines += [f"- `{k}`: the whole kit says {v.get('whole kit')} ({v.get('note', '')})"
                  for k, v in sorted(sound.items()) if v.get("agree") != "yes"]  # fmt: skip
    return [*lines, ""]


def report(from_sessions: bool) -> int:
    """The results file (a module without a session keeps its committed results) and the
    report."""
    mutants = current_results(from_sessions)
    if from_sessions:
        write_results(mutants)
    triage: dict[str, str] = json.loads(TRIAGE.read_text()) if TRIAGE.exists() else {}
    rechecked = json.loads(RECHECK.read_text()) if RECHECK.exists() else {}
    sound = json.loads(SOUNDNESS.read_text()) if SOUNDNESS.exists() else {}
    REPORT.write_text(render(mutants, triage, rechecked, sound))
    print(f"kit-mutation: wrote {REPORT.relative_to(ROOT)} ({len(mutants)} mutants)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kit_mutation", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="mutate MODULEs and run the kit against each mutant")
    r.add_argument("modules", nargs="*", metavar="MODULE", help=f"of {', '.join(MODULES)} (all)")
    r.add_argument(
        "--init-only", action="store_true", help="make the sessions (what is not run is counted)"
    )
    r.add_argument(
        "--operators",
        choices=("sufficient", "all"),
        default="sufficient",
        help="run the sufficient operator set (default) or every mutant cosmic-ray makes",
    )
    r.add_argument(
        "--changed-only",
        action="store_true",
        help="run only the mutants of lines changed since the results were made",
    )
    rc = sub.add_parser("recheck", help="run the kit again on survivors said killed by new vectors")
    rc.add_argument("--jobs", type=int, default=1, help="mutants at once (%(default)s)")
    snd = sub.add_parser("soundness", help="survivors again against the whole kit (a sample)")
    snd.add_argument("--sample", type=int, default=12, help="mutants (%(default)s)")
    snd.add_argument("--seed", type=int, default=1)
    t = sub.add_parser("test", help="cosmic-ray's test command: the kit on the reaching groups")
    t.add_argument("module", choices=MODULES)
    t.add_argument("--src", type=Path, required=True, help="the mutated copy of src")
    t.add_argument("--full", action="store_true", help="the whole kit, whatever the lines")
    rep = sub.add_parser("report", help="write the results file and the report")
    rep.add_argument(
        "--committed", action="store_true", help="from the committed results, not the sessions"
    )
    args = p.parse_args(argv)
    python = Path(sys.executable)
    if args.cmd == "run":
        unknown = set(args.modules) - set(MODULES)
        if unknown:
            p.error(f"not a module of the decision code: {', '.join(sorted(unknown))}")
        return run(
            list(args.modules) or list(MODULES),
            python,
            init_only=args.init_only,
            all_operators=args.operators == "all",
            changed_only=args.changed_only,
        )
    if args.cmd == "recheck":
        return recheck(python, args.jobs)
    if args.cmd == "soundness":
        return soundness(python, args.sample, args.seed)
    if args.cmd == "test":
        return test(args.module, args.src, python, full=args.full)
    return report(not args.committed)


if __name__ == "__main__":
    sys.exit(main())
