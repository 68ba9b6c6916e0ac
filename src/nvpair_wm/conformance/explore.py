"""Seeded exploration: random scenarios, judged by the model, shrunk when they fail.

A scenario is a list of steps (plain JSON): events and removals from the broker or from a
peer (alone or in a batch, as notifications or requests, with a contract-version header),
``nodes:update``, peers going down, coming back or restarting empty, pins removed and restored,
a restart of the implementation, and checkpoints of what every peer received. The model
(:mod:`nvpair_wm.conformance.model`) turns it into one behaviour-vector group, whose
expectations are what the model decides, and the kit's runner runs that group against the
implementation in both roles at once (its broker, a client of its endpoint, its peers).

A failing scenario is shrunk by delta debugging (remove chunks of steps, keep the removal when
the smaller scenario still fails; then each step alone), written as a vector file in the
documented format and printed with the command that replays it. Delta debugging rather than
Hypothesis: the kit runs from the installed wheel, whose dependencies stay those of the daemon,
and a shrunk scenario is a vector file, replayed by the runner with no generator state at all.
Generation is ``random.Random(seed)``: the same seed gives the same scenarios on any machine.
"""

from __future__ import annotations

import functools
import json
import random
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nvpair_wm.conformance import outcomes, vectors
from nvpair_wm.conformance.model import STATE_OF, Model

PEERS: Final = {"p1": ["h2"], "p2": ["http/1.1"]}
METHODS: Final = sorted(STATE_OF)
IDS: Final = ("w1", "w2")  # few: runs, removals and seqs meet on the same workloads
VERSIONS: Final = (None, None, None, "1.2.0", "1.9.3", "1.0.0+build.7", "2.0.0", "v1")
CONFIG: Final = {
    "shutdown_grace": 1.0,  # a restart with a peer down does not wait out the default 5 s
    "broadcast": {
        "retry_base": 0.02,
        "retry_max_delay": 0.2,
        "min_reconnect_interval": 0.05,
        "reconcile_interval": 0.1,
    },
}
STARTUP: Final = [
    {
        "equal": {"/jsonrpc": "2.0", "/method": "ready"},
        "types": {"/params/version": "string", "/params/contractVersion": "string"},
        "absent": ["/id"],
    }
]
Step = dict[str, Any]


# -- generating ---------------------------------------------------------------------------------


def _runs(origin: str) -> tuple[str, str]:
    return f"{origin}-ra", f"{origin}-rb"  # runIds reused across ids, ids across runs


def _event(rng: random.Random, origin: str) -> Step:
    return {
        "op": "event",
        "method": rng.choice(METHODS),
        "origin": origin,
        "run": rng.choice(_runs(origin)),
        "id": rng.choice(IDS),
        "seq": rng.randint(1, 4),  # duplicates, stale and future seqs
        "request": rng.random() < 0.4,
        "shape": rng.choice(["plain", "plain", "extra", "nulls", "wrong-state"]),
    }


def _removal(rng: random.Random, origin: str) -> Step:
    return {
        "op": "remove",
        "origin": origin,
        "id": rng.choice(IDS),
        "run": rng.choice([None, *_runs(origin)]),  # whole and narrowed removals
        "request": rng.random() < 0.4,
    }


def _item(rng: random.Random, origin: str) -> Step:
    return _removal(rng, origin) if rng.random() < 0.25 else _event(rng, origin)


