"""``make demo``: a cluster of nvpair-wm processes on loopback, converging live.

Run as ``python -m nvpair_wm.demo [--duration SECONDS] [--nodes N]``. The demo:

1. makes a cluster directory in a temporary directory (:mod:`nvpair_wm.clusterdir`);
2. starts N ``nvpair-wm`` processes (``--bind 127.0.0.1 --port 0``), each with a stand-in broker
   played by this process over the node's stdio, and sends every node the ``nodes:update``
   records with the ports they picked;
3. lets each broker submit, start and finish workloads at a modest rate (most complete, some
   fail or are cancelled, finished ones are removed a few seconds later), and shows each
   broker's view of the whole cluster in a live table: counts per state, workloads known, how
   many differ from the cluster's truth ("behind"), peers connected (from ``manager:status``),
   the age of the last event received from a peer, and a short hash of the view;
4. a quarter of the way in, kills node-2 with SIGKILL, keeps generating on the others, restarts
   it (same port) and shows it catching up: its broker starts from an empty view of the other
   nodes and resends its own workloads (the broker is the source of truth for those), and the
   peers' snapshots bring the rest;
5. stops generating for the last part of the run, so that every view settles, then prints one
   plain line per node (``node-1: 42 workloads, view hash 3f2a9c01b7de``) and
   ``converged: yes`` or ``no``.

It ends after ``--duration`` seconds (waiting up to SETTLE_GRACE more for the views to settle)
or on Ctrl-C / SIGTERM, stops the nodes, deletes the temporary directory and exits 0 (1 if a
node cannot be started). On a terminal the table is a rich Live display; otherwise (a pipe, a
file, CI) the demo prints the annotated events and a few plain status blocks, so the output
stays small.

The package, one idea per module: :mod:`~nvpair_wm.demo.node` (a node's process and its
stand-in broker), :mod:`~nvpair_wm.demo.scenario` (the run: timeline, kill, restart, settle),
:mod:`~nvpair_wm.demo.view` (the table and the plain lines) and :mod:`~nvpair_wm.demo.cli`
(flags, the temporary cluster, the summary).
"""

from __future__ import annotations

from nvpair_wm.demo.cli import main
from nvpair_wm.demo.node import DemoNode
from nvpair_wm.demo.scenario import Demo, Timeline

__all__ = ["Demo", "DemoNode", "Timeline", "main"]
