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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import json
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from nvpair_wm.cli import OneLineParser, int_in
from nvpair_wm.clusterdir import cert_fingerprint, init_cluster
from nvpair_wm.errors import DemoError  # defined there; still importable from here

__all__ = ["main"]

PROG: Final = "python -m nvpair_wm.demo"
START_TIMEOUT: Final = 30.0  # a node's process → ``ready`` and its first status
REQUEST_TIMEOUT: Final = 5.0  # a manager:status answer
STOP_TIMEOUT: Final = 5.0  # stdin closed → the node exits, else SIGKILL
SETTLE_GRACE: Final = 10.0  # after --duration, waiting for views that have not settled yet
STATUS_EVERY: Final = 0.5  # manager:status polls
FRAME_LIMIT: Final = 4 * 1024 * 1024  # longest stdout line accepted from a node
MODELS: Final = ("llama-3.1-8b-instruct", "qwen2.5-7b", "mistral-7b-v0.3", "phi-3-mini")
ENGINES: Final = ("vllm", "sglang", "llama.cpp")
IN_FLIGHT: Final = 6  # workloads a stand-in broker keeps queued or running at a time
STATES: Final = ("queued", "running", "completed", "failed", "cancelled")
HEADERS: Final = ("queued", "running", "done", "failed", "cancel")  # short, for the table
# How running workloads end: (method, state, weight).
ENDINGS: Final = (
    ("workload:completed", "completed", 0.7),
    ("workload:errored", "failed", 0.15),
    ("workload:cancelled", "cancelled", 0.15),
)

Key = tuple[str, str]  # (originatedFrom, id)
Entry = tuple[str, int]  # (state, seq)
Phase = Literal["starting", "up", "down"]


def _now_ms() -> int:
    return int(time.time() * 1000)


def view_hash(view: dict[Key, Entry]) -> str:
    """A short digest of a view: equal views, equal hashes."""
    digest = hashlib.sha256(json.dumps(sorted(view.items())).encode())
    return digest.hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Timeline:
    """When things happen, in seconds from the start of the run."""

    duration: float
    kill_at: float
    restart_at: float
    quiet_at: float  # brokers stop generating events: the views settle

    @classmethod
    def of(cls, duration: float) -> Timeline:
        settle = min(max(2.0, 0.2 * duration), 10.0)
        return cls(
            duration=duration,
            kill_at=0.25 * duration,
            restart_at=0.45 * duration,
            quiet_at=max(0.0, duration - settle),
        )