def scenario(rng: random.Random, length: int = 28) -> list[Step]:
    """One random scenario. It starts by announcing both peers; a peer that is down comes back
    and one unpinned is pinned again at a later peer step; the broker announces the peers again
    after a restart of the implementation (as the contract asks of it); and it ends with every
    peer back, pinned and announced, so that the last check sees their snapshots."""
    steps: list[Step] = [{"op": "nodes", "peers": sorted(PEERS)}]
    down: set[str] = set()
    unpinned: set[str] = set()
    announced = set(PEERS)
    for _ in range(length):
        roll = rng.random()
        peer = rng.choice(sorted(PEERS))
        if roll < 0.35:
            step = _item(rng, "subject")
            step["by"] = "broker"
        elif roll < 0.6:
            step = _item(rng, peer)
            step.update(by=peer, version=rng.choice(VERSIONS), proto=rng.choice(PEERS[peer]))
        elif roll < 0.68:
            n = rng.randint(2, 4)
            by = rng.choice(["broker", peer])
            origin = "subject" if by == "broker" else by
            step = {"op": "batch", "by": by, "items": [_item(rng, origin) for _ in range(n)]}
            if by != "broker":
                step.update(version=rng.choice(VERSIONS[:5]), proto=rng.choice(PEERS[peer]))
        elif roll < 0.76:
            op = "up" if peer in down else rng.choice(["down", "down", "peer-restart"])
            if op == "down":
                down.add(peer)
            else:
                down.discard(peer)
            step = {"op": op, "peer": peer}
        elif roll < 0.8:
            op = "pin" if peer in unpinned else "unpin"
            if op == "unpin":
                unpinned.add(peer)
            else:
                unpinned.discard(peer)
            step = {"op": op, "peer": peer}
        elif roll < 0.84:
            announced = set(rng.sample(sorted(PEERS), rng.randint(0, 2)))
            step = {"op": "nodes", "peers": sorted(announced)}
        elif roll < 0.87:
            steps.append({"op": "restart"})
            announced = set(PEERS)
            step = {"op": "nodes", "peers": sorted(PEERS)}
        else:
            step = {"op": "check"}
        steps.append(step)
    steps += [{"op": "up", "peer": p} for p in sorted(down)]
    steps += [{"op": "pin", "peer": p} for p in sorted(unpinned)]
    if announced != set(PEERS):
        steps.append({"op": "nodes", "peers": sorted(PEERS)})
    return steps


# -- the scenario as a vector group, judged by the model ---------------------------------------


def _info(step: Step) -> dict[str, Any]:
    state = STATE_OF[step["method"]]
    info: dict[str, Any] = {
        "id": step["id"],
        "model": "llama-3.1-8b",
        "engine": "vllm",
        "runId": step["run"],
        "state": "queued" if step["shape"] == "wrong-state" else state,
        "originatedFrom": step["origin"],
        "createdAt": 1764690000000,
        "startedAt": None if state == "queued" else 1764690001000 + step["seq"],
        "completedAt": None,
        "error": None,
        "seq": step["seq"],
    }
    if step["shape"] == "extra":
        info["extra"] = {"nested": [step["seq"]]}  # an unknown member: dropped on relay
    if step["shape"] == "nulls":
        info["requesterId"] = None  # null stays null
        info["scheduledOn"] = "subject"
    return info


def _frame(step: Step, rid: int | None) -> dict[str, Any]:
    if step["op"] == "event":
        frame: dict[str, Any] = {
            "jsonrpc": "2.0",
            "method": step["method"],
            "params": {"workloadInfo": _info(step)},
        }
    else:
        params = {"workloadId": step["id"], "originatedFrom": step["origin"]}
        if step["run"] is not None:
            params["runId"] = step["run"]
        frame = {"jsonrpc": "2.0", "method": "workloads:remove", "params": params}
    if step.get("request") and rid is not None:
        frame["id"] = rid
    return frame


