"""The demo's run: start the nodes, let their brokers generate, kill one and restart it, let
the views settle, and say whether they converged."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass
from typing import Final

from rich.console import Console, Group
from rich.live import Live

from nvpair_wm.demo import view
from nvpair_wm.demo.node import IN_FLIGHT, DemoNode, Entry, Key
from nvpair_wm.errors import DemoError

__all__ = ["Demo", "Timeline"]

SETTLE_GRACE: Final = 10.0  # after --duration, waiting for views that have not settled yet
STATUS_EVERY: Final = 0.5  # manager:status polls


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
        return view.truth(self.nodes)

    def caught_up(self, node: DemoNode) -> bool:
        return node.phase == "up" and node.view() == self.truth()

    def converged(self) -> bool:
        truth = self.truth()
        return all(n.phase == "up" and n.view() == truth for n in self.nodes)

    def render(self) -> Group:
        title = (
            f"nvpair-wm demo: {len(self.nodes)} nodes on 127.0.0.1 · {self.elapsed():4.1f}s of "
            f"{self.timeline.duration:g}s · {self.phase_text}"
        )
        shown = view.table(self.nodes, title, wide=self.console.width >= 96)
        return view.render(shown, self.notes, finished=self.finished)

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
                view.plain_status(self.nodes)
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