class DemoNode:
    """One nvpair-wm process and the stand-in broker that drives it over stdio."""

    def __init__(self, name: str, cluster_dir: Path, log_path: Path, rng: random.Random) -> None:
        self.name = name
        self.cluster_dir = cluster_dir
        self.log_path = log_path
        self.fingerprint = cert_fingerprint((cluster_dir / "node.crt").read_bytes())
        self.rng = rng
        self.run_id = f"run-{name}-{rng.getrandbits(32):08x}"
        self.proc: asyncio.subprocess.Process | None = None
        self.phase: Phase = "starting"  # not "down" before its first start: nothing crashed
        self.port = 0
        self.incarnation = 0
        # The broker's own workloads (the truth for them) and the removals it reported.
        self.own: dict[str, dict[str, Any]] = {}
        self.removed: dict[str, float] = {}  # id → when removed (monotonic)
        self.remove_due: dict[str, float] = {}  # finished id → when the broker removes it
        # What the node told the broker about the others' workloads.
        self.remote: dict[Key, Entry] = {}
        self.last_remote: float | None = None  # monotonic time of the last upsert/remove
        self.peers_up = 0
        self.peers_total = 0
        self._next_wid = itertools.count(1)
        self._next_id = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._started = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    # -- the process ------------------------------------------------------------------------------

    async def start(self, port: int = 0) -> None:
        """Start the process and wait for ``ready`` and its port; a fresh manager knows nothing,
        so the broker's view of the others starts empty and its own workloads are resent."""
        self.incarnation += 1
        self.phase = "starting"
        self.remote.clear()
        self.last_remote = None
        self._started = asyncio.Event()
        args = ["--cluster-dir", str(self.cluster_dir), "--bind", "127.0.0.1"]
        args += ["--port", str(port), "--log-level", "info"]
        with self.log_path.open("ab") as log:
            log.write(f"--- {self.name} start #{self.incarnation}\n".encode())
            log.flush()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "nvpair_wm",
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches the demo only; it stops the nodes
                limit=FRAME_LIMIT,
            )
        self.proc = proc
        self._reader = asyncio.get_running_loop().create_task(self._read(proc))
        try:
            await asyncio.wait_for(self._started.wait(), START_TIMEOUT)
            status = await self.request("manager:status")
        except (TimeoutError, ConnectionError) as exc:
            await self.kill()
            raise DemoError(
                f"{self.name} did not start ({type(exc).__name__}); its log:\n{self.log_tail()}"
            ) from None
        self.port = int(status["port"])
        self.phase = "up"
        self.resend_own()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            try:
                line = await proc.stdout.readline()
            except (ValueError, ConnectionError):  # an over-long line, or the pipe broke
                break
            if not line:
                break
            try:
                frame = json.loads(line)
            except ValueError:
                continue
            if isinstance(frame, dict):
                self._on_frame(frame)
        if proc is self.proc:
            self.phase = "down"
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"{self.name} exited"))
            self._pending.clear()

    def _on_frame(self, frame: dict[str, Any]) -> None:
        method = frame.get("method")
        params = frame.get("params")
        if method == "ready":
            self._started.set()
        elif method == "workloads:upsert" and isinstance(params, dict):
            info = params["workloadInfo"]
            key = (str(info["originatedFrom"]), str(info["id"]))
            old = self.remote.get(key)
            if old is None or old[1] < info["seq"]:
                self.remote[key] = (str(info["state"]), int(info["seq"]))
            self.last_remote = time.monotonic()
        elif method == "workloads:remove" and isinstance(params, dict):
            self.remote.pop((str(params["originatedFrom"]), str(params["workloadId"])), None)
            self.last_remote = time.monotonic()
        elif "id" in frame:
            future = self._pending.pop(frame["id"], None)
            if future is not None and not future.done():
                if "result" in frame:
                    future.set_result(frame["result"])
                else:
                    future.set_exception(ConnectionError(f"error answer: {frame.get('error')}"))

    def send(self, frame: dict[str, Any]) -> None:
        """Write a frame to the node (dropped if it is not running: the broker's own state
        still changes, and is resent when the node starts again)."""
        proc = self.proc
        if self.phase == "down" or proc is None or proc.stdin is None:
            return
        if proc.returncode is not None or proc.stdin.is_closing():
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            proc.stdin.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")

    async def request(self, method: str) -> Any:
        rid = next(self._next_id)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        self.send({"jsonrpc": "2.0", "method": method, "id": rid})
        try:
            return await asyncio.wait_for(future, REQUEST_TIMEOUT)
        finally:
            self._pending.pop(rid, None)

    async def poll_status(self) -> None:
        if self.phase != "up":
            return
        try:
            status = await self.request("manager:status")
        except (TimeoutError, ConnectionError):
            return
        peers = status.get("peers") or []
        self.peers_total = len(peers)
        self.peers_up = sum(1 for p in peers if p.get("connected"))

    async def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.phase = "down"
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        await self._reap()

    async def stop(self) -> None:
        """Close the broker channel (the node exits 0 on EOF); SIGKILL if it lingers."""
        proc = self.proc
        if proc is not None and proc.returncode is None:
            if proc.stdin is not None:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        await self._reap()

    async def _reap(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), 2.0)
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        self.phase = "down"
        self.peers_up = 0

    def record(self) -> dict[str, Any]:
        return {
            "nodeId": self.name,
            "address": "127.0.0.1",
            "port": self.port,
            "fingerprint": self.fingerprint,
        }

    # -- the stand-in broker ----------------------------------------------------------------------

    def _report(self, method: str, info: dict[str, Any]) -> None:
        self.own[info["id"]] = info
        self.send({"jsonrpc": "2.0", "method": method, "params": {"workloadInfo": info}})

    def resend_own(self) -> None:
        """After a (re)start: the newest event of every own workload, and recent removals."""
        method_of = {"queued": "workload:submitted", "running": "workload:started"}
        method_of.update({state: method for method, state, _ in ENDINGS})
        for info in self.own.values():
            self._report(method_of[info["state"]], info)
        for wid in self.removed:
            self._send_remove(wid)

    def _send_remove(self, wid: str) -> None:
        params = {"workloadId": wid, "originatedFrom": self.name, "runId": self.run_id}
        self.send({"jsonrpc": "2.0", "method": "workloads:remove", "params": params})

    def step(self, now: float) -> None:
        """One broker action: remove a finished workload, submit, start or finish one."""
        rng = self.rng
        for wid, due in self.remove_due.items():
            if due <= now:
                del self.remove_due[wid]
                del self.own[wid]
                self.removed[wid] = now
                self._send_remove(wid)
                return
        for wid, when in list(self.removed.items()):
            if now - when > 300:  # long gone everywhere; no need to resend it
                del self.removed[wid]
        queued = [i for i in self.own.values() if i["state"] == "queued"]
        running = [i for i in self.own.values() if i["state"] == "running"]
        roll = rng.random()
        if len(queued) + len(running) < IN_FLIGHT and (roll < 0.4 or not (queued or running)):
            wid = f"{self.name}-w{next(self._next_wid)}"
            self._report(
                "workload:submitted",
                {
                    "id": wid,
                    "model": rng.choice(MODELS),
                    "engine": rng.choice(ENGINES),
                    "runId": self.run_id,
                    "state": "queued",
                    "originatedFrom": self.name,
                    "scheduledOn": self.name,
                    "createdAt": _now_ms(),
                    "startedAt": None,
                    "completedAt": None,
                    "error": None,
                    "seq": 1,
                },
            )
        elif queued and (roll < 0.7 or not running):
            info = {**queued[0], "state": "running", "startedAt": _now_ms(), "seq": 2}
            self._report("workload:started", info)
        elif running:
            info = rng.choice(running)
            method, state, _ = rng.choices(ENDINGS, weights=[w for _, _, w in ENDINGS])[0]
            done: dict[str, Any] = {**info, "state": state, "completedAt": _now_ms(), "seq": 3}
            if state == "failed":
                done["error"] = rng.choice(("CUDA out of memory", "engine exited (code 137)"))
            self._report(method, done)
            self.remove_due[info["id"]] = now + rng.uniform(2.0, 15.0)

    # -- views ------------------------------------------------------------------------------------

    def own_view(self) -> dict[Key, Entry]:
        return {(self.name, wid): (i["state"], int(i["seq"])) for wid, i in self.own.items()}

    def view(self) -> dict[Key, Entry]:
        """The broker's view of the cluster: the others' workloads as told, and its own."""
        return {**self.remote, **self.own_view()}


