"""One soak run: N real ``nvpair-wm`` processes with real mutual TLS, a broker model per node,
a seeded fault schedule, every broker frame recorded, then quiesce and judge.

Timeline of a run of ``seconds``:

1. make the cluster directory (``nvpair_wm.clusterdir``: one certificate per node, everyone
   pinned), the network (namespaces or loopback, :mod:`tests.soak.network`) and the limits
   file; start every node, wait for ``ready``, send each the ``nodes:update`` records;
2. until ``seconds``: every broker reports ``rate`` events per second (:mod:`tests.soak.workload`)
   while the fault schedule (:mod:`tests.soak.schedule`) is applied, each fault recorded as it
   begins and ends; a node that is down reports nothing, and after a restart its broker waits
   for ``ready``, re-announces the nodes and re-reports what was never acknowledged (or,
   with ``resend="live"``, the newest state of everything it holds). One thread applies the
   schedule in order, so a slow restart makes the actions after it late: the history records
   when each really happened;
3. when the last fault has healed (the schedule ends by ``seconds``), the brokers stop
   reporting (``quiesce``); the run waits up to ``bound`` seconds for every broker's view to
   equal the truth (the live :class:`~tests.soak.checker.Checker` says when), asks each node for
   ``manager:status`` (a fence: what it wrote before is recorded), closes every broker channel
   (the nodes exit 0) and records the end;
4. the history file is judged by :func:`tests.soak.checker.check`, from the file.

Everything is bounded: each wait has a deadline, the whole run a watchdog, the broker models a
cap on workloads; processes, namespaces and qdiscs are removed on every exit path.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.config import dumps
from tests.soak.checker import Checker, Report, check
from tests.soak.history import Recorder, read_history
from tests.soak.network import (
    LoopbackNetwork,
    NetnsNetwork,
    Network,
    PinBook,
    SoakError,
    netns_available,
)
from tests.soak.schedule import KINDS, NETNS_ONLY, Fault, draw, format_schedule
from tests.soak.workload import BrokerModel, Resend

__all__ = ["THIS_TREE", "Options", "Upgrade", "run"]

READY_TIMEOUT: Final = 30.0  # a process start → its ``ready`` (two busy cores: generous)
FENCE_TIMEOUT: Final = 10.0  # a manager:status answer at the end
EXIT_TIMEOUT: Final = 10.0  # stdin closed → the process exits
RSS_EVERY: Final = 1.0  # seconds between RSS samples
# The link limits of the soak (``--config`` keys), short so that faults are noticed and
# repaired within seconds.
SOAK_LIMITS: Final[dict[str, Any]] = {
    "broadcast.connect_timeout": 2.0,
    "broadcast.handshake_timeout": 2.0,
    "broadcast.response_timeout": 3.0,
    "broadcast.retry_base": 0.05,
    "broadcast.retry_max_delay": 1.0,
    "broadcast.retry_max_attempts": 4,
    "broadcast.retry_max_age": 5.0,
    "broadcast.min_reconnect_interval": 0.2,
    "broadcast.keepalive_interval": 2.0,
    "broadcast.keepalive_timeout": 2.0,
    "broadcast.tcp_keepalive": 2.0,
    "broadcast.reconcile_interval": 0.5,
}


#: How the nodes run this tree's nvpair-wm.
THIS_TREE: Final = (sys.executable, "-m", "nvpair_wm")


@dataclass(frozen=True)
class Upgrade:
    """A rolling upgrade: every node starts on ``first`` and is restarted, one by one under
    the load and the faults, on ``then`` (a downgrade is the same with the two swapped). Each
    is the command that runs that release's ``nvpair-wm`` (``tests.support.releases.build``)."""

    first: tuple[str, ...]
    then: tuple[str, ...]
    first_name: str  # "0.1.0", "this tree": for the schedule and the report
    then_name: str

    def times(self, names: Sequence[str], seconds: float) -> list[tuple[float, str]]:
        """When each node is restarted on ``then``: evenly over the run, in name order."""
        step = seconds / (len(names) + 1)
        return [(step * (i + 1), name) for i, name in enumerate(names)]


