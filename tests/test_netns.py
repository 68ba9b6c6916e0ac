"""Issue 4, "real separate hosts": three nvpair-wm nodes in their own network namespaces.

Topology (made per test, names unique per run, deleted in teardown whatever happens)::

    <prefix>-a  eth0 10.213.47.1/24 ─┐
    <prefix>-b  eth0 10.213.47.2/24 ─┼─ veth ─ br0 in <prefix>-br (a "switch")
    <prefix>-c  eth0 10.213.47.3/24 ─┘

The /24 exists only inside these namespaces: nothing is routed to or from the host. Every node
runs ``ip netns exec <ns> python -m nvpair_wm --cluster-dir ... --port 14320`` (the default port:
each node is its own host) with its broker played by the test over stdio, and is told about the
others with ``nodes:update`` records carrying the namespace addresses.

The scenario: events reported on every node converge; then node C's switch port goes down (a
partition) while events are reported on both sides; the port comes back up and every broker
converges to the same full view: every workload's newest state present, every field as
reported, no (runId, id, seq) delivered twice (coalescing may skip an intermediate state, never
repeat one), every removal delivered exactly once, nothing removed coming back. It runs
three times: over clean links; with ``tc netem loss 10% delay 20ms 5ms`` on both ends of every
veth (each path crosses two veths: about 19% loss and 40 ms each way); and with a token bucket
(``tbf rate 300kbit``, 4.5 kB queue) on both ends, whose queueing delay and tail drops impair
the links on kernels without netem (this CI's kernel has none and cannot load modules).

Skipped, with the failing command's own error text, where it cannot run: not root, no ``ip``,
``ip netns add`` or the veth/bridge set-up fails; an impaired variant also when the kernel lacks
its qdisc. Never passed without having run.

Waiting is on frames (a broker reads its node's stdout with a deadline), never fixed sleeps,
except the partition itself, which lasts PARTITION seconds on purpose.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import queue
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nvpair_wm.clusterdir import DEFAULT_PORT, cert_fingerprint, init_cluster
from tests.support.netns import (
    CMD_TIMEOUT,
    IMPAIRMENTS,
    Net,
    run_command,
)
from tests.support.wm_process import WmProcess

pytestmark = pytest.mark.netns

PREFIX = "nvwmtest"  # namespaces are f"{PREFIX}-{pid}-{n}-{role}"
PARTITION = 3.0  # seconds node C is cut off (at least; until the healthy side has delivered)
CONVERGE = 25.0  # seconds allowed for the brokers to converge after a change
_runs = itertools.count(1)

Key = tuple[str, str]  # (originatedFrom, id)


# ---------------------------------------------------------------------------------------------
# Namespaces
# ---------------------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_namespaces() -> None:
    """Namespaces of this test left behind by a run that was killed (its pid is gone)."""
    res = run_command("ip", "netns", "list")
    for line in res.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        ours = len(parts) == 4 and parts[0] == PREFIX and parts[1].isdigit()
        if ours and int(parts[1]) != os.getpid() and not _pid_alive(int(parts[1])):
            run_command("ip", "netns", "del", name)


def _check_prerequisites() -> None:
    if os.geteuid() != 0:
        pytest.skip(f"needs root to create network namespaces (euid {os.geteuid()})")
    if shutil.which("ip") is None:
        pytest.skip("`ip` (iproute2) not found on PATH: cannot create network namespaces")


# ---------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------


class NsNode:
    """One node in its namespace, on the default port of its own address, and its broker's
    inbox: every frame the node wrote to stdout, in order, in ``seen``."""

    def __init__(self, name: str, cluster_dir: Path, netns: str, address: str) -> None:
        self.name = name
        self.cluster_dir = cluster_dir
        self.netns = netns
        self.address = address
        self.fingerprint = cert_fingerprint((cluster_dir / "node.crt").read_bytes())
        self.proc: WmProcess | None = None
        self.seen: list[dict[str, Any]] = []

    @property
    def wm(self) -> WmProcess:
        assert self.proc is not None, f"{self.name} is not running"
        return self.proc

    def launch(self) -> None:
        args = ["--cluster-dir", str(self.cluster_dir), "--port", str(DEFAULT_PORT)]
        prefix = ("ip", "netns", "exec", self.netns)
        self.proc = WmProcess(*args, "--log-level", "debug", prefix=prefix)

    def await_ready(self) -> None:
        first = self.wm.recv()
        assert first["method"] == "ready", first
        assert self.status()["port"] == DEFAULT_PORT

    def send(self, frame: dict[str, Any]) -> None:
        self.wm.send_frame(frame)

    def status(self) -> Any:
        """manager:status; the notifications written before its response land in ``seen``."""
        return self.wm.request("manager:status", keep=self.seen)["result"]

    def drain(self) -> None:
        """Move every frame already written into ``seen`` (non-blocking)."""
        while True:
            try:
                self.seen.append(json.loads(self.wm.raw_lines.get_nowait()))
            except queue.Empty:
                return

    def wait_frame(self, timeout: float = CMD_TIMEOUT) -> bool:
        """Wait up to ``timeout`` for one more frame into ``seen``; False if none came."""
        try:
            self.seen.append(json.loads(self.wm.raw_lines.get(timeout=max(timeout, 0.0))))
        except queue.Empty:
            return False
        return True

    def upserts(self) -> list[dict[str, Any]]:
        return [
            f["params"]["workloadInfo"] for f in self.seen if f.get("method") == "workloads:upsert"
        ]

    def wait_upsert(self, wid: str, timeout: float = CMD_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not any(u["id"] == wid for u in self.upserts()):
            if not self.wait_frame(deadline - time.monotonic()):
                raise AssertionError(
                    f"{self.name}: no upsert of {wid} within {timeout}s; stderr tail:\n"
                    + "\n".join(self.wm.stderr_log[-25:])
                )

    def record(self) -> dict[str, Any]:
        return {
            "nodeId": self.name,
            "address": self.address,
            "port": DEFAULT_PORT,
            "fingerprint": self.fingerprint,
        }

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.__exit__(None, None, None)
            self.proc = None


# ---------------------------------------------------------------------------------------------
# The brokers' side: what was reported, and what each broker was told
# ---------------------------------------------------------------------------------------------

METHOD_STATE = {
    "workload:submitted": "queued",
    "workload:started": "running",
    "workload:completed": "completed",
    "workload:errored": "failed",
    "workload:cancelled": "cancelled",
}


class World:
    """Every event the brokers reported, and the view each broker must end up with."""

    def __init__(self, nodes: dict[str, NsNode]) -> None:
        self.nodes = nodes
        self.reported: dict[tuple[str, str, int], dict[str, Any]] = {}  # (origin, id, seq)
        self.newest: dict[Key, dict[str, Any]] = {}
        self.removed: set[Key] = set()
        self._ids = itertools.count(1)

    def report(self, node: NsNode, method: str, wid: str, seq: int) -> None:
        origin = node.name
        info: dict[str, Any] = {
            "id": wid,
            "model": "llama-3.1-8b-instruct",
            "engine": "vllm",
            "runId": f"run-{origin}",
            "state": METHOD_STATE[method],
            "originatedFrom": origin,
            "scheduledOn": origin,
            "createdAt": 1764690000000 + int(wid.rsplit("-", 1)[1]),
            "startedAt": None if seq == 1 else 1764690000500,
            "completedAt": 1764690001000 if seq >= 3 else None,
            "error": "OOM" if method == "workload:errored" else None,
            "seq": seq,
        }
        node.send({"jsonrpc": "2.0", "method": method, "params": {"workloadInfo": info}})
        self.reported[(origin, wid, seq)] = info
        self.newest[(origin, wid)] = info

    def submit(self, node: NsNode) -> str:
        wid = f"{node.name}-{next(self._ids)}"
        self.report(node, "workload:submitted", wid, 1)
        return wid

    def remove(self, node: NsNode, wid: str) -> None:
        frame = {
            "jsonrpc": "2.0",
            "method": "workloads:remove",
            "params": {"workloadId": wid, "originatedFrom": node.name},
        }
        node.send(frame)
        self.newest.pop((node.name, wid), None)
        self.removed.add((node.name, wid))

    def expected(self) -> dict[Key, tuple[str, int]]:
        return {k: (v["state"], v["seq"]) for k, v in self.newest.items()}

    def view(self, node: NsNode) -> dict[Key, tuple[str, int]]:
        """What ``node``'s broker believes: its own reports plus, in arrival order, what its
        node told it (a later frame of a workload wins only with a higher seq; a removal
        deletes; nothing comes back after a removal unless the node sends it)."""
        own = {k: (v["state"], v["seq"]) for k, v in self.newest.items() if k[0] == node.name}
        remote: dict[Key, tuple[str, int]] = {}
        for frame in node.seen:
            if frame.get("method") == "workloads:upsert":
                info = frame["params"]["workloadInfo"]
                key = (info["originatedFrom"], info["id"])
                if key not in remote or remote[key][1] < info["seq"]:
                    remote[key] = (info["state"], info["seq"])
            elif frame.get("method") == "workloads:remove":
                p = frame["params"]
                remote.pop((p["originatedFrom"], p["workloadId"]), None)
        return {**remote, **own}

    def wait_converged(self, timeout: float = CONVERGE) -> float:
        """Until every broker's view is the full expected view; returns the seconds taken."""
        start = time.monotonic()
        deadline = start + timeout
        expected = self.expected()
        for node in self.nodes.values():
            while True:
                node.drain()
                got = self.view(node)
                if got == expected:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = {k: v for k, v in expected.items() if got.get(k) != v}
                    extra = {k: v for k, v in got.items() if k not in expected}
                    raise AssertionError(
                        f"{node.name} did not converge within {timeout}s: wrong or missing "
                        f"{missing} (it has {[(k, got.get(k)) for k in missing]}), extra {extra}"
                        f"\npeers: {json.dumps(node.status()['peers'], indent=1)}\nstderr tail:\n"
                        + "\n".join(node.wm.stderr_log[-25:])
                    )
                node.wait_frame(left)
        return time.monotonic() - start

    def check_exactly_once(self) -> None:
        """Each broker got every remote (runId, id, seq) at most once, each exactly as it was
        reported, and every remote removal exactly once."""
        for node in self.nodes.values():
            node.status()  # a fence: everything written before the response is in `seen`
            upserts = node.upserts()
            counts = collections.Counter((u["runId"], u["id"], u["seq"]) for u in upserts)
            dups = {k: n for k, n in counts.items() if n > 1}
            assert not dups, f"{node.name}: duplicate upserts {dups}"
            for info in upserts:
                assert info["originatedFrom"] != node.name, f"{node.name}: echoed {info}"
                sent = self.reported[(info["originatedFrom"], info["id"], info["seq"])]
                assert info == sent, f"{node.name}: {info} != reported {sent}"
            removes = collections.Counter(
                (f["params"]["originatedFrom"], f["params"]["workloadId"])
                for f in node.seen
                if f.get("method") == "workloads:remove"
            )
            remote_removed = {k for k in self.removed if k[0] != node.name}
            assert set(removes) == remote_removed, f"{node.name}: removals {removes}"
            assert all(n == 1 for n in removes.values()), f"{node.name}: removals {removes}"