# --- the run --------------------------------------------------------------------------------------


class Demo:
    def __init__(self, nodes: list[DemoNode], timeline: Timeline, console: Console) -> None:
        self.nodes = nodes
        self.timeline = timeline
        self.console = console
        self.live_ui = console.is_terminal
        self.notes: deque[str] = deque(maxlen=8)
        self.t0 = time.monotonic()
        self.stopping = asyncio.Event()
        self.interrupted = False
        self.phase_text = "starting"
        self.victim = nodes[1] if len(nodes) > 1 else None
        self.restarted_at: float | None = None
        self.finished = False  # the run is over: the table is final, Ctrl-C no longer applies
        self._live: Live | None = None

    # -- output -----------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def note(self, text: str) -> None:
        line = f"[{self.elapsed():5.1f}s] {text}"
        self.notes.append(line)
        if not self.live_ui:
            print(line, flush=True)

    def truth(self) -> dict[Key, Entry]:
        """The cluster's current state: every broker's own workloads."""
        out: dict[Key, Entry] = {}
        for node in self.nodes:
            out.update(node.own_view())
        return out

    @staticmethod
    def behind(view: dict[Key, Entry], truth: dict[Key, Entry]) -> int:
        """Workloads a view lacks, shows in another state, or still shows after removal."""
        wrong = sum(1 for k, v in truth.items() if view.get(k) != v)
        return wrong + sum(1 for k in view if k not in truth)

    def caught_up(self, node: DemoNode) -> bool:
        return node.phase == "up" and node.view() == self.truth()

    def converged(self) -> bool:
        truth = self.truth()
        return all(n.phase == "up" and n.view() == truth for n in self.nodes)

    def table(self) -> Table:
        truth = self.truth()
        now = time.monotonic()
        title = (
            f"nvpair-wm demo: {len(self.nodes)} nodes on 127.0.0.1 · {self.elapsed():4.1f}s of "
            f"{self.timeline.duration:g}s · {self.phase_text}"
        )
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 0))
        table.add_column("node", no_wrap=True)
        table.add_column("status", no_wrap=True)
        wide = self.console.width >= 96
        if wide:
            table.add_column("port", justify="right", no_wrap=True)
        table.add_column("peers", justify="right")
        for header in HEADERS:
            table.add_column(header, justify="right")
        table.add_column("known", justify="right")
        table.add_column("behind", justify="right")
        table.add_column("last rx", justify="right", no_wrap=True)
        table.add_column("view", no_wrap=True, min_width=12)
        for node in self.nodes:
            view = node.view()
            counts = dict.fromkeys(STATES, 0)
            for state, _ in view.values():
                counts[state] = counts.get(state, 0) + 1
            behind = self.behind(view, truth)
            status = {
                "up": Text("up", "green"),
                "starting": Text("starting", "yellow"),
                "down": Text("DOWN", "bold red"),
            }[node.phase]
            if node.phase == "down":  # no process, so no view to show: not the last one seen
                blank = ["-"] * (len(STATES) + 4)
                table.add_row(node.name, status, *([str(node.port)] if wide else []), "-", *blank)
                continue
            age = "-" if node.last_remote is None else f"{now - node.last_remote:.1f}s"
            table.add_row(
                node.name,
                status,
                *([str(node.port)] if wide else []),
                f"{node.peers_up}/{node.peers_total}" if node.phase == "up" else "-",
                *(str(counts[s]) for s in STATES),
                str(len(view)),
                Text(str(behind), "green" if behind == 0 else "yellow"),
                age,
                Text(view_hash(view), "green" if behind == 0 else "dim"),
            )
        return table

    def render(self) -> Group:
        notes = Text("\n".join(self.notes) or "…", style="cyan")
        hint = Text(
            "behind: workloads this node's view lacks, shows in another state, or still shows "
            "after their removal; last rx: time since the last event from a peer; a DOWN node "
            "has no view. "
            + ("The run has ended." if self.finished else "Ctrl-C ends the run early."),
            style="dim",
        )
        return Group(self.table(), notes, hint)

    def plain_status(self) -> None:
        truth = self.truth()
        for node in self.nodes:
            if node.phase == "down":
                print(f"  {node.name} DOWN (no process, no view)", flush=True)
                continue
            view = node.view()
            print(
                f"  {node.name} {node.phase:<8} known {len(view):4d} behind "
                f"{self.behind(view, truth):4d} peers {node.peers_up}/{node.peers_total} "
                f"view {view_hash(view)}",
                flush=True,
            )

    # -- control ----------------------------------------------------------------------------------

    def interrupt(self) -> None:
        if not self.stopping.is_set():
            self.interrupted = True
            self.stopping.set()

    def announce(self) -> None:
        """Send every running node the current records, as the real broker would."""
        records = [n.record() for n in self.nodes if n.port]
        for node in self.nodes:
            node.send({"jsonrpc": "2.0", "method": "nodes:update", "params": {"nodes": records}})

    async def generate(self, node: DemoNode) -> None:
        rng = node.rng
        while self.elapsed() < self.timeline.quiet_at:
            await asyncio.sleep(rng.uniform(0.1, 0.35))
            if node.phase == "up" and self.elapsed() < self.timeline.quiet_at:
                node.step(time.monotonic())

    async def poll(self) -> None:
        while True:
            await asyncio.gather(*(n.poll_status() for n in self.nodes))
            await asyncio.sleep(STATUS_EVERY)

    async def ui(self) -> None:
        """Redraw the table (a terminal), or print a status block now and then (otherwise)."""
        every = max(5.0, self.timeline.duration / 8)
        next_block = every
        while True:
            if self._live is not None:
                self._live.update(self.render(), refresh=True)
            elif self.phase_text != "starting" and self.elapsed() >= next_block:
                next_block += every
                self.plain_status()
            await asyncio.sleep(0.25)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def run(self) -> bool:
        """The whole run; returns whether every view converged at the end."""
        loop = asyncio.get_running_loop()
        with contextlib.ExitStack() as stack:
            if self.live_ui:
                live = Live(self.render(), console=self.console, auto_refresh=False)
                self._live = stack.enter_context(live)
            ui = loop.create_task(self.ui())
            try:
                return await self._run()
            finally:
                self.finished = True
                ui.cancel()
                await asyncio.gather(ui, return_exceptions=True)
                if self._live is not None:
                    self._live.update(self.render(), refresh=True)
                    self._live = None

    async def _run(self) -> bool:
        tl = self.timeline
        loop = asyncio.get_running_loop()
        self.note(f"starting {len(self.nodes)} nodes")
        started = await asyncio.gather(*(n.start() for n in self.nodes), return_exceptions=True)
        for outcome in started:
            if isinstance(outcome, BaseException):
                raise outcome
        self.announce()
        ports = ", ".join(f"{n.name} :{n.port}" for n in self.nodes)
        self.t0 = time.monotonic()
        self.note(f"cluster up ({ports}); brokers generating workloads")
        self.phase_text = "generating"
        tasks = [loop.create_task(self.generate(n)) for n in self.nodes]
        tasks.append(loop.create_task(self.poll()))
        victim = self.victim
        killed = restarted = caught_up = quiet = False
        try:
            while not self.stopping.is_set() and self.elapsed() < tl.duration:
                t = self.elapsed()
                if victim is not None and not killed and t >= tl.kill_at:
                    killed = True
                    await victim.kill()
                    self.phase_text = f"{victim.name} down; the others keep going"
                    self.note(f"{victim.name} killed (SIGKILL); events continue on the others")
                if victim is not None and killed and not restarted and t >= tl.restart_at:
                    restarted = True
                    await self.restart(victim)
                if victim is not None and restarted and not caught_up and self.caught_up(victim):
                    caught_up = True
                    took = time.monotonic() - (self.restarted_at or time.monotonic())
                    self.note(f"{victim.name} caught up {took:.1f}s after its restart")
                    if not quiet:
                        self.phase_text = "generating"
                if not quiet and t >= tl.quiet_at:
                    quiet = True
                    self.phase_text = "settling: no new events"
                    self.note("brokers stop generating; the views settle")
                await self._pause(0.1)
            if not self.stopping.is_set() and not self.converged():
                self.note(f"waiting up to {SETTLE_GRACE:g}s for the views to settle")
                deadline = time.monotonic() + SETTLE_GRACE
                while not self.converged() and time.monotonic() < deadline:
                    await self._pause(0.1)
                    if self.stopping.is_set():
                        break
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        done = self.converged()
        self.phase_text = "converged" if done else "ended"
        if self.interrupted:
            self.note("interrupted")
        self.note("every node has the same view" if done else "the views differ")
        self.note(self.unfinished())
        return done

    def unfinished(self) -> str:
        """Why workloads are still queued or running at the end (it is not a fault)."""
        states = [state for state, _ in self.truth().values()]
        active = sum(1 for s in states if s in ("queued", "running"))
        at = min(self.timeline.quiet_at, self.elapsed())
        return (
            f"{active} workloads are still queued or running: each stand-in broker keeps up to "
            f"{IN_FLIGHT} in flight and stopped reporting at {at:.0f}s, so they never finish "
            "here (a real broker would report them ending); converged means every node shows "
            "them, and the finished ones not yet removed, the same way"
        )

    async def restart(self, node: DemoNode) -> None:
        old_port = node.port
        self.phase_text = f"restarting {node.name}"
        try:
            await node.start(old_port)
        except DemoError:
            await node.start(0)  # the old port was taken meanwhile: a new record
        self.restarted_at = time.monotonic()
        self.announce()
        self.phase_text = f"{node.name} catching up"
        self.note(
            f"{node.name} restarted on port {node.port}: empty view of the others; "
            f"resent its own {len(node.own)} workloads"
        )