def group_of(steps: Sequence[Step], name: str) -> dict[str, Any]:
    """The behaviour-vector group a scenario is, with the model's expectations."""
    m = Model()
    cases: list[dict[str, Any]] = []

    def check(label: str) -> None:
        arrivals = {p: outcomes.arrivals(m.take_deliveries(p)) for p in PEERS}
        cases.append({"name": label, "arrivals": arrivals, "within": 5})

    for i, step in enumerate(steps):
        label = f"{i:02d}-{step['op']}"
        op = step["op"]
        if op in ("event", "remove", "batch"):
            items = step["items"] if op == "batch" else [step]
            frames: Any = [_frame(s, 100 * i + k) for k, s in enumerate(items)]
            if op != "batch":
                frames = frames[0]
            data = vectors.encode(frames)
            if step["by"] == "broker":
                answers = m.broker_bytes(data + b"\n")
                expected = outcomes.local_expect(answers)
                cases.append({"name": label, "local": [{"frame": frames}], "expect": expected})
            else:
                version = step.get("version")
                answer = m.peer_request(step["by"], data, version=version)
                headers = {"content-type": "application/json"}
                if version is not None:
                    headers["nvpair-contract-version"] = version
                case: dict[str, Any] = {
                    "name": label,
                    "http": {
                        "client": step["by"],
                        "protocols": [step["proto"]],
                        "headers": headers,
                        "body": {"frame": frames},
                    },
                    "response": outcomes.http_response(answer),
                    "broker": outcomes.broker_lines(answer),
                }
                if answer.broker_may:
                    case["brokerAllowed"] = [{"exact": x} for x in answer.broker_may]
                cases.append(case)
        elif op == "nodes":
            m.nodes([{"nodeId": p} for p in step["peers"]])
            nodes = [{"$record": p} for p in [*step["peers"], "subject"]]
            frame = {
                "jsonrpc": "2.0",
                "method": "nodes:update",
                "params": {"nodes": nodes},
                "id": i,
            }
            cases.append(
                {
                    "name": label,
                    "local": [{"frame": frame}],
                    "expect": [
                        {"exact": {"jsonrpc": "2.0", "id": i, "result": {"outcome": "applied"}}}
                    ],
                }
            )
        elif op in ("down", "up", "peer-restart"):
            {"down": m.peer_down, "up": m.peer_up, "peer-restart": m.peer_restarted}[op](
                step["peer"]
            )
            action = "restart" if op == "peer-restart" else op
            cases.append({"name": label, "peer": step["peer"], "action": action})
        elif op in ("unpin", "pin"):
            m.pin(step["peer"], op == "pin")
            cases.append({"name": label, "control": op, "member": step["peer"]})
        elif op == "restart":
            m.restart()
            cases.append({"name": label, "control": "restart"})
        else:
            check(label)
    check("end")
    return {
        "group": name,
        "description": "a scenario of the seeded exploration, expectations from the model",
        "scenario": list(steps),
        "config": CONFIG,
        "startup": STARTUP,
        "peers": [{"name": p, "protocols": protos} for p, protos in PEERS.items()],
        "cases": cases,
    }


# -- running, shrinking, replaying --------------------------------------------------------------

Judge = Callable[[dict[str, Any]], list[str]]  # a group -> the problems of its failed cases


@dataclass(frozen=True, slots=True)
class Failure:
    seed: int
    index: int
    steps: list[Step]
    problems: list[str]
    path: Path
    group: str


def shrink(steps: list[Step], fails: Callable[[list[Step]], bool]) -> list[Step]:
    """Delta debugging (ddmin): the smallest sublist found that still fails."""
    chunks = 2
    while len(steps) >= 2:
        size = max(1, len(steps) // chunks)
        for start in range(0, len(steps), size):
            candidate = steps[:start] + steps[start + size :]
            if candidate and fails(candidate):
                steps = candidate
                chunks = max(chunks - 1, 2)
                break
        else:
            if size == 1:
                break
            chunks = min(len(steps), chunks * 2)
    return steps


def explore(
    judge: Judge,
    *,
    seed: int,
    scenarios: int,
    out_dir: Path,
    on_scenario: Callable[[int, list[str], float], None] | None = None,
    shrink_failures: bool = True,
) -> list[Failure]:
    """Run ``scenarios`` seeded scenarios until one fails; shrink it, write it and return it
    (one bug usually fails many scenarios: the first, shrunk, is the one to read; stopping
    there keeps a failing run short, as a mutation tool's test command wants)."""
    rng = random.Random(seed)
    failures: list[Failure] = []
    for index in range(scenarios):
        steps = scenario(rng)
        name = f"explore-{seed}-{index}"
        started = time.monotonic()
        problems = judge(group_of(steps, name))
        if on_scenario is not None:
            on_scenario(index, problems, time.monotonic() - started)
        if not problems:
            continue
        if shrink_failures:
            steps = shrink(steps, functools.partial(_fails, judge, name))
            problems = judge(group_of(steps, name)) or problems
        path = write(group_of(steps, name), out_dir)
        failures.append(Failure(seed, index, steps, problems, path, name))
        break
    return failures


def _fails(judge: Judge, name: str, steps: list[Step]) -> bool:
    return bool(judge(group_of(steps, name)))


def write(group: dict[str, Any], out_dir: Path) -> Path:
    """A failing scenario as a vector file of its own (one group), in the documented format."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{group['group']}.json"
    path.write_text(json.dumps([group], indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def replay_command(prog: str, failure: Failure, command: Sequence[str]) -> str:
    """The one command that replays a written failure."""
    args = [prog, "--vectors", str(failure.path.parent), "--only", failure.group, "--", *command]
    return shlex.join(args)
