"""``nvpair-wm-conformance [--json] [--only GROUP] [--vectors DIR] -- COMMAND [ARGS...]``, and
``nvpair-wm-conformance --codec [--shape-vectors DIR] -- COMMAND [ARGS...]`` (the codec role).

Exit status: 0 when every vector passed, 1 when one failed, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from nvpair_wm.conformance import broker, codec, explore, runner, vectors

PROG = "nvpair-wm-conformance"
# The exploration every default run adds (no --only, no --explore): fixed, so a run is
# deterministic and stays within its time budget.
DEFAULT_SEED = 1
DEFAULT_BUDGET = 1
# Groups at once by default: a group spends most of its time waiting on the implementation's
# timers and round trips (a Retry-After, a restart), so two at once halve the run and still
# leave each group's process a core on a two-core machine. --jobs 1 runs them in turn.
DEFAULT_JOBS = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Check an nvpair workload manager implementation against the behaviour "
        "vectors: COMMAND is started with --port, --cluster-dir (and --ipc) appended.",
        usage=f"{PROG} [--json] [--only GROUP] [--vectors DIR] [--timeout S] [--list] "
        f"-- COMMAND [ARGS...]\n       {PROG} --codec [--json] [--shape-vectors DIR] "
        "-- COMMAND [ARGS...]",
    )
    p.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    p.add_argument(
        "--only",
        action="append",
        metavar="GROUP",
        help="run only this group (repeatable; a trailing * matches a prefix)",
    )
    p.add_argument(
        "--vectors",
        type=Path,
        default=vectors.DEFAULT_DIR,
        metavar="DIR",
        help="directory of behaviour vector files (default: %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=broker.WAIT,
        metavar="SECONDS",
        help="how long to wait for each answer (default: %(default)s)",
    )
    p.add_argument("--list", action="store_true", help="list the groups and exit")
    p.add_argument(
        "--codec",
        action="store_true",
        help="the codec role: COMMAND speaks the line protocol of schema/conformance/README.md "
        "and gets every shape vector and every behaviour vector's frames",
    )
    p.add_argument(
        "--shape-vectors",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --codec: the shape vectors, beside schema/*.schema.json in DIR/.. "
        "(default: those the kit carries)",
    )
    p.add_argument(
        "--explore",
        action="store_true",
        help="run seeded random scenarios judged by the model (instead of the vectors)",
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="exploration seed (%(default)s)")
    p.add_argument(
        "--scenarios",
        type=int,
        default=None,
        metavar="N",
        help=f"scenarios to explore (--explore: 50; the default run adds {DEFAULT_BUDGET})",
    )
    p.add_argument(
        "--failures",
        type=Path,
        default=Path("nvpair-wm-conformance-failures"),
        metavar="DIR",
        help="where a shrunk failing scenario is written as a vector file (%(default)s)",
    )
    p.add_argument(
        "--no-shrink",
        action="store_true",
        help="write a failing scenario as it came, unshrunk (faster: a mutation run's choice)",
    )
    p.add_argument(
        "--fail-fast",
        action="store_true",
        help="stop at the first failing case: no further case or group, and no exploration "
        "(a mutation run's test command: one disagreement is enough)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        metavar="N",
        help="run N groups at once, each against its own process (%(default)s)",
    )
    return p


def _codec(args: argparse.Namespace, command: list[str], parser: argparse.ArgumentParser) -> int:
    shape_dir = args.shape_vectors or codec.DEFAULT_SHAPE_DIR
    try:
        cases = codec.all_cases(shape_dir, args.vectors)
    except (OSError, ValueError) as exc:
        parser.exit(2, f"{PROG}: cannot load the vectors ({shape_dir}, {args.vectors}): {exc}\n")
    timeout = max(args.timeout, codec.DEFAULT_TIMEOUT)
    try:
        report = codec.run(command, cases, timeout=timeout)
    except OSError as exc:
        parser.exit(2, f"{PROG}: cannot start {command[0]}: {exc}\n")
    if args.json:
        doc = {
            "command": command,
            "cases": report.cases,
            "accepted": report.accepted,
            "refused": report.refused,
            "roundTripped": report.round_tripped,
            "disagreements": report.disagreements,
        }
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        for problem in report.disagreements:
            print(f"DISAGREE {problem}")
        print(
            f"codec: {report.cases} vectors: {report.accepted} accepted, {report.refused} "
            f"refused, {report.round_tripped} round-tripped; "
            f"{len(report.disagreements)} disagreements"
        )
    return 0 if report.passed else 1


def _selected(groups: list[dict[str, object]], only: list[str] | None) -> list[dict[str, object]]:
    if not only:
        return groups

    def wanted(name: str) -> bool:
        return any(name == o or (o.endswith("*") and name.startswith(o[:-1])) for o in only)

    return [g for g in groups if wanted(str(g["group"]))]


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in args_in:
        cut = args_in.index("--")
        args_in, command = args_in[:cut], args_in[cut + 1 :]
    parser = _parser()
    args = parser.parse_args(args_in)
    try:
        groups = vectors.load(args.vectors)
    except (OSError, ValueError) as exc:
        parser.exit(2, f"{PROG}: cannot load vectors from {args.vectors}: {exc}\n")
    if args.codec:
        if not command:
            parser.exit(2, f"{PROG}: give the codec program after --: -- COMMAND [ARGS...]\n")
        return _codec(args, command, parser)
    if args.list:
        for g in groups:
            print(f"{g['group']}\t{len(g['cases'])} cases\t{g.get('description', '')}")
        return 0
    groups = _selected(groups, args.only)
    if not groups:
        parser.exit(2, f"{PROG}: no group matches {args.only}\n")
    if not command:
        parser.exit(2, f"{PROG}: give the implementation to test after --: -- COMMAND [ARGS...]\n")

    err = Console(stderr=True)
    started = time.monotonic()

    def progress(result: runner.Result) -> None:
        if not args.json:
            mark = "[green]pass[/]" if result.passed else "[red]FAIL[/]"
            err.print(f"{mark} {result.name}", highlight=False)

    results: list[runner.Result] = []
    if not args.explore:
        results = runner.run(
            groups,
            command,
            on_result=progress,
            timeout=args.timeout,
            jobs=args.jobs,
            fail_fast=args.fail_fast,
        )
    budget = args.scenarios
    if budget is None:
        budget = 50 if args.explore else (0 if args.only else DEFAULT_BUDGET)
    found: list[explore.Failure] = []
    if args.fail_fast and any(not r.passed for r in results):
        budget = 0
    if budget:
        found = _explore(args, command, budget, results, progress)
    elapsed = time.monotonic() - started
    failed = [r for r in results if not r.passed]
    if args.json:
        doc = {
            "command": command,
            "passed": len(results) - len(failed),
            "failed": len(failed),
            "seconds": round(elapsed, 3),
            "results": [
                {
                    "group": r.group,
                    "case": r.case,
                    "name": r.name,
                    "passed": r.passed,
                    "problems": r.problems,
                    "seconds": round(r.seconds, 3),
                }
                for r in results
            ],
        }
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        _table(results, elapsed)
    for f in found:
        err.print(
            f"[bold red]exploration seed {f.seed} scenario {f.index} failed[/]; shrunk to "
            f"{len(f.steps)} steps in {f.path}; replay it with:",
            highlight=False,
        )
        print(explore.replay_command(PROG, f, command), file=sys.stderr)
    return 1 if failed else 0


def _explore(
    args: argparse.Namespace,
    command: list[str],
    budget: int,
    results: list[runner.Result],
    progress: Callable[[runner.Result], None],
) -> list[explore.Failure]:
    """Seeded scenarios, each one group judged by the runner; one result row per scenario."""

    def judge(group: dict[str, Any]) -> list[str]:
        rows = runner.run([group], command, timeout=args.timeout)
        return [f"{r.case}: {p}" for r in rows if not r.passed for p in r.problems]

    def row(index: int, problems: list[str], seconds: float) -> None:
        name = f"seed-{args.seed}-scenario-{index}"
        result = runner.Result("explore", name, not problems, problems[:6], seconds)
        results.append(result)
        progress(result)

    return explore.explore(
        judge,
        seed=args.seed,
        scenarios=budget,
        out_dir=args.failures,
        on_scenario=row,
        shrink_failures=not args.no_shrink,
    )


def _table(results: list[runner.Result], elapsed: float) -> None:
    out = Console()
    table = Table(title="nvpair-wm behaviour conformance", show_lines=False)
    table.add_column("group")
    table.add_column("case")
    table.add_column("result")
    table.add_column("why", overflow="fold")
    for r in results:
        table.add_row(
            r.group,
            r.case,
            "[green]pass[/]" if r.passed else "[bold red]FAIL[/]",
            "\n".join(r.problems),
        )
    out.print(table)
    failed = sum(not r.passed for r in results)
    verdict = "[green]all passed[/]" if not failed else f"[bold red]{failed} failed[/]"
    out.print(f"{len(results)} checks, {verdict} in {elapsed:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