def _summary(nodes: Sequence[DemoNode], converged: bool) -> None:
    for node in nodes:
        view = node.view()
        print(f"{node.name}: {len(view)} workloads, view hash {view_hash(view)}")
    print(f"converged: {'yes' if converged else 'no'}", flush=True)


async def _main(duration: float, size: int, seed: int | None, console: Console) -> int:
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="nvpair-wm-demo-"))
    nodes: list[DemoNode] = []
    demo: Demo | None = None
    loop = asyncio.get_running_loop()
    try:
        names = [f"node-{i}" for i in range(1, size + 1)]
        dirs = init_cluster(tmp / "cluster", names)
        nodes = [
            DemoNode(n, dirs[n], tmp / f"{n}.log", random.Random(rng.getrandbits(64)))
            for n in names
        ]
        demo = Demo(nodes, Timeline.of(duration), console)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, demo.interrupt)
        try:
            converged = await demo.run()
        except DemoError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 1
        _summary(nodes, converged)
        return 0
    finally:
        await asyncio.gather(*(n.stop() for n in nodes), return_exceptions=True)
        shutil.rmtree(tmp, ignore_errors=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 1.0 <= value <= 86_400.0:
        raise argparse.ArgumentTypeError(f"must be between 1 and 86400 seconds: {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(
        prog=PROG,
        description="A cluster of nvpair-wm processes on loopback with stand-in brokers: watch "
        "every node's view converge, also after one node is killed and restarted.",
    )
    parser.add_argument(
        "--duration",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="run this long, then stop and print a summary (default 60; Ctrl-C ends sooner)",
    )
    parser.add_argument(
        "--nodes", type=int_in(2, 9), default=3, metavar="N", help="cluster size (default 3)"
    )
    parser.add_argument("--seed", type=int, help="seed the brokers' random choices")
    args = parser.parse_args(argv)
    console = Console()
    try:
        return asyncio.run(_main(args.duration, args.nodes, args.seed, console))
    except KeyboardInterrupt:  # before the demo's own handler was installed
        return 130


if __name__ == "__main__":
    sys.exit(main())
