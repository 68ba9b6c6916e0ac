"""The fault schedule, drawn from the seed alone: the same seed, nodes, length and network mode
give the same schedule, which the soak prints before it starts (and again when it fails), so a
failing seed can be replayed.

Faults start every ``gap`` seconds (drawn in [2, 5] by default) and last ``duration`` seconds
(drawn per kind). The first faults go through every kind once, in a seeded order, so even a
short run injects each kind; after that, kinds are drawn by weight. A fault holds the nodes it
touches for its whole length; one that would touch a held node waits until the node is free (so
no node is, say, stopped and killed at once), but faults on different nodes overlap freely: a
node can be killed while another is cut off, and ``partition-kill`` does that on purpose.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["KINDS", "NET_KINDS", "Fault", "draw", "format_schedule"]

# kind → (weight, shortest, longest duration in seconds)
KINDS: Final[dict[str, tuple[float, float, float]]] = {
    "kill": (3.0, 0.3, 2.5),  # kill -9, down for the duration, restart (same port)
    "stop": (2.0, 1.0, 4.0),  # SIGSTOP, SIGCONT after the duration
    "isolate": (2.0, 1.5, 5.0),  # one node cut off from everyone (cable pulled: silent drops)
    "split": (2.0, 1.5, 5.0),  # two groups, each unreachable from the other (both ways)
    "partition-kill": (3.0, 3.0, 6.0),  # cut a node off, kill -9 an origin on the other side
    # and restart it while the cut holds, then heal: what loses events without a journal
    "impair": (1.5, 2.0, 6.0),  # token-bucket rate limit (tbf: delay, tail drops) on one node
    "rotate": (1.0, 1.0, 1.0),  # new certificate for one node, pinned everywhere, re-announced
    "unpin": (1.5, 1.0, 4.0),  # one node stops trusting another, then trusts it again
    "deaf": (1.5, 2.0, 5.0),  # one broker stops reading its node's output
    "overflow": (1.5, 2.0, 4.0),  # a peer is stopped while an origin bursts past its queue
}
NET_KINDS: Final = ("isolate", "split", "partition-kill", "impair")  # need a network backend
NETNS_ONLY: Final = ("impair",)  # no loopback equivalent


@dataclass(frozen=True, slots=True)
class Fault:
    at: float  # seconds from the start of the run
    kind: str
    duration: float
    targets: tuple[str, ...]  # the nodes it acts on (see describe())
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.at + self.duration

    def describe(self) -> str:
        t, d, p = self.targets, self.duration, self.params
        k = self.kind
        if k == "kill":
            what = f"kill -9 {t[0]}, restart after {d:.1f}s"
        elif k == "stop":
            what = f"SIGSTOP {t[0]} for {d:.1f}s"
        elif k == "isolate":
            what = f"cut {t[0]} off for {d:.1f}s"
        elif k == "split":
            what = f"split {{{', '.join(p['side'])}}} from the rest for {d:.1f}s"
        elif k == "partition-kill":
            what = (f"cut {t[0]} off for {d:.1f}s; kill -9 {t[1]} at +{p['kill_after']:.1f}s, "
                    f"restart it at +{p['restart_after']:.1f}s")  # fmt: skip
        elif k == "impair":
            what = f"tbf {' '.join(p['tbf'])} on {t[0]} for {d:.1f}s"
        elif k == "rotate":
            what = f"rotate {t[0]}'s certificate (old one unpinned after {d:.1f}s)"
        elif k == "unpin":
            what = f"{t[0]} unpins {t[1]} for {d:.1f}s"
        elif k == "deaf":
            what = f"{t[0]}'s broker stops reading for {d:.1f}s"
        else:
            what = f"SIGSTOP {t[0]} for {d:.1f}s while {t[1]} submits {p['burst']} workloads"
        return f"t={self.at:7.2f}s  {k:<14} {what}"


TBF_PROFILES: Final = (
    ("rate", "300kbit", "burst", "3000", "limit", "4500"),
    ("rate", "100kbit", "burst", "1600", "limit", "3000"),
    ("rate", "1mbit", "burst", "5000", "limit", "8000"),
)


def _targets(
    kind: str, rng: random.Random, nodes: Sequence[str]
) -> tuple[tuple[str, ...], dict[str, Any]]:
    a, b = rng.sample(list(nodes), 2)
    params: dict[str, Any] = {}
    if kind == "split":
        size = rng.randint(1, len(nodes) // 2)
        side = sorted(rng.sample(list(nodes), size))
        params["side"] = side
        return tuple(nodes), params  # every node's routes change
    if kind in ("partition-kill", "unpin", "overflow"):
        return (a, b), params
    return (a,), params


def draw(
    seed: int,
    nodes: Sequence[str],
    seconds: float,
    *,
    kinds: Sequence[str] = tuple(KINDS),
    warmup: float = 3.0,
    gap: tuple[float, float] = (2.0, 5.0),
    queue_frames: int = 64,
) -> list[Fault]:
    """The schedule: faults that start after ``warmup`` and have all ended by ``seconds``."""
    if len(nodes) < 2:
        raise ValueError("a fault schedule needs at least two nodes")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; known: {sorted(KINDS)}")
    rng = random.Random(seed)
    order = list(kinds)
    rng.shuffle(order)
    free_at = dict.fromkeys(nodes, 0.0)
    out: list[Fault] = []
    cursor = warmup
    while True:
        cursor += rng.uniform(*gap)
        if order:
            kind = order.pop()
        else:
            kind = rng.choices(list(kinds), weights=[KINDS[k][0] for k in kinds])[0]
        _, lo, hi = KINDS[kind]
        duration = round(rng.uniform(lo, hi), 2)
        targets, params = _targets(kind, rng, nodes)
        if kind == "partition-kill":
            params["kill_after"] = round(rng.uniform(0.3, 0.4) * duration, 2)
            params["restart_after"] = round(params["kill_after"] + rng.uniform(0.2, 1.0), 2)
        elif kind == "impair":
            params["tbf"] = list(rng.choice(TBF_PROFILES))
        elif kind == "overflow":
            params["burst"] = 3 * queue_frames
        start = max([cursor, *(free_at[n] for n in targets)])
        if start + duration > seconds:
            if cursor >= seconds:
                break
            continue
        fault = Fault(round(start, 2), kind, duration, targets, params)
        out.append(fault)
        for n in targets:
            free_at[n] = fault.end + 0.5
    return sorted(out, key=lambda f: f.at)


def format_schedule(seed: int, faults: Sequence[Fault]) -> str:
    lines = [f"fault schedule for seed {seed} ({len(faults)} faults):"]
    lines += [f"  {f.describe()}" for f in faults]
    return "\n".join(lines)
