"""The seeded fault-injection soak (tests/soak), short: one seed, 3 nodes, about a minute; the
same with multi-path workloads (issue 24); and a short rolling upgrade from the previous release
(docs/compatibility.md).

Real ``nvpair-wm`` processes with real mutual TLS, in network namespaces when this runs as root
(loopback and pins otherwise), every fault kind of the schedule injected once, every broker
frame recorded, and the history judged by the checker (whose own tests, on hand-made histories
that break each property, are in test_soak_checker.py). ``make soak`` runs it longer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvpair_wm import __version__
from tests.soak.runner import THIS_TREE, Options, Upgrade, run
from tests.soak.schedule import KINDS
from tests.support.releases import build, previous

SEED = 20261203
SECONDS = 45.0  # of workload and faults; then quiesce and convergence (a few seconds)
MULTI_SEED = 20261205
MULTI_SECONDS = 40.0  # every fault kind, kill -9 among them; workloads reported over 2 paths
ROLLING_SEED = 20261204
ROLLING_SECONDS = 30.0  # three upgrade restarts, at 7.5, 15 and 22.5 s


@pytest.mark.timeout(180)
def test_a_short_seeded_soak_has_no_violations(tmp_path: Path) -> None:
    lines: list[str] = []
    out = run(Options(seed=SEED, seconds=SECONDS, workdir=tmp_path, log=lines.append))
    report = out.report
    print("\n".join(lines), report.summary(), sep="\n")
    assert report.ok, f"seed {SEED}:\n{report.summary()}\nhistory: {out.history}\n" + "\n".join(
        lines
    )
    assert out.exit_codes == dict.fromkeys(report.nodes, 0), out.exit_codes
    # The schedule went through every kind this network can inject, and so did the run.
    drawn = {f.kind for f in out.schedule}
    possible = set(KINDS) - ({"impair"} if out.network == "loopback" else set())
    assert drawn == possible, drawn
    assert set(report.faults) == drawn
    assert report.restarts, "kill -9 and restart happened"
    assert report.events > 500 and report.event_latencies
    assert max(report.convergence.values()) <= report.bound
    # The overflow fault made at least one link drop frames from a full queue.
    dropped = sum(p["dropped"] for st in out.statuses.values() for p in st["peers"])
    assert dropped > 0, out.statuses


@pytest.mark.timeout(180)
def test_a_short_multi_path_soak_has_no_violations(tmp_path: Path) -> None:
    """Workloads started, requeued and ended by another node's broker than their entry node's,
    under every fault kind: no broker is told a seq lower than it was told or reported itself,
    nothing removed comes back, across kill -9 too (the journal keeps what was forwarded)."""
    lines: list[str] = []
    opts = Options(seed=MULTI_SEED, seconds=MULTI_SECONDS, workdir=tmp_path, log=lines.append,
                   paths="multi")  # fmt: skip
    out = run(opts)
    report = out.report
    print("\n".join(lines), report.summary(), sep="\n")
    assert report.ok, f"seed {MULTI_SEED}:\n{report.summary()}\nhistory: {out.history}\n" + (
        "\n".join(lines)
    )
    assert out.exit_codes == dict.fromkeys(report.nodes, 0), out.exit_codes
    assert {"kill", "partition-kill"} <= set(report.faults) and report.restarts
    assert report.events > 400
    # Multi-path it was: many starts were reported through another node than the entry node.
    history = out.history.read_text().splitlines()
    elsewhere = sum('"method":"workload:started"' in line and '"originatedFrom":"' in line
                    and _reported_elsewhere(line) for line in history)  # fmt: skip
    assert elsewhere > 50, elsewhere


def _reported_elsewhere(line: str) -> bool:
    """A ``send`` record of a report whose workload entered on another node."""
    rec = json.loads(line)
    if rec["kind"] != "send":
        return False
    info = rec["data"].get("params", {}).get("workloadInfo")
    return bool(info) and info["originatedFrom"] != rec["node"]


@pytest.mark.timeout(420)  # the first run builds the previous release (about 30 s, then kept)
def test_a_short_rolling_upgrade_from_the_previous_release_has_no_violations(
    tmp_path: Path,
) -> None:
    """Every node starts on the previous release (built from its commit in releases.toml) and
    is restarted, one by one, on this tree, under load and the seeded faults."""
    release = previous()
    upgrade = Upgrade(tuple(build(release)), THIS_TREE, release.version, "this tree")
    lines: list[str] = []
    opts = Options(seed=ROLLING_SEED, seconds=ROLLING_SECONDS, workdir=tmp_path,
                   log=lines.append, upgrade=upgrade)  # fmt: skip
    out = run(opts)
    report = out.report
    print("\n".join(lines), report.summary(), sep="\n")
    assert report.ok, f"seed {ROLLING_SEED}:\n{report.summary()}\nhistory: {out.history}\n" + (
        "\n".join(lines)
    )
    assert report.faults["upgrade"] == 3 and report.restarts
    # Every node went through its upgrade restart: graceful ones exited 0 (a node whose broker
    # was deaf at its turn is killed instead, and is not in upgrade_exits).
    assert all(code == 0 for code in out.upgrade_exits.values()), out.upgrade_exits
    assert out.exit_codes == dict.fromkeys(report.nodes, 0), out.exit_codes
    # At the end every node runs this tree, and each sees its peers as this tree.
    for name, status in out.statuses.items():
        assert status["version"] == __version__, name
        assert {p["softwareVersion"] for p in status["peers"]} == {__version__}, status