@dataclass(frozen=True)
class Options:
    seed: int
    seconds: float = 60.0  # generating and injecting; then quiesce and up to ``bound`` more
    nodes: int = 3
    rate: float = 25.0  # events per second per broker
    bound: float = 20.0  # seconds after quiesce within which every view must equal the truth
    net: str = "auto"  # auto | netns | loopback
    kinds: tuple[str, ...] = tuple(KINDS)
    queue_frames: int = 64  # per-peer queue bound (frames), small so that overflow happens
    broker_queue: int = 200  # broker.queue_frames, small: a deaf broker makes peers see 503
    resend: Resend = "unacked"
    max_live: int = 150
    workdir: Path = Path("/tmp")
    log: Callable[[str], None] = print
    extra_limits: dict[str, Any] = field(default_factory=dict)  # more --config keys
    upgrade: Upgrade | None = None  # a rolling upgrade (or downgrade) during the run
    # "multi": starts, requeues and ends are reported by the broker of the node a workload runs
    # on, mostly not its entry node (the spec's multi-path workload; tests.soak.workload)
    paths: str = "single"
    # Another implementation's command instead of this tree's nvpair-wm (the same flags:
    # --cluster-dir, --bind, --port, --log-level, --config, --print-config): the documented
    # check of docs/soak.md, which the conformance kit cannot run (it never restarts one)
    program: tuple[str, ...] = ()


def names_for(n: int) -> list[str]:
    if not 2 <= n <= 5:
        raise SoakError(f"--nodes must be between 2 and 5, not {n}")
    return [f"node-{chr(ord('a') + i)}" for i in range(n)]


