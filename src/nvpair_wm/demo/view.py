"""What the demo shows: each broker's view of the cluster against the truth, as a live table
(a terminal) or plain lines (a pipe, a file, CI)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from nvpair_wm.demo.node import STATES, DemoNode, Entry, Key

__all__ = ["behind", "plain_status", "render", "summary", "table", "truth", "view_hash"]

HEADERS = ("queued", "running", "done", "failed", "cancel")  # short, for the table


def view_hash(view: dict[Key, Entry]) -> str:
    """A short digest of a view: equal views, equal hashes."""
    digest = hashlib.sha256(json.dumps(sorted(view.items())).encode())
    return digest.hexdigest()[:12]


def truth(nodes: Iterable[DemoNode]) -> dict[Key, Entry]:
    """The cluster's current state: every broker's own workloads."""
    out: dict[Key, Entry] = {}
    for node in nodes:
        out.update(node.own_view())
    return out


def behind(view: dict[Key, Entry], truth: dict[Key, Entry]) -> int:
    """Workloads a view lacks, shows in another state, or still shows after removal."""
    wrong = sum(1 for k, v in truth.items() if view.get(k) != v)
    return wrong + sum(1 for k in view if k not in truth)


def table(nodes: Sequence[DemoNode], title: str, *, wide: bool) -> Table:
    """One row per node: its status, peers, counts per state, how far its view is behind the
    truth, the age of the last event from a peer, and the view's hash. ``wide``: with ports."""
    now_truth = truth(nodes)
    now = time.monotonic()
    out = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 0))
    out.add_column("node", no_wrap=True)
    out.add_column("status", no_wrap=True)
    if wide:
        out.add_column("port", justify="right", no_wrap=True)
    out.add_column("peers", justify="right")
    for header in HEADERS:
        out.add_column(header, justify="right")
    out.add_column("known", justify="right")
    out.add_column("behind", justify="right")
    out.add_column("last rx", justify="right", no_wrap=True)
    out.add_column("view", no_wrap=True, min_width=12)
    for node in nodes:
        view = node.view()
        counts = dict.fromkeys(STATES, 0)
        for state, _ in view.values():
            counts[state] = counts.get(state, 0) + 1
        late = behind(view, now_truth)
        status = {
            "up": Text("up", "green"),
            "starting": Text("starting", "yellow"),
            "down": Text("DOWN", "bold red"),
        }[node.phase]
        if node.phase == "down":  # no process, so no view to show: not the last one seen
            blank = ["-"] * (len(STATES) + 4)
            out.add_row(node.name, status, *([str(node.port)] if wide else []), "-", *blank)
            continue
        age = "-" if node.last_remote is None else f"{now - node.last_remote:.1f}s"
        out.add_row(
            node.name,
            status,
            *([str(node.port)] if wide else []),
            f"{node.peers_up}/{node.peers_total}" if node.phase == "up" else "-",
            *(str(counts[s]) for s in STATES),
            str(len(view)),
            Text(str(late), "green" if late == 0 else "yellow"),
            age,
            Text(view_hash(view), "green" if late == 0 else "dim"),
        )
    return out


def render(shown: Table, notes: Iterable[str], *, finished: bool) -> Group:
    """The table, the latest notes and a legend."""
    lines = Text("\n".join(notes) or "…", style="cyan")
    hint = Text(
        "behind: workloads this node's view lacks, shows in another state, or still shows "
        "after their removal; last rx: time since the last event from a peer; a DOWN node "
        "has no view. " + ("The run has ended." if finished else "Ctrl-C ends the run early."),
        style="dim",
    )
    return Group(shown, lines, hint)


def plain_status(nodes: Sequence[DemoNode]) -> None:
    """A status block of plain lines, for output that is not a terminal."""
    now_truth = truth(nodes)
    for node in nodes:
        if node.phase == "down":
            print(f"  {node.name} DOWN (no process, no view)", flush=True)
            continue
        view = node.view()
        print(
            f"  {node.name} {node.phase:<8} known {len(view):4d} behind "
            f"{behind(view, now_truth):4d} peers {node.peers_up}/{node.peers_total} "
            f"view {view_hash(view)}",
            flush=True,
        )


def summary(nodes: Sequence[DemoNode], converged: bool) -> None:
    for node in nodes:
        view = node.view()
        print(f"{node.name}: {len(view)} workloads, view hash {view_hash(view)}")
    print(f"converged: {'yes' if converged else 'no'}", flush=True)
