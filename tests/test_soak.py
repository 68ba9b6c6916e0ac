"""The seeded fault-injection soak (tests/soak), short: one seed, 3 nodes, about a minute.

Real ``nvpair-wm`` processes with real mutual TLS, in network namespaces when this runs as root
(loopback and pins otherwise), every fault kind of the schedule injected once, every broker
frame recorded, and the history judged by the checker (whose own tests, on hand-made histories
that break each property, are in test_soak_checker.py). ``make soak`` runs it longer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.soak.runner import Options, run
from tests.soak.schedule import KINDS

SEED = 20261203
SECONDS = 45.0  # of workload and faults; then quiesce and convergence (a few seconds)


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
