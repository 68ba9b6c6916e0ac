"""Run the benchmarks: ``python -m bench [--quick] [--only NAME] [--reps N] [--out PATH]``.

Standard output is the summary of every target (met or missed, what a miss means) and one line
naming the files; while the benchmarks run, standard error has one line per benchmark. Each
benchmark's tables (medians, spread and ratios) and log lines go to a details file (``--details``,
``bench/results/latest.txt``), and everything (every repetition, plus date, git commit, Python
version and machine) to ``bench/results/latest.json``. Exit status is 0 whether or not targets
are met: benchmarks report, they never fail.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import procs
from bench.harness import (
    BENCHMARKS,
    MIN_REPS,
    RESULTS,
    BenchResult,
    Context,
    Skip,
    environment,
    estimate,
    load_factor,
    loadavg,
    render_summary,
    sched_params_line,
)
from bench.harness import render as render_results


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and math.isnan(o):
        return None
    if isinstance(o, set | frozenset | tuple):
        return list(o)
    return str(o)


def _clean(o: Any) -> Any:
    """NaN is not JSON: write null instead."""
    if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_clean(v) for v in o]
    return o


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small inputs: each benchmark in seconds")
    p.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        choices=list(BENCHMARKS),
        help="run only this benchmark (repeatable): " + ", ".join(BENCHMARKS),
    )
    p.add_argument("--reps", type=int, default=None, help=f"repetitions (>= {MIN_REPS})")
    p.add_argument("--warmup", type=int, default=None, help="untimed warm-up passes (>= 1)")
    p.add_argument("--out", type=Path, default=RESULTS / "latest.json", help="JSON report path")
    p.add_argument(
        "--details",
        type=Path,
        default=RESULTS / "latest.txt",
        help="where each benchmark's tables and log lines go",
    )
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument(
        "--baseline",
        metavar="COMMIT|DIR",
        help="also measure this tree, alternately (startup, realpeer): bench/baseline.py",
    )
    p.add_argument(
        "--wm-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="add FLAG to every nvpair-wm process started (repeatable; --wm-arg=--metrics=:0)",
    )
    args = p.parse_args(argv)
    procs.EXTRA_ARGS[:] = args.wm_arg

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=100)
    progress = Console(highlight=False, stderr=True, soft_wrap=True)  # one line each
    names = args.only or list(BENCHMARKS)
    if args.list:
        for name, module in BENCHMARKS.items():
            console.print(f"{name:16} {importlib.import_module(module).DESCRIPTION}")
        return 0

    args.details.parent.mkdir(parents=True, exist_ok=True)
    with args.details.open("w", encoding="utf-8") as details_file:
        details = Console(file=details_file, width=140, highlight=False, color_system=None)
        run = _run(args, names, progress, details)
    results, env, expected, total = run.results, run.env, run.expected, run.seconds
    report = {
        **env,
        "command": " ".join([Path(sys.executable).name, "-m", "bench", *sys.argv[1:]]),
        "mode": "quick" if args.quick else "full",
        "wm_args": args.wm_arg,
        "reps": run.reps,
        "warmup": run.warmup,
        "seconds": total,
        "loadavg_at_end": loadavg(),
        "benchmarks": {r.name: r.to_json() for r in results},
    }
    report["targets"] = [asdict(t) for r in results if not r.skipped for t in r.targets()]
    render_summary(results, console, args.quick)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_clean(report), indent=2, default=_json_default) + "\n")
    console.print(
        f"total {total:.1f} s (expected about {expected:.0f} s); "
        f"load average {env['loadavg_at_start']} at start, "
        f"{report['loadavg_at_end']} at end. Details (each benchmark's tables and log): "
        f"{args.details}; every repetition: {args.out}"
    )
    return 0


@dataclass
class _Run:
    results: list[BenchResult]
    env: dict[str, Any]
    expected: float  # seconds the run was expected to take
    seconds: float  # what it took
    reps: int
    warmup: int


def _run(args: argparse.Namespace, names: list[str], progress: Console, details: Console) -> _Run:
    """Run ``names``: one line each on ``progress``, their tables and logs on ``details``."""
    reps = max(MIN_REPS, args.reps or (5 if args.quick else 7))
    warmup = max(1, args.warmup or (1 if args.quick else 2))
    ctx = Context(
        quick=args.quick, reps=reps, warmup=warmup, log=details.log, baseline=args.baseline
    )
    env = environment()
    header = (
        f"nvpair-wm benchmarks {env['date']}  commit {env['git']['commit'][:12]}"
        f"{' (dirty)' if env['git']['dirty'] else ''}  Python {env['python']}  "
        f"nproc {env['machine']['nproc']}  {env['machine']['cpu']}  "
        f"{'quick' if args.quick else 'full'}: {reps} reps, {warmup} warm-up"
    )
    idle = estimate(names, args.quick)
    factor = load_factor()
    expected = idle * factor
    estimate_line = (
        f"expected to take about {expected:.0f} s: {idle:.0f} s on this machine when it is "
        f"otherwise idle (bench/README.md), x{factor:.1f} for the load average now"
    )
    for out in (progress, details):
        out.print(header)
        out.print(estimate_line)
    details.print(sched_params_line(env["machine"]["kernel_sched_params"]))
    progress.print(f"details go to {args.details}; the summary follows the last benchmark")
    t_all = time.perf_counter()
    results: list[BenchResult] = []
    for name in names:
        mod = importlib.import_module(BENCHMARKS[name])
        details.rule(f"{name}: {mod.DESCRIPTION}")
        t0 = time.perf_counter()
        # What a benchmark prints goes with its tables, not to the terminal.
        with contextlib.redirect_stdout(details.file), contextlib.redirect_stderr(details.file):
            try:
                res: BenchResult = mod.run(ctx)
            except Skip as exc:
                res = BenchResult(name, mod.DESCRIPTION, skipped=str(exc))
            except Exception as exc:  # a broken benchmark is reported, the others still run
                traceback.print_exc()
                res = BenchResult(name, mod.DESCRIPTION, skipped=f"error: {exc!r}")
        res.seconds = time.perf_counter() - t0
        results.append(res)
        ctx.results[name] = res
        render_results([res], details)
        targets = res.targets() if not res.skipped else []
        met = sum(t.met is True for t in targets)
        outcome = f"skipped ({res.skipped})" if res.skipped else f"{met} of {len(targets)} met"
        progress.print(f"{name}: {res.seconds:.0f} s, targets: {outcome}")
    return _Run(results, env, expected, time.perf_counter() - t_all, reps, warmup)


if __name__ == "__main__":
    sys.exit(main())
