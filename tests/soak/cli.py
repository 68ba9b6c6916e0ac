"""``python -m tests.soak`` (``make soak ARGS="--seed S --minutes M --nodes N"``).

Runs one seeded soak per ``--seed`` (several seeds: one after the other), prints the fault
schedule first, then the checker's report, and exits 0 when every run had no violation and
every node exited 0 at the end; 1 otherwise (the seed, the schedule and the history file are
printed, and the run directory is kept: ``--check HISTORY`` judges it again, and the same
``--seed`` with the same ``--minutes``, ``--nodes`` and ``--net`` replays the same schedule);
2 for a bad command line; 3 when a run could not go on (a node did not start, the network could
not be built).
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import shutil
import signal
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from tests.soak.checker import check
from tests.soak.history import read_history
from tests.soak.network import SoakError, netns_available
from tests.soak.runner import THIS_TREE, Options, Upgrade, run
from tests.soak.schedule import KINDS, NETNS_ONLY, draw, format_schedule
from tests.support.releases import ReleaseError, build, find, previous


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m tests.soak", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--seed",
        type=int,
        action="append",
        metavar="S",
        help="seed of the schedule and the workload (repeatable; default: random)",
    )
    p.add_argument(
        "--minutes",
        type=float,
        default=None,
        metavar="M",
        help="minutes of workload and faults per seed (default 1)",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        metavar="S",
        help="the same in seconds (overrides --minutes)",
    )
    p.add_argument("--nodes", type=int, default=3, metavar="N", help="3 to 5 (default 3)")
    p.add_argument(
        "--rate",
        type=float,
        default=25.0,
        metavar="R",
        help="events per second per broker (default 25)",
    )
    p.add_argument(
        "--bound",
        type=float,
        default=20.0,
        metavar="S",
        help="seconds after the last heal within which every view must equal what "
        "the origins hold (default 20)",
    )
    p.add_argument(
        "--net",
        choices=["auto", "netns", "loopback"],
        default="auto",
        help="netns (root) or loopback (pins); auto picks netns when it can",
    )
    p.add_argument(
        "--faults",
        default=",".join(KINDS),
        metavar="K1,K2",
        help=f"fault kinds to draw from (default all: {', '.join(KINDS)})",
    )
    p.add_argument(
        "--resend",
        choices=["unacked", "live"],
        default="unacked",
        help="what a broker re-reports after its node restarts (default unacked)",
    )
    p.add_argument(
        "--paths",
        choices=["single", "multi"],
        default="single",
        help="multi: a workload's start and end are reported by the broker of the node it runs "
        "on, mostly not its entry node's (the spec's multi-path workload; default single)",
    )
    p.add_argument(
        "--program",
        metavar="CMD",
        type=shlex.split,
        default=[],
        help="run this command as every node instead of this tree's nvpair-wm (another "
        "implementation taking the same flags; docs/soak.md)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_setting,
        help="one more --config key for every node, VALUE in TOML (repeatable), e.g. "
        "--set journal.enabled=false to watch the checker catch lost events",
    )
    p.add_argument(
        "--upgrade-from",
        metavar="VERSION",
        help="rolling upgrade: every node starts on release VERSION (from releases.toml, "
        "built from its commit into a venv of its own; 'previous': the newest one before "
        "this tree) and is restarted, one by one under load and faults, on this tree",
    )
    p.add_argument(
        "--downgrade",
        action="store_true",
        help="with --upgrade-from: the other way round (start on this tree, restart on the "
        "release); reported, not required to pass",
    )
    p.add_argument(
        "--dir",
        type=Path,
        default=Path("/tmp"),
        metavar="PATH",
        help="where run directories go (default /tmp)",
    )
    p.add_argument("--keep", action="store_true", help="keep the run directory on success too")
    p.add_argument(
        "--json", type=Path, metavar="FILE", help="append one JSON line per run with its figures"
    )
    p.add_argument(
        "--print-schedule", action="store_true", help="print the schedule of each seed and exit"
    )
    p.add_argument(
        "--check", type=Path, metavar="HISTORY", help="judge a recorded history.jsonl and exit"
    )
    return p  # fmt: skip


def _setting(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{key}: not a TOML value: {value!r} ({exc})") from None


def _upgrade(version: str | None, downgrade: bool) -> Upgrade | None:
    """The rolling mode of ``--upgrade-from`` (the release built first, once)."""
    if version is None:
        if downgrade:
            parser().error("--downgrade needs --upgrade-from VERSION")
        return None
    try:
        release = previous() if version == "previous" else find(version)
        print(f"building release {release.version} from {release.commit[:12]} (kept in "
              ".releases/ for the next run)", flush=True)  # fmt: skip
        old = tuple(build(release))
    except ReleaseError as exc:
        parser().exit(3, f"--upgrade-from {version}: {exc}\n")
    if downgrade:
        return Upgrade(THIS_TREE, old, "this tree", release.version)
    return Upgrade(old, THIS_TREE, release.version, "this tree")


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through every finally: processes and namespaces go


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.check is not None:
        report = check(read_history(args.check))
        print(report.summary())
        return 0 if report.ok else 1
    kinds = tuple(k for k in args.faults.split(",") if k)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser().error(f"unknown fault kinds {unknown}")
    if not 2 <= args.nodes <= 5:
        parser().error(f"--nodes must be between 2 and 5, not {args.nodes}")
    seconds = args.seconds if args.seconds is not None else 60.0 * (args.minutes or 1.0)
    seeds = args.seed or [random.randrange(1, 2**31)]
    names = [f"node-{chr(ord('a') + i)}" for i in range(args.nodes)]
    if args.print_schedule:
        netns = args.net == "netns" or (args.net == "auto" and netns_available() is None)
        drawn = [k for k in kinds if netns or k not in NETNS_ONLY]
        for seed in seeds:
            print(format_schedule(seed, draw(seed, names, seconds, kinds=drawn)))
        return 0
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return _run_seeds(args, seeds, seconds, kinds)
    except KeyboardInterrupt:
        print("interrupted: nodes stopped, namespaces removed", file=sys.stderr)
        return 130


def _run_seeds(
    args: argparse.Namespace, seeds: list[int], seconds: float, kinds: tuple[str, ...]
) -> int:
    worst = 0
    upgrade = _upgrade(args.upgrade_from, args.downgrade)
    for seed in seeds:
        opts = Options(seed=seed, seconds=seconds, nodes=args.nodes, rate=args.rate,
                       bound=args.bound, net=args.net, kinds=kinds, resend=args.resend,
                       workdir=args.dir, log=lambda s: print(s, flush=True),
                       extra_limits=dict(args.set), upgrade=upgrade,
                       paths=args.paths, program=tuple(args.program))  # fmt: skip
        print(f"=== soak seed {seed}: {args.nodes} nodes, {seconds:.0f} s, {args.rate:g} events/s"
              f" per broker, {args.paths}-path ===", flush=True)  # fmt: skip
        try:
            out = run(opts)
        except SoakError as exc:
            print(f"seed {seed}: the run could not go on: {exc}", file=sys.stderr, flush=True)
            worst = max(worst, 3)
            continue
        print(out.report.summary(), flush=True)
        dropped = {
            name: sum(p.get("dropped", 0) for p in st.get("peers", []))
            for name, st in out.statuses.items()
        }
        print(f"frames dropped by full peer queues (from manager:status): {dropped}")
        logged = {
            log.stem: sum(
                " ERROR " in line for line in log.read_text(errors="replace").splitlines()
            )
            for log in sorted(out.run_dir.glob("node-*.log"))
        }
        print(f"ERROR lines in the nodes' logs (reported, not judged): {logged}")
        if upgrade is not None:
            print(f"exit statuses when restarted on {upgrade.then_name} (EOF; a node whose "
                  f"broker was deaf was killed instead): {out.upgrade_exits}")  # fmt: skip
        bad_exit = {n: c for n, c in out.exit_codes.items() if c != 0}
        bad_exit |= {f"{n} (upgrade)": c for n, c in out.upgrade_exits.items() if c != 0}
        if bad_exit:
            print(f"NODES DID NOT EXIT 0 on EOF: {bad_exit}")
        failed = not out.report.ok or bool(bad_exit)
        if args.json is not None:
            with args.json.open("a") as f:
                row = {**out.report.as_dict(), "network": out.network, "dropped": dropped,
                       "error_lines": logged,
                       "exit_codes": out.exit_codes, "ok": not failed}  # fmt: skip
                f.write(json.dumps(row) + "\n")
        if failed:
            worst = max(worst, 1)
            print(f"FAILED: seed {seed}; replay with --seed {seed} --seconds {seconds:g} "
                  f"--nodes {args.nodes} --net {out.network} --paths {args.paths}; "
                  f"history {out.history}")  # fmt: skip
            print(format_schedule(seed, out.schedule))
        elif not args.keep:
            shutil.rmtree(out.run_dir, ignore_errors=True)
    return worst