# ---------------------------------------------------------------------------------------------
# Fixture and test
# ---------------------------------------------------------------------------------------------

ROLES = ["a", "b", "c"]


@dataclass
class Hosts:
    net: Net
    nodes: dict[str, NsNode]  # role → node


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    _check_prerequisites()
    _remove_stale_namespaces()
    net = Net(f"{PREFIX}-{os.getpid()}-{next(_runs)}")
    nodes: dict[str, NsNode] = {}
    try:
        addresses = net.build(ROLES)
        dirs = init_cluster(tmp_path / "cluster", [f"node-{r}" for r in ROLES])
        for role in ROLES:
            name = f"node-{role}"
            nodes[role] = NsNode(name, dirs[name], net.ns(role), addresses[role])
        yield Hosts(net, nodes)
    finally:
        for node in nodes.values():
            node.kill()
        net.close()


@pytest.mark.timeout(45)
@pytest.mark.parametrize(
    "impaired", [None, "netem", "tbf"], ids=["clean-links", "netem-loss-delay", "tbf-delay-drops"]
)
def test_partition_heals_and_every_view_converges(hosts: Hosts, impaired: str | None) -> None:
    net, nodes = hosts.net, hosts.nodes
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    if impaired:
        net.impair(ROLES, impaired)  # skips, with tc's error text, where the kernel lacks it
    for node in nodes.values():
        node.launch()
    for node in nodes.values():
        node.await_ready()
    records = [n.record() for n in nodes.values()]
    for node in nodes.values():
        node.send({"jsonrpc": "2.0", "method": "nodes:update", "params": {"nodes": records}})
    world = World({n.name: n for n in nodes.values()})

    # 1. Events on every node, over the (impaired) links.
    ids: dict[str, list[str]] = {}
    for node in (a, b, c):
        ids[node.name] = [world.submit(node) for _ in range(4)]
        world.report(node, "workload:started", ids[node.name][0], 2)
        world.report(node, "workload:started", ids[node.name][1], 2)
        world.report(node, "workload:completed", ids[node.name][1], 3)
    took_first = world.wait_converged()

    # 2. Partition: C's switch port goes down; events are reported on both sides.
    net.link("c", up=False)
    cut_at = time.monotonic()
    try:
        for node in (a, b):
            mine = ids[node.name]
            world.report(node, "workload:completed", mine[0], 3)
            world.report(node, "workload:errored", mine[2], 2)
            mine.append(world.submit(node))
        world.remove(a, ids["node-a"][3])
        for _ in range(2):
            ids["node-c"].append(world.submit(c))
        world.report(c, "workload:cancelled", ids["node-c"][2], 2)
        world.remove(c, ids["node-c"][3])
        # The healthy side keeps working: A's newest event reaches B ...
        newest_a = world.newest[("node-a", ids["node-a"][-1])]
        b.wait_upsert(newest_a["id"])
        # ... and C is really cut off: no partition-time event crossed, either way.
        newest_c = world.newest[("node-c", ids["node-c"][-1])]
        for node, gone in ((c, newest_a), (a, newest_c), (b, newest_c)):
            node.drain()
            assert (gone["id"], 1) not in {(u["id"], u["seq"]) for u in node.upserts()}
        time.sleep(max(0.0, PARTITION - (time.monotonic() - cut_at)))  # the partition's length
    finally:
        net.link("c", up=True)
    healed_at = time.monotonic()

    # 3. Healed: every broker reaches the same full view, nothing lost, nothing twice.
    world.wait_converged()
    took_heal = time.monotonic() - healed_at
    world.check_exactly_once()
    views = [world.view(n) for n in nodes.values()]
    assert views[0] == views[1] == views[2] == world.expected()
    assert len(views[0]) == 3 * 4 + 2 + 2 - 2  # submitted, minus removed
    print(
        f"netns ({' '.join([impaired, *IMPAIRMENTS[impaired]]) if impaired else 'clean links'}): "
        "first "
        f"convergence {took_first:.2f}s, partition {healed_at - cut_at:.2f}s, "
        f"converged {took_heal:.2f}s after the heal"
        + (f"; {net.drops(ROLES)} packets dropped by the qdiscs" if impaired else "")
    )
