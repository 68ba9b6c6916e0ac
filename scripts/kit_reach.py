"""Which of the kit's groups execute which lines of the daemon's decision code, so that a
mutant costs only the groups that can observe it (``scripts/kit_mutation.py test``).

The map is made once by running each group of the kit, and the default exploration, against
the daemon under ``coverage run`` (one data file per group); it is kept in
``build/mutation/reach.json`` with a digest of ``src`` and made again when ``src`` changes.

Why the selection is sound: a mutant changes one statement. A group whose daemon never executes
that statement runs the same code as against the unmutated daemon, so it passes as it did (the
kit passes the unmutated daemon: the map is only made from a passing run). A statement outside
every function body runs at import, in every process, so it selects the whole kit; so does a
change on lines the map cannot place, and a map whose digest no longer matches ``src``.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import coverage

from nvpair_wm.conformance.cli import DEFAULT_BUDGET, DEFAULT_SEED

ROOT: Final = Path(__file__).resolve().parents[1]
SRC: Final = ROOT / "src"
BEHAVIOUR: Final = ROOT / "schema" / "conformance" / "behaviour"
REACH: Final = ROOT / "build" / "mutation" / "reach.json"
EXPLORE: Final = "explore"  # the default exploration, as a pseudo-group
# Groups run at once while the map is made (each is its own kit and daemon under coverage).
MAP_JOBS: Final = 2
GROUP_TIMEOUT_S: Final = 600.0

Reach = dict[str, dict[int, frozenset[str]]]  # module file name -> line -> groups


def src_digest() -> str:
    """Of what the map depends on: the daemon's and the kit's code, and the kit's vectors."""
    h = hashlib.sha256()
    files = [*(SRC / "nvpair_wm").rglob("*.py"), *BEHAVIOUR.glob("*.json")]
    for path in sorted(files):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def kit_groups(kit: Path) -> list[str]:
    out = subprocess.run([kit, "--list"], capture_output=True, text=True, check=True).stdout
    return [line.split("\t")[0] for line in out.splitlines() if line.strip()]


def selection_args(groups: Iterable[str], everything: Iterable[str]) -> list[str]:
    """The kit's arguments that run these groups (and the default exploration, if named)."""
    chosen = set(groups)
    if chosen >= set(everything) | {EXPLORE}:
        return []  # the default run: every group, then the default exploration
    named = [a for g in everything if g in chosen for a in ("--only", g)]
    if EXPLORE not in chosen:
        return named
    seed = ["--seed", str(DEFAULT_SEED), "--scenarios", str(DEFAULT_BUDGET)]
    return [*named, *seed] if named else ["--explore", *seed]