def choose_network(net: str, names: Sequence[str], pins: PinBook) -> Network:
    if net == "auto":
        net = "netns" if netns_available() is None else "loopback"
    if net == "netns":
        why = netns_available()
        if why is not None:
            raise SoakError(f"--net netns: {why}")
        return NetnsNetwork(names)
    if net == "loopback":
        loop = LoopbackNetwork(names, pins)
        for name in names:
            loop.set_port(name, _free_port())
        return loop
    raise SoakError(f"unknown --net {net!r} (auto, netns or loopback)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------
# Limits, the way a user sets them
# ---------------------------------------------------------------------------------------------


class Limits:
    """The soak's limits, in a TOML file every node gets with ``--config``, as a user sets them
    (``nvpair_wm.config``; ``nvpair-wm --config FILE --print-config`` shows the result).

    ``program``: another release's ``nvpair-wm`` (a rolling upgrade) gets the keys it knows
    (its ``--print-config`` lists them; an unknown key would stop it), in a file of its own.
    """

    def __init__(
        self,
        run_dir: Path,
        settings: dict[str, Any],
        program: Sequence[str] = THIS_TREE,
        label: str = "",
    ) -> None:
        self.skipped: list[str] = []
        if tuple(program) != THIS_TREE:
            known = known_keys(program)
            self.skipped = sorted(k for k in settings if k not in known)
            settings = {k: v for k, v in settings.items() if k in known}
        self.settings = settings
        self.path = run_dir / f"soak-config{'-' + label if label else ''}.toml"
        self.path.write_text("# written by the soak (tests/soak/runner.py)\n" + dumps(settings))
        self.args = ["--config", str(self.path)]
        self.how = f"--config {self.path}"


def known_keys(program: Sequence[str]) -> set[str]:
    """The dotted ``--config`` keys ``program`` knows, from its ``--print-config``."""
    out = subprocess.run([*program, "--print-config"], capture_output=True, text=True,
                         timeout=READY_TIMEOUT, check=False)  # fmt: skip
    if out.returncode != 0:
        raise SoakError(f"{' '.join(program)} --print-config failed: {out.stderr.strip()}")
    keys: set[str] = set()
    table = ""
    for line in out.stdout.splitlines():
        if line.startswith("[") and line.endswith("]"):
            table = line[1:-1] + "."
        elif m := _CONFIG_KEY.match(line):
            keys.add(table + m.group(1))
    return keys


_CONFIG_KEY: Final = re.compile(r"^(?:# )?([a-z0-9_]+) =")


# ---------------------------------------------------------------------------------------------
# One node: its process across restarts, and its broker
# ---------------------------------------------------------------------------------------------


class SoakNode:
    def __init__(
        self,
        name: str,
        cluster_dir: Path,
        *,
        model: BrokerModel,
        recorder: Recorder,
        network: Network,
        limits: Limits,
        opts: Options,
        log_path: Path,
        models: dict[str, BrokerModel] | None = None,
        lock: threading.RLock | None = None,
    ) -> None:
        self.name = name
        self.cluster_dir = cluster_dir
        self.model = model
        self.rec = recorder
        self.net = network
        self.limits = limits
        self.opts = opts
        self.log_path = log_path
        self.program: tuple[str, ...] = THIS_TREE  # what runs the node (changed by upgrades)
        # The model, the process handle, the incarnation. Multi-path: one lock for every node
        # (a report of one model goes through another node's channel), and ``models`` is every
        # broker model, by node (answers are credited to the model that issued the request).
        self.lock = lock or threading.RLock()
        self.models = models
        self.inc = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.up = False  # ready, and not killed since
        self.stopped = False  # SIGSTOPped
        self.reading = threading.Event()  # cleared: the broker stops reading (deaf)
        self.reading.set()
        self._ready = threading.Event()
        self._outq: queue.Queue[tuple[int, bytes] | None] = queue.Queue()
        self._responses: dict[str, queue.Queue[dict[str, Any]]] = {}
        self._log: IO[bytes] | None = None
        self.announce: Callable[[SoakNode], None] = lambda node: None
        self.peak_kib = 0
        self.exits: list[int] = []
        threading.Thread(target=self._write_forever, name=f"{name}-writer", daemon=True).start()

    # -- process --------------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn a process (same address and port as before), wait for ``ready``, then
        announce the nodes and re-report what the node never acknowledged."""
        with self.lock:
            self.inc += 1
            inc = self.inc
            host, port = self.net.bind(self.name)
            args = [
                *self.net.prefix(self.name), *self.program,
                "--cluster-dir", str(self.cluster_dir), "--bind", host, "--port", str(port),
                "--log-level", "info", *self.limits.args,
            ]  # fmt: skip
            if self._log is None:
                self._log = self.log_path.open("ab")
            self._log.write(f"--- {self.name} process #{inc}: {' '.join(self.program)}\n".encode())
            self._log.flush()
            self._ready.clear()
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
            )
            proc = self.proc
            self.rec.add("spawn", self.name, inc, {"pid": proc.pid})
            threading.Thread(
                target=self._read_forever, args=(proc, inc), name=f"{self.name}-reader-{inc}",
                daemon=True,
            ).start()  # fmt: skip
        if not self._ready.wait(READY_TIMEOUT):
            raise SoakError(f"{self.name} process #{inc}: no ready within {READY_TIMEOUT}s; "
                            f"log:\n{self.log_tail()}")  # fmt: skip
        with self.lock:
            self.up = True
            self.announce(self)
            if inc > 1:
                if self.models is None:
                    frames = self.model.resend(self.opts.resend)
                else:
                    frames = [
                        frame
                        for model in self.models.values()
                        for frame in model.resend_via(self.name, self.opts.resend)
                    ]
                for frame in frames:
                    self.send(frame)

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def kill(self) -> None:
        """``kill -9``; what the node never acknowledged is re-reported after the restart."""
        with self.lock:
            proc = self.proc
            if proc is None:
                return
            self.up = False
            self.stopped = False
            self._sample_rss(proc)
            proc.kill()
            code = proc.wait(EXIT_TIMEOUT)
            self.rec.add("exit", self.name, self.inc, {"code": code, "how": "kill -9"})
            if self.models is None:
                self.model.lost_in_flight()
            else:
                for model in self.models.values():
                    model.lost_in_flight(self.name)
            self.proc = None

    def signal(self, sig: int) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(sig)
                self.stopped = sig == signal.SIGSTOP

    def stop_gracefully(self) -> int | None:
        """Close the broker channel (EOF): the node must exit 0 within EXIT_TIMEOUT.

        The node is down from here on: the broker reports nothing more to it (a frame written
        after the EOF would be recorded as sent and never read; a rolling upgrade stops nodes
        while the brokers report), and re-reports what was not answered after the restart."""
        with self.lock:
            proc = self.proc
            if proc is None:
                return None
            self.up = False
            if self.stopped:
                proc.send_signal(signal.SIGCONT)
            self._outq.put(None)
        try:
            code = proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(EXIT_TIMEOUT)
        with self.lock:
            self.rec.add("exit", self.name, self.inc, {"code": code, "how": "EOF"})
            self.up = False
            self.proc = None
        return code

    def force_close(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(EXIT_TIMEOUT)
            self.proc = None
            if self._log is not None:
                self._log.close()
                self._log = None

    # -- broker channel -------------------------------------------------------------------------

    def send(self, frame: dict[str, Any]) -> None:
        """Queue a frame for the node's stdin (a writer thread writes it, so a stopped node
        never blocks the broker); it is recorded when written."""
        self._outq.put((self.inc, json.dumps(frame, separators=(",", ":")).encode() + b"\n"))

    def _write_forever(self) -> None:
        while True:
            item = self._outq.get()
            with self.lock:
                proc = self.proc
                if item is None:
                    if proc is not None and proc.stdin is not None:
                        with contextlib.suppress(OSError):
                            proc.stdin.close()
                    continue
                inc, line = item
                if proc is None or inc != self.inc or proc.stdin is None:
                    continue  # written for a process that is gone: the resend covers it
                stdin = proc.stdin
                # Recorded before it is written: a peer may hear of it before write() returns.
                # If the write fails the process is dead, and the frame, unacknowledged, is
                # re-reported after the restart.
                self.rec.add("send", self.name, inc, json.loads(line))
            with contextlib.suppress(OSError, ValueError):
                stdin.write(line)
                stdin.flush()

    def _read_forever(self, proc: subprocess.Popen[bytes], inc: int) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            self.reading.wait()
            try:
                frame = json.loads(raw)
            except ValueError:
                frame = {"unparseable": raw.decode(errors="replace")}
            self.rec.add("recv", self.name, inc, frame)
            if not isinstance(frame, dict):
                continue
            if frame.get("method") == "ready":
                self._ready.set()
            elif "id" in frame and "method" not in frame:
                rid = str(frame["id"])
                waiter = self._responses.pop(rid, None)
                if waiter is not None:
                    waiter.put(frame)
                else:
                    with self.lock:
                        if self.models is None:
                            self.model.acknowledged(rid)
                        else:
                            for model in self.models.values():
                                if model.owns(rid):
                                    model.acknowledged(rid)
        proc.stdout.close()

    _fences = itertools.count(1)

    def status(self, timeout: float = FENCE_TIMEOUT) -> dict[str, Any]:
        """manager:status: a fence (everything written before it has been recorded)."""
        rid = f"{self.name}-status-{next(self._fences)}"
        box: queue.Queue[dict[str, Any]] = queue.Queue()
        self._responses[rid] = box
        self.send({"jsonrpc": "2.0", "method": "manager:status", "id": rid})
        try:
            result: dict[str, Any] = box.get(timeout=timeout).get("result", {})
            return result
        except queue.Empty:
            raise SoakError(f"{self.name}: no manager:status answer within {timeout}s") from None

    # -- RSS ------------------------------------------------------------------------------------

    def _sample_rss(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            text = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            return
        for line in text.splitlines():
            if line.startswith("VmHWM:"):
                kib = int(line.split()[1])
                if kib > self.peak_kib:
                    self.peak_kib = kib
                    self.rec.add("rss", self.name, self.inc, {"peak_kib": kib})

    def sample_rss(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self._sample_rss(self.proc)


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    report: Report
    schedule: list[Fault]
    run_dir: Path
    history: Path
    statuses: dict[str, Any]
    exit_codes: dict[str, int | None]
    limits_how: str
    network: str
    upgrade_exits: dict[str, int | None] = field(default_factory=dict)


class Soak:
    def __init__(self, opts: Options, run_dir: Path) -> None:
        self.opts = opts
        self.run_dir = run_dir
        self.names = names_for(opts.nodes)
        self.nodes: dict[str, SoakNode] = {}
        self.network: Network | None = None
        self.history = run_dir / "history.jsonl"
        self.rec = Recorder(self.history)
        self.live = Checker(opts.bound)
        self.rec.listen(self.live.feed)
        self.halt = threading.Event()
        self.generating = threading.Event()
        self.upgrade_exits: dict[str, int | None] = {}  # a node's exit when it was upgraded

    # -- set-up ---------------------------------------------------------------------------------

    def setup(self) -> list[Fault]:
        opts = self.opts
        dirs = init_cluster(self.run_dir / "cluster", self.names)
        self.pins = PinBook(self.run_dir / "cluster", self.names)
        self.network = choose_network(opts.net, self.names, self.pins)
        kinds = [k for k in opts.kinds if self.network.impairs or k not in NETNS_ONLY]
        schedule = draw(opts.seed, self.names, opts.seconds, kinds=kinds,
                        queue_frames=opts.queue_frames)  # fmt: skip
        settings = {
            **SOAK_LIMITS,
            "broadcast.max_queue_frames": opts.queue_frames,
            "broker.queue_frames": opts.broker_queue,
            **opts.extra_limits,
        }
        limits = Limits(self.run_dir, settings)
        self.limits = limits
        up = opts.upgrade
        first = then = limits
        if up is not None:  # each program with the keys it knows
            first = Limits(self.run_dir, settings, up.first, "first")
            then = Limits(self.run_dir, settings, up.then, "then")
            self.limits = first
        elif opts.program:
            first = then = self.limits = Limits(self.run_dir, settings, opts.program, "program")
        self.then_limits = then
        root = random.Random(opts.seed)
        if opts.paths not in ("single", "multi"):
            raise SoakError(f"unknown --paths {opts.paths!r} (single or multi)")
        models = {
            name: BrokerModel(name, self.names, random.Random(root.getrandbits(64)),
                              max_live=opts.max_live)
            for name in self.names
        }  # fmt: skip
        multi = opts.paths == "multi"
        shared = threading.RLock() if multi else None
        for name in self.names:
            node = SoakNode(name, dirs[name], model=models[name], recorder=self.rec,
                            network=self.network, limits=first, opts=opts,
                            log_path=self.run_dir / f"{name}.log",
                            models=models if multi else None, lock=shared)  # fmt: skip
            if up is not None:
                node.program = up.first
            elif opts.program:
                node.program = opts.program
            node.announce = self._announce_to
            self.nodes[name] = node
        self.rec.add("start", data={
            "seed": opts.seed, "nodes": self.names, "bound": opts.bound,
            "seconds": opts.seconds, "rate": opts.rate, "network": self.network.kind,
            "limits": limits.settings, "limits_via": limits.how, "paths": opts.paths,
            "schedule": [f.describe() for f in schedule],
            **({} if up is None else {"upgrade": {
                "from": up.first_name, "to": up.then_name,
                "skipped_keys": {"first": first.skipped, "then": then.skipped},
                "at": [[round(at, 1), name] for at, name in up.times(self.names, opts.seconds)],
            }}),
        })  # fmt: skip
        return schedule

    def records(self) -> list[dict[str, Any]]:
        assert self.network is not None
        out = []
        for name in self.names:
            host, port = self.network.address(name)
            out.append({"nodeId": name, "address": host, "port": port,
                        "fingerprint": self.pins.fingerprint(name)})  # fmt: skip
        return out

    def _announce_to(self, node: SoakNode) -> None:
        node.send({"jsonrpc": "2.0", "method": "nodes:update", "params": {"nodes": self.records()}})

    def announce_all(self) -> None:
        for node in self.nodes.values():
            with node.lock:
                if node.up:
                    self._announce_to(node)

    # -- workload -------------------------------------------------------------------------------

    def _generate(self) -> None:
        """Every broker reports ``rate`` events per second (jittered), until told to stop."""
        period = 1.0 / self.opts.rate
        due = {n: self.rec.now() + random.Random(n).uniform(0, period) for n in self.names}
        jitter = random.Random(self.opts.seed ^ 0x5EED)
        while self.generating.is_set() and not self.halt.is_set():
            name = min(due, key=lambda n: due[n])
            wait = due[name] - self.rec.now()
            if wait > 0:
                self.halt.wait(min(wait, 0.05))
                continue
            due[name] += period * jitter.uniform(0.5, 1.5)
            node = self.nodes[name]
            with node.lock:
                if self.opts.paths == "multi":
                    up = {n.name for n in self.nodes.values() if n.up}
                    step = node.model.step_to(self.rec.now(), up)
                    if step is not None:
                        via, frame = step
                        self.nodes[via].send(frame)
                elif node.up:
                    node.send(node.model.step(self.rec.now()))

    # -- faults ---------------------------------------------------------------------------------

    def _actions(self, f: Fault) -> list[tuple[float, Callable[[], None]]]:
        net = self.network
        assert net is not None
        nodes = self.nodes
        t = f.targets

        def mark(phase: str) -> Callable[[], None]:
            def do() -> None:
                self.rec.add("fault", data={"fault": f.kind, "phase": phase,
                                            "targets": list(t), "what": f.describe()})  # fmt: skip

            return do

        def seq(*fns: Callable[[], None]) -> Callable[[], None]:
            def do() -> None:
                for fn in fns:
                    fn()

            return do

        begin, end = mark("begin"), mark("end")
        k = f.kind
        if k == "kill":
            return [(f.at, seq(begin, nodes[t[0]].kill)), (f.end, seq(nodes[t[0]].start, end))]
        if k in ("stop", "overflow"):
            node = nodes[t[0]]
            acts = [(f.at, seq(begin, lambda: node.signal(signal.SIGSTOP)))]
            if k == "overflow":
                origin = nodes[t[1]]

                def burst() -> None:
                    with origin.lock:
                        if origin.up:
                            for frame in origin.model.burst(f.params["burst"], self.rec.now()):
                                origin.send(frame)

                acts.append((f.at + 0.2, burst))
            acts.append((f.end, seq(lambda: node.signal(signal.SIGCONT), end)))
            return acts
        if k == "isolate":
            return [(f.at, seq(begin, lambda: net.isolate(t[0], True))),
                    (f.end, seq(lambda: net.isolate(t[0], False), end))]  # fmt: skip
        if k == "split":
            side = list(f.params["side"])
            rest = [n for n in self.names if n not in side]
            return [(f.at, seq(begin, lambda: net.split(side, rest, True))),
                    (f.end, seq(lambda: net.split(side, rest, False), end))]  # fmt: skip
        if k == "partition-kill":
            victim = nodes[t[1]]
            return [
                (f.at, seq(begin, lambda: net.isolate(t[0], True))),
                (f.at + f.params["kill_after"], victim.kill),
                (f.at + f.params["restart_after"], victim.start),
                (f.end, seq(lambda: net.isolate(t[0], False), end)),
            ]
        if k == "impair":
            tbf = list(f.params["tbf"])
            return [(f.at, seq(begin, lambda: net.impair(t[0], tbf))),
                    (f.end, seq(lambda: net.impair(t[0], None), end))]  # fmt: skip
        if k == "rotate":
            return [
                (f.at, seq(begin, lambda: self.pins.rotate_begin(t[0]), self.announce_all)),
                (f.end, seq(lambda: self.pins.rotate_end(t[0]), end)),
            ]
        if k == "unpin":
            return [(f.at, seq(begin, lambda: self.pins.block(t[0], t[1]))),
                    (f.end, seq(lambda: self.pins.unblock(t[0], t[1]), end))]  # fmt: skip
        if k == "deaf":
            node = nodes[t[0]]
            return [(f.at, seq(begin, node.reading.clear)),
                    (f.end, seq(node.reading.set, end))]  # fmt: skip
        raise SoakError(f"unknown fault kind {k!r}")

    def _upgrade(self, node: SoakNode, up: Upgrade) -> None:
        """Restart ``node`` on ``up.then``: closing its broker channel (it must exit 0), or
        ``kill -9`` while its broker is deaf (a node blocked writing cannot exit). A node that
        a fault holds down comes back on ``up.then`` when the fault restarts it."""
        what = f"restart {node.name} on {up.then_name} (was {up.first_name})"
        self.rec.add("fault", data={"fault": "upgrade", "phase": "begin",
                                    "targets": [node.name], "what": what})  # fmt: skip
        with node.lock:
            running = node.proc is not None
        if running and node.reading.is_set():
            self.upgrade_exits[node.name] = node.stop_gracefully()
        elif running:
            node.kill()
        node.program, node.limits = up.then, self.then_limits
        if running:
            node.start()
        self.rec.add("fault", data={"fault": "upgrade", "phase": "end",
                                    "targets": [node.name], "what": what})  # fmt: skip

    def _inject(self, schedule: list[Fault], errors: list[BaseException]) -> None:
        timeline = sorted(
            ((at, i, fn) for i, f in enumerate(schedule) for at, fn in self._actions(f)),
            key=lambda a: (a[0], a[1]),
        )
        up = self.opts.upgrade
        if up is not None:
            upgrades = [
                (at, len(schedule) + i, functools.partial(self._upgrade, self.nodes[name], up))
                for i, (at, name) in enumerate(up.times(self.names, self.opts.seconds))
            ]
            timeline = sorted([*timeline, *upgrades], key=lambda a: (a[0], a[1]))
        try:
            for at, _, fn in timeline:
                wait = at - self.rec.now()
                if wait > 0 and self.halt.wait(wait):
                    return
                fn()
        except BaseException as exc:
            errors.append(exc)
            self.halt.set()

    def _sample_forever(self) -> None:
        while not self.halt.wait(RSS_EVERY):
            for node in self.nodes.values():
                node.sample_rss()

    # -- the run --------------------------------------------------------------------------------

    def run(self, schedule: list[Fault]) -> tuple[dict[str, Any], dict[str, int | None]]:
        opts = self.opts
        errors: list[BaseException] = []
        self._start_all(errors)
        threading.Thread(target=self._sample_forever, name="rss", daemon=True).start()
        self.generating.set()
        gen = threading.Thread(target=self._generate, name="generator", daemon=True)
        gen.start()
        injector = threading.Thread(target=self._inject, args=(schedule, errors), daemon=True)
        injector.start()
        last_end = max([opts.seconds, *(f.end + 1.0 for f in schedule)])
        deadline = last_end + 120.0  # the injector is late only by restarts (each ≤ 30 s)
        while injector.is_alive():
            injector.join(0.5)
            if self.rec.now() > deadline:
                self.halt.set()
                raise SoakError("the fault schedule did not finish in time")
        if errors:
            raise errors[0]
        # The last fault has healed: the brokers stop reporting at once, so that what follows
        # measures how long the cluster takes to repair, from the last heal.
        self.generating.clear()
        gen.join(5.0)
        for node in self.nodes.values():
            if not node.up:
                raise SoakError(f"{node.name} is down at quiesce")
        self.rec.add("quiesce")
        quiesced = time.monotonic()
        while time.monotonic() - quiesced < opts.bound:
            with self.rec_lock():
                if self.live.converged():
                    break
            time.sleep(0.1)
        statuses = {n.name: n.status() for n in self.nodes.values()}
        self.rec.add("end", data={"status": statuses})
        self.halt.set()
        codes = {n.name: n.stop_gracefully() for n in self.nodes.values()}
        for node in self.nodes.values():
            self.rec.add("rss", node.name, node.inc, {"peak_kib": node.peak_kib})
        return statuses, codes

    def _start_all(self, errors: list[BaseException]) -> None:
        """Start every node at once (each waits for its own ready)."""

        def start(node: SoakNode) -> None:
            try:
                node.start()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(n,), daemon=True)
                   for n in self.nodes.values()]  # fmt: skip
        for th in threads:
            th.start()
        for th in threads:
            th.join(READY_TIMEOUT + 5.0)
        if errors:
            raise errors[0]
        if not all(n.up for n in self.nodes.values()):
            raise SoakError("not every node started")

    @contextlib.contextmanager
    def rec_lock(self) -> Iterator[None]:
        with self.rec.lock:
            yield

    def close(self) -> None:
        self.halt.set()
        self.generating.clear()
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.signal(signal.SIGCONT)
            node.force_close()
        if self.network is not None:
            self.network.close()
        self.rec.close()


def run(opts: Options) -> Outcome:
    """One soak run; raises SoakError when the run itself cannot go on (not a violation)."""
    run_dir = opts.workdir / f"nvsoak-{os.getpid()}-seed{opts.seed}-{int(time.time())}"
    run_dir.mkdir(parents=True)
    soak = Soak(opts, run_dir)
    try:
        schedule = soak.setup()
        assert soak.network is not None
        opts.log(format_schedule(opts.seed, schedule))
        opts.log(f"network: {soak.network.kind}; limits via {soak.limits.how}; run dir {run_dir}")
        if opts.upgrade is not None:
            up = opts.upgrade
            plan = ", ".join(f"{name} at {at:.1f}s" for at, name in
                             up.times(soak.names, opts.seconds))  # fmt: skip
            opts.log(f"rolling: every node starts on {up.first_name}, restarted on "
                     f"{up.then_name}: {plan}")  # fmt: skip
        statuses, codes = soak.run(schedule)
    finally:
        soak.close()
    report = check(read_history(soak.history), opts.bound)
    return Outcome(report, schedule, run_dir, soak.history, statuses, codes, soak.limits.how,
                   soak.network.kind if soak.network else "none",
                   soak.upgrade_exits)  # fmt: skip
