"""Deterministic, realistic lifecycle traffic, shared by every benchmark that feeds frames.

A mix a peer really sends: several producers (runIds) on several nodes, each workload going
submitted -> started -> completed / errored / cancelled (some cancelled while still queued), many
workloads in flight at once so their frames interleave, plus redeliveries (the same frame again
shortly after, as when an event arrives over two paths: duplicates) and events that arrive
late, as when paths reorder them (stale once a newer event of that workload got
through first). A few frames carry a field this version does not know (to be dropped), and the
optional fields vary: ``scheduledOn`` absent until started, ``requesterId`` absent, null or set.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

METHODS = (
    "workload:submitted",
    "workload:started",
    "workload:completed",
    "workload:errored",
    "workload:cancelled",
)
STATE = {
    "workload:submitted": "queued",
    "workload:started": "running",
    "workload:completed": "completed",
    "workload:errored": "failed",
    "workload:cancelled": "cancelled",
}
MODELS = ("llama-3.1-8b-instruct", "qwen2.5-14b-instruct", "mistral-7b-instruct-v0.3")
ENGINES = ("vllm", "sglang", "llama.cpp")
NODES = ("node-a", "node-b", "node-c", "node-d")
T0 = 1_764_690_000_000


@dataclass(frozen=True)
class Mix:
    duplicate_rate: float = 0.10  # redelivery of a recent frame
    late_rate: float = 0.03  # an event held back and delivered after newer ones (stale if so)
    unknown_field_rate: float = 0.05  # a field this version does not know
    in_flight: int = 64  # workloads interleaved at once
    producers: int = 4  # distinct runIds


# A JSON-RPC frame as json.loads would return it: JSON values are dynamic, hence Any.
Frame = dict[str, Any]


def _info(rng: random.Random, wl: dict[str, Any], method: str, seq: int, t: int) -> Frame:
    info: dict[str, object] = {
        "id": wl["id"],
        "model": wl["model"],
        "engine": wl["engine"],
        "runId": wl["runId"],
        "state": STATE[method],
        "originatedFrom": wl["origin"],
        "createdAt": wl["createdAt"],
        "startedAt": None,
        "completedAt": None,
        "error": None,
        "seq": seq,
    }
    if method != "workload:submitted" or seq > 1:
        info["scheduledOn"] = wl["scheduledOn"]
    if method not in ("workload:submitted",) and wl.get("startedAt") is not None:
        info["startedAt"] = wl["startedAt"]
    if method in ("workload:completed", "workload:errored", "workload:cancelled"):
        info["completedAt"] = t
    if method == "workload:errored":
        info["error"] = "CUDA out of memory. Tried to allocate 2.00 GiB"
    r = wl["requester"]
    if r != "absent":
        info["requesterId"] = r
    if rng.random() < wl["unknown_rate"]:
        info["traceId"] = f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01"
    return info


def _lifecycle(rng: random.Random) -> list[str]:
    r = rng.random()
    if r < 0.75:
        return ["workload:submitted", "workload:started", "workload:completed"]
    if r < 0.90:
        return ["workload:submitted", "workload:started", "workload:errored"]
    if r < 0.96:
        return ["workload:submitted", "workload:started", "workload:cancelled"]
    return ["workload:submitted", "workload:cancelled"]


def events(n: int, seed: int = 5, mix: Mix = Mix()) -> Iterator[Frame]:
    """``n`` lifecycle frames (as JSON-ready dicts), deterministic for a given seed."""
    rng = random.Random(seed)
    runs = [f"r-{rng.getrandbits(32):08x}" for _ in range(mix.producers)]
    counters = dict.fromkeys(runs, 0)
    active: list[dict[str, Any]] = []  # workloads in flight: JSON-ish fields plus steps/seq
    recent: list[Frame] = []  # frames already sent, for redeliveries
    held: list[tuple[int, Frame]] = []  # (release at step, frame): reordered deliveries
    t = T0
    step = 0
    while step < n:
        step += 1
        t += rng.randint(1, 20)
        if held and held[0][0] <= step:
            yield held.pop(0)[1]
            continue
        if recent and rng.random() < mix.duplicate_rate:
            yield recent[-rng.randint(1, min(len(recent), 32))]
            continue
        while len(active) < mix.in_flight:
            run = rng.choice(runs)
            counters[run] += 1
            active.append(
                {
                    "id": str(counters[run]),
                    "runId": run,
                    "model": rng.choice(MODELS),
                    "engine": rng.choice(ENGINES),
                    "origin": NODES[runs.index(run) % len(NODES)],
                    "scheduledOn": rng.choice(NODES),
                    "createdAt": t,
                    "requester": rng.choice(("absent", None, "user-42", "svc-batch")),
                    "unknown_rate": mix.unknown_field_rate,
                    "steps": _lifecycle(rng),
                    "seq": 0,
                }
            )
        i = rng.randrange(len(active))
        wl = active[i]
        method = wl["steps"][wl["seq"]]
        wl["seq"] += 1
        if method == "workload:started":
            wl["startedAt"] = t
        frame: Frame = {
            "jsonrpc": "2.0",
            "method": method,
            "params": {"workloadInfo": _info(rng, wl, method, wl["seq"], t)},
        }
        if wl["seq"] == len(wl["steps"]):
            active[i] = active[-1]
            active.pop()
        recent.append(frame)
        if len(recent) > 512:
            del recent[:256]
        if rng.random() < mix.late_rate:
            held.append((step + rng.randint(20, 400), frame))
            held.sort(key=lambda h: h[0])
            step -= 1  # not delivered yet: it will be, later
            continue
        yield frame
    # Whatever is still held back is never delivered (lost on that path): n frames exactly.


def corpus(n: int, seed: int = 5, mix: Mix = Mix()) -> list[bytes]:
    """``n`` frames as compact JSON text (no newline), as a peer would send them."""
    return [json.dumps(f, separators=(",", ":")).encode() for f in events(n, seed, mix)]


def ndjson_chunks(frames: list[bytes], chunk: int = 65_536) -> list[bytes]:
    """The frames as one newline-delimited stream, cut into reads of ``chunk`` bytes (a cut can
    fall anywhere, as with real reads)."""
    stream = b"\n".join(frames) + b"\n"
    return [stream[i : i + chunk] for i in range(0, len(stream), chunk)]


def describe(frames: list[bytes]) -> dict[str, object]:
    """What the corpus holds: methods, distinct workloads, and how many frames the dedup rule
    calls duplicate (same seq as the newest seen) or stale (lower)."""
    by_method: dict[str, int] = {}
    newest: dict[tuple[str, str], int] = {}
    dup = stale = unknown = 0
    for raw in frames:
        f = json.loads(raw)
        by_method[f["method"]] = by_method.get(f["method"], 0) + 1
        wi = f["params"]["workloadInfo"]
        k = (wi["runId"], wi["id"])
        if wi["seq"] == newest.get(k):
            dup += 1
        elif wi["seq"] < newest.get(k, 0):
            stale += 1
        newest[k] = max(newest.get(k, 0), wi["seq"])
        unknown += "traceId" in wi
    return {
        "frames": len(frames),
        "bytes_per_frame": sum(map(len, frames)) / max(1, len(frames)),
        "workloads": len(newest),
        "duplicates": dup,
        "stale": stale,
        "with_unknown_field": unknown,
        "by_method": dict(sorted(by_method.items())),
    }


_LINE = (
    '{"jsonrpc":"2.0","method":"%s","params":{"workloadInfo":{"id":"%d","model":"%s",'
    '"engine":"%s","runId":"%s","state":"%s","originatedFrom":"%s",%s"createdAt":%d,'
    '"startedAt":%s,"completedAt":%s,"error":%s,"seq":%d}}}'
)


_REMOVE = (
    '{"jsonrpc":"2.0","method":"workloads:remove","params":'
    '{"workloadId":"%d","originatedFrom":"%s","runId":"%s"}}'
)


def stream(
    n: int | None,
    seed: int = 5,
    *,
    in_flight: int = 64,
    duplicate_rate: float = 0.10,
    producers: int = 4,
    start_id: int = 0,
    remove_rate: float = 0.0,
) -> Iterator[tuple[bytes, bool]]:
    """A fast, endless (``n=None``) stream of lifecycle frames as compact JSON bytes, for the
    long runs (memory soak, channels): ``(frame, new_workload)`` pairs. The same lifecycles as
    :func:`events` (without unknown fields or reordering), built from a template so that
    generating a frame costs far less than processing it, and nothing is held in memory.
    ``remove_rate``: the share of finished workloads that are then removed (workloads:remove,
    with runId, a few frames later), so tombstones come and go too."""
    rng = random.Random(seed)
    runs = [f"r-{rng.getrandbits(32):08x}" for _ in range(producers)]
    nodes = [NODES[i % len(NODES)] for i in range(producers)]
    next_id = start_id
    # [id, run, origin, model, engine, scheduledOn, createdAt, startedAt, steps, seq]: a list,
    # not a dataclass, to keep generation cheap; mixed types, hence Any.
    active: list[list[Any]] = []
    recent: list[bytes] = []
    removals: list[bytes] = []
    t = T0
    count = 0
    while n is None or count < n:
        count += 1
        t += 3
        if removals and rng.random() < 0.5:
            yield removals.pop(0), False
            continue
        if recent and rng.random() < duplicate_rate:
            yield recent[rng.randrange(len(recent))], False
            continue
        new = False
        if len(active) < in_flight:
            next_id += 1
            p = next_id % producers
            # [id, run, origin, model, engine, scheduledOn, createdAt, startedAt, steps, seq]
            active.append(
                [
                    next_id,
                    runs[p],
                    nodes[p],
                    MODELS[next_id % 3],
                    ENGINES[next_id % 3],
                    NODES[next_id % 4],
                    t,
                    "null",
                    _lifecycle(rng),
                    0,
                ]
            )
            i = len(active) - 1
            new = True
        else:
            i = rng.randrange(len(active))
        wl = active[i]
        method = wl[8][wl[9]]
        wl[9] += 1
        if method == "workload:started":
            wl[7] = str(t)
        done = method in ("workload:completed", "workload:errored", "workload:cancelled")
        line = (
            _LINE
            % (
                method,
                wl[0],
                wl[3],
                wl[4],
                wl[1],
                STATE[method],
                wl[2],
                "" if method == "workload:submitted" else f'"scheduledOn":"{wl[5]}",',
                wl[6],
                wl[7],
                t if done else "null",
                '"CUDA out of memory"' if method == "workload:errored" else "null",
                wl[9],
            )
        ).encode()
        if wl[9] == len(wl[8]):
            active[i] = active[-1]
            active.pop()
            if remove_rate and rng.random() < remove_rate:
                removals.append((_REMOVE % (wl[0], wl[2], wl[1])).encode())
        if len(recent) < 64:
            recent.append(line)
        else:
            recent[rng.randrange(64)] = line
        yield line, new


# Unique workloads (phase 2: processes and servers, where every frame must be applied)

ID_DIGITS = 12
_EVENT = (
    '{"jsonrpc":"2.0","method":"workload:%s","params":{"workloadInfo":{"id":"%%0%dd",'
    '"model":"%s","engine":"%s","runId":"%s","state":"%s","originatedFrom":"%s",%s'
    '"createdAt":1764690000000,"startedAt":%s,"completedAt":%s,"error":%s,"seq":%d}}}'
)
_KINDS = (  # method, state, scheduledOn, startedAt, completedAt, error, seq
    ("submitted", "queued", "", "null", "null", "null", 1),
    ("started", "running", '"scheduledOn":"node-c",', "1764690000250", "null", "null", 2),
    (
        "completed",
        "completed",
        '"scheduledOn":"node-c",',
        "1764690000250",
        "1764690004711",
        "null",
        3,
    ),
    (
        "errored",
        "failed",
        '"scheduledOn":"node-d",',
        "1764690000250",
        "1764690003012",
        '"CUDA out of memory. Tried to allocate 2.00 GiB"',
        3,
    ),
    ("cancelled", "cancelled", "", "null", "1764690000100", "null", 2),
)
_MODELS = ("llama-3.1-8b-instruct", "qwen2.5-14b-instruct", "mistral-7b-instruct-v0.3")
_ENGINES = ("vllm", "sglang", "llama.cpp")


def event_templates(origin: str = "node-b", run_id: str = "r-5f2c9a17") -> list[str]:
    """Five ``%``-templates (one per lifecycle method, ~320-380 bytes) taking one integer id.

    Each id is a new workload, so every frame is applied (nothing is a duplicate), whatever its
    method and seq: the receiver does the whole path (validate, dedup, translate, encode) for
    every frame."""
    return [
        _EVENT
        % (m, ID_DIGITS, _MODELS[i % 3], _ENGINES[i % 3], run_id, st, origin, sched, sa, ca, er, sq)
        for i, (m, st, sched, sa, ca, er, sq) in enumerate(_KINDS)
    ]


def event_line(templates: list[str], k: int) -> bytes:
    return (templates[k % len(templates)] % k).encode()


def event_batch_template(templates: list[str], n: int) -> str:
    """A JSON-RPC batch of ``n`` frames (methods in turn) taking ``n`` consecutive ids."""
    return "[" + ",".join(templates[j % len(templates)] for j in range(n)) + "]"