def build(python: Path, modules: Iterable[str]) -> dict[str, object]:
    """Run every group under coverage and write the map; fails if the kit fails unmutated."""
    kit = python.parent / "nvpair-wm-conformance"
    groups = kit_groups(kit)
    work = REACH.parent / "reach"
    shutil.rmtree(work, ignore_errors=True)
    include = ",".join(str(SRC / "nvpair_wm" / f"{m}.py") for m in modules)

    def one(group: str) -> str:
        data = work / group / "cov"
        data.parent.mkdir(parents=True)
        daemon: list[str | Path] = [
            python,
            "-m",
            "coverage",
            "run",
            "--parallel-mode",
            f"--data-file={data}",
        ]
        daemon += [f"--include={include}", "-m", "nvpair_wm", "--bind", "127.0.0.1"]
        argv: list[str | Path] = [
            kit,
            *selection_args([group], groups),
            "--no-shrink",
            "--",
            *daemon,
        ]
        proc = subprocess.run(
            argv,
            check=False,
            cwd=data.parent,
            capture_output=True,
            text=True,
            timeout=GROUP_TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise SystemExit(f"kit-reach: {group} fails the unmutated daemon:\n{proc.stdout}")
        return group

    with ThreadPoolExecutor(MAP_JOBS) as pool:
        for done in pool.map(one, [*groups, EXPLORE]):
            print(f"kit-reach: {done} measured", flush=True)
    lines: dict[str, dict[str, list[str]]] = {f"{m}.py": {} for m in modules}
    for group in [*groups, EXPLORE]:
        cov = coverage.Coverage(data_file=str(work / group / "cov"))
        cov.combine([str(work / group)], keep=True)
        data = cov.get_data()
        measured = data.measured_files()
        if not measured:
            raise SystemExit(f"kit-reach: no coverage data from {group} (did the daemon exit?)")
        for path in measured:
            name = Path(path).name
            for line in data.lines(path) or []:
                lines.setdefault(name, {}).setdefault(str(line), []).append(group)
    doc: dict[str, object] = {"digest": src_digest(), "groups": groups, "lines": lines}
    REACH.write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    return doc


def load(python: Path, modules: Iterable[str], *, rebuild: bool) -> dict[str, object] | None:
    """The map, made again first when asked to and ``src`` changed since; None if stale."""
    doc: dict[str, object] | None = None
    if REACH.exists():
        doc = json.loads(REACH.read_text())
    if doc is not None and doc.get("digest") == src_digest():
        return doc
    return build(python, modules) if rebuild else None


def changed_lines(original: str, mutated: str) -> list[int]:
    """Lines of the original that the mutant changed (its diff's old side)."""
    old, new = original.splitlines(), mutated.splitlines()
    out: list[int] = []
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, old, new).get_opcodes():
        if tag == "equal":
            continue
        out += list(range(i1 + 1, max(i2, i1 + 1) + 1))
    return out


def _start(node: ast.AST) -> int:
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    first: int = getattr(node, "lineno", 0)
    return min([first, *(d.lineno for d in decorators)])


def statement_span(tree: ast.Module, line: int) -> tuple[int, int] | None:
    """The lines of the innermost statement (or an ``except`` clause's header) holding ``line``,
    header only for a compound statement; None when ``line`` runs at import (outside every
    function body), where a change reaches every group."""
    in_function = any(
        isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body[0].lineno <= line <= (n.end_lineno or 0)
        for n in ast.walk(tree)
    )
    if not in_function:
        return None
    best: tuple[int, int] | None = None
    best_node: ast.AST | None = None
    enclosing: tuple[int, int] | None = None  # the innermost compound statement's header
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt | ast.ExceptHandler):
            continue
        start, end = _start(node), node.end_lineno or node.lineno
        if not start <= line <= end:
            continue
        body = getattr(node, "body", None)
        if body:
            end = max(start, body[0].lineno - 1)  # the header of a compound statement
            if line > end:
                if enclosing is None or start >= enclosing[0]:
                    enclosing = (start, end)
                continue  # inside the body: a statement there is innermost
        if best is None or end - start <= best[1] - best[0]:
            best, best_node = (start, end), node
    if isinstance(best_node, ast.Continue | ast.Break | ast.Pass) and enclosing is not None:
        # coverage records no line for a lone jump (CPython emits no line event for it): the
        # groups that execute the statement holding it stand for it (a superset: sound)
        return enclosing
    return best


def select(reach: dict[str, object], module: str, original: str, mutated: str) -> set[str] | None:
    """The groups that execute the statement(s) the mutant changed; None for the whole kit."""
    lines = changed_lines(original, mutated)
    if not lines:
        return None  # the unmutated code (cosmic-ray's baseline): the whole kit
    table: dict[str, list[str]] = reach["lines"].get(f"{module}.py", {})  # type: ignore[attr-defined]
    tree = ast.parse(original)
    chosen: set[str] = set()
    for line in lines:
        span = statement_span(tree, line)
        if span is None:
            return None
        for ln in range(span[0], span[1] + 1):
            chosen.update(table.get(str(ln), []))
    return chosen
