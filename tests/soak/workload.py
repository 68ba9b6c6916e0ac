"""The broker model of one node: what it reports, and what its node has acknowledged.

Each broker is the source of truth for the workloads that entered the cluster on its node. It
reports their lifecycle as JSON-RPC *requests* (so each report is acknowledged by the node's
response), at a seeded random pace:

* submit a workload (``queued``, seq 1); ids count from 1 per run and restart at 1 when the
  broker's proxy "restarts" (a new ``runId`` every 150 to 400 workloads, about once a minute),
  as the contract says real engine facades do, so the same id recurs across runs (a tombstone
  remembers the last ``MAX_TOMB_RUNS`` = 64 runs of an id: a proxy restarting faster than that
  within a tombstone's TTL is out of the contract's reach, and the soak's first version, with a
  new run every few seconds, showed it);
* start a queued one on a node (``running``, ``scheduledOn``);
* requeue a running one (``workload:submitted`` again, ``queued``) and start it again, half the
  time on a node it already ran on: events that revisit a placement;
* complete, fail (``error`` set) or cancel it;
* remove a finished (or, rarely, a live) one, with ``runId`` or, when (originatedFrom, id)
  names one run only, without.

The number of workloads a broker holds is capped (``max_live``), so a long run stays bounded.
After its node restarts, the broker re-reports what the node never acknowledged (or, with
``resend="live"``, the newest state of every workload it holds, and unacknowledged removals).

**Multi-path** (``multipath=True``, the spec's picture, issue 24): a workload's start, requeue
and end are reported by the broker of the node it is scheduled on (``scheduledOn``), which is
another node than its entry node (``originatedFrom``) for most workloads; its submission,
cancellation and removal by its entry node's broker. The model of the entry node still owns the
workload (its seq, its state): :meth:`BrokerModel.step_to` says which node's channel carries
each report, and chooses only among the nodes that are up. Requests keep the owner's id prefix,
so an answer read on any channel is credited to the model that issued it.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = ["STATE_METHOD", "BrokerModel"]

STATE_METHOD: Final = {
    "queued": "workload:submitted",
    "running": "workload:started",
    "completed": "workload:completed",
    "failed": "workload:errored",
    "cancelled": "workload:cancelled",
}
TERMINAL: Final = ("completed", "failed", "cancelled")
MODELS: Final = ("llama-3.1-8b-instruct", "qwen2.5-7b", "mistral-7b-v0.3")
ENGINES: Final = ("vllm", "sglang", "llama.cpp")
EPOCH_MS: Final = 1_764_690_000_000

Resend = Literal["unacked", "live"]


@dataclass
class _Workload:
    info: dict[str, Any]
    placements: list[str] = field(default_factory=list)
    reporter: str = ""  # the node whose channel carried its newest report (multi-path)


class BrokerModel:
    def __init__(
        self,
        origin: str,
        nodes: Sequence[str],
        rng: random.Random,
        *,
        max_live: int = 150,
        run_length: tuple[int, int] = (150, 400),
    ) -> None:
        self.origin = origin
        self.nodes = list(nodes)
        self.rng = rng
        self.max_live = max_live
        self.run_length = run_length
        self.workloads: dict[tuple[str, str], _Workload] = {}  # (runId, id) → newest
        self.acked: dict[tuple[str, str], float] = {}  # → highest acknowledged seq (inf: removal)
        self.unacked_removals: dict[tuple[str, str], dict[str, Any]] = {}
        self.ids_seen: dict[str, set[str]] = {}  # id → runs that used it (for runId-less removal)
        self._runs = itertools.count(1)
        self._rids = itertools.count(1)
        self.in_flight: dict[str, tuple[tuple[str, str], float]] = {}  # request id → what
        self.via: dict[str, str] = {}  # request id → the node whose channel carries it
        self._new_run()

    def _new_run(self) -> None:
        self.run_id = f"run-{self.origin}-{next(self._runs)}"
        self._ids = itertools.count(1)
        self._run_left = self.rng.randint(*self.run_length)

    # -- frames ---------------------------------------------------------------------------------

    def _request(self, method: str, params: dict[str, Any], what: tuple[str, str],
                 seq: float) -> dict[str, Any]:  # fmt: skip
        rid = f"{self.origin}-{next(self._rids)}"
        self.in_flight[rid] = (what, seq)
        self.via[rid] = self.origin  # its own node's channel, unless step_to says otherwise
        return {"jsonrpc": "2.0", "method": method, "params": params, "id": rid}

    def _event(self, w: _Workload) -> dict[str, Any]:
        info = w.info
        key = (info["runId"], info["id"])
        return self._request(
            STATE_METHOD[info["state"]], {"workloadInfo": dict(info)}, key, info["seq"]
        )

    def acknowledged(self, rid: Any) -> bool:
        """The node answered request ``rid`` (any outcome: applied, duplicate or stale)."""
        self.via.pop(str(rid), None)
        entry = self.in_flight.pop(str(rid), None)
        if entry is None:
            return False
        key, seq = entry
        if seq > self.acked.get(key, 0):
            self.acked[key] = seq
        if seq == float("inf"):
            self.unacked_removals.pop(key, None)
        return True

    def lost_in_flight(self, node: str | None = None) -> None:
        """The node died: requests it did not answer are unacknowledged (resend decides).
        ``node``: only those sent through that node's channel (multi-path)."""
        if node is None:
            self.in_flight.clear()
            self.via.clear()
            return
        for rid in [r for r, n in self.via.items() if n == node]:
            self.in_flight.pop(rid, None)
            del self.via[rid]

    # -- the workload ---------------------------------------------------------------------------

    def _now_ms(self, now: float) -> int:
        return EPOCH_MS + int(now * 1000)

    def _advance(self, w: _Workload, state: str, now: float, **changes: Any) -> dict[str, Any]:
        info = w.info
        info["state"] = state
        info["seq"] += 1
        info.update(changes)
        return self._event(w)

    def submit(self, now: float) -> dict[str, Any]:
        if self._run_left <= 0:
            self._new_run()
        self._run_left -= 1
        wid = str(next(self._ids))
        info: dict[str, Any] = {
            "id": wid,
            "model": self.rng.choice(MODELS),
            "engine": self.rng.choice(ENGINES),
            "runId": self.run_id,
            "state": "queued",
            "originatedFrom": self.origin,
            "createdAt": self._now_ms(now),
            "startedAt": None,
            "completedAt": None,
            "error": None,
            "seq": 1,
        }
        w = _Workload(info, reporter=self.origin)
        self.workloads[(self.run_id, wid)] = w
        self.ids_seen.setdefault(wid, set()).add(self.run_id)
        return self._event(w)

    def step(self, now: float) -> dict[str, Any]:
        """One more report, chosen at random among what the current state allows."""
        by_state: dict[str, list[_Workload]] = {}
        for w in self.workloads.values():
            by_state.setdefault(w.info["state"], []).append(w)
        queued = by_state.get("queued", [])
        running = by_state.get("running", [])
        done = [w for s in TERMINAL for w in by_state.get(s, [])]
        choices: list[tuple[str, float]] = []
        if len(self.workloads) < self.max_live:
            choices.append(("submit", 3.0))
        if queued:
            choices.append(("start", 3.0))
        if running:
            choices += [("requeue", 0.7), ("finish", 3.0)]
        if queued or running:
            choices.append(("cancel", 0.4))
        if done:
            choices.append(("remove", 2.0 + 4.0 * (len(self.workloads) >= self.max_live)))
        if len(self.workloads) >= self.max_live and (queued or running):
            choices.append(("remove-live", 0.5))
        action = self.rng.choices([c for c, _ in choices], [w for _, w in choices])[0]
        rng = self.rng
        ms = self._now_ms(now)
        if action == "submit":
            return self.submit(now)
        if action == "start":
            w = rng.choice(queued)
            if w.placements and rng.random() < 0.5:
                node = rng.choice(w.placements)  # back where it ran before
            else:
                node = rng.choice(self.nodes)
            w.placements.append(node)
            return self._advance(w, "running", now, scheduledOn=node, startedAt=ms)
        if action == "requeue":
            return self._advance(rng.choice(running), "queued", now, startedAt=None)
        if action == "finish":
            w = rng.choice(running)
            if rng.random() < 0.8:
                return self._advance(w, "completed", now, completedAt=ms)
            return self._advance(w, "failed", now, completedAt=ms, error="CUDA out of memory")
        if action == "cancel":
            return self._advance(rng.choice(queued + running), "cancelled", now, completedAt=ms)
        pool = done if action == "remove" else queued + running
        return self.remove(rng.choice(pool))

    def remove(self, w: _Workload) -> dict[str, Any]:
        info = w.info
        key = (info["runId"], info["id"])
        del self.workloads[key]
        params: dict[str, Any] = {"workloadId": info["id"], "originatedFrom": self.origin}
        if len(self.ids_seen[info["id"]]) > 1 or self.rng.random() < 0.6:
            params["runId"] = info["runId"]
        self.unacked_removals[key] = params
        return self._request("workloads:remove", params, key, float("inf"))

    def burst(self, count: int, now: float) -> list[dict[str, Any]]:
        """``count`` new workloads at once (the overflow fault), within the cap."""
        room = max(0, self.max_live * 2 - len(self.workloads))
        return [self.submit(now) for _ in range(min(count, room))]

    def resend(self, policy: Resend) -> list[dict[str, Any]]:
        """What to re-report after the node restarted and said ``ready``."""
        out = []
        for key, w in self.workloads.items():
            if policy == "live" or self.acked.get(key, 0) < w.info["seq"]:
                out.append(self._event(w))
        for key, params in list(self.unacked_removals.items()):
            out.append(self._request("workloads:remove", params, key, float("inf")))
        return out

    # -- multi-path ------------------------------------------------------------------------------

    def owns(self, rid: Any) -> bool:
        """Whether request ``rid`` was issued by this model (its id prefix)."""
        return str(rid).rsplit("-", 1)[0] == self.origin

    def _via(
        self, frame: dict[str, Any], node: str, w: _Workload | None = None
    ) -> tuple[str, dict[str, Any]]:
        self.via[str(frame["id"])] = node
        if w is not None:
            w.reporter = node
        return node, frame

    def step_to(self, now: float, up: set[str]) -> tuple[str, dict[str, Any]] | None:
        """One more report, multi-path: (the node whose channel carries it, the frame), or None
        when nothing can be reported now (this node is down and no runner of its workloads is
        up). A start picks a node that is up; a running workload moves on through its runner."""
        origin_up = self.origin in up
        by_state: dict[str, list[_Workload]] = {}
        for w in self.workloads.values():
            by_state.setdefault(w.info["state"], []).append(w)
        queued = by_state.get("queued", [])
        running = [w for w in by_state.get("running", []) if w.info.get("scheduledOn") in up]
        done = [w for s in TERMINAL for w in by_state.get(s, [])]
        choices: list[tuple[str, float]] = []
        if origin_up and len(self.workloads) < self.max_live:
            choices.append(("submit", 3.0))
        if queued and up:
            choices.append(("start", 3.0))
        if running:
            choices += [("requeue", 0.7), ("finish", 3.0)]
        if origin_up and (queued or by_state.get("running")):
            choices.append(("cancel", 0.4))
        if origin_up and done:
            choices.append(("remove", 2.0 + 4.0 * (len(self.workloads) >= self.max_live)))
        if origin_up and len(self.workloads) >= self.max_live and (queued or running):
            choices.append(("remove-live", 0.5))
        if not choices:
            return None
        action = self.rng.choices([c for c, _ in choices], [w for _, w in choices])[0]
        rng = self.rng
        ms = self._now_ms(now)
        if action == "submit":
            return self.origin, self.submit(now)
        if action == "start":
            w = rng.choice(queued)
            here = sorted(up)
            # Mostly on another node than its entry node: the spec's multi-path workload.
            others = [n for n in here if n != self.origin]
            if w.placements and rng.random() < 0.3 and w.placements[-1] in up:
                node = w.placements[-1]  # back where it ran before
            elif others and rng.random() < 0.75:
                node = rng.choice(others)
            else:
                node = rng.choice(here)
            w.placements.append(node)
            frame = self._advance(w, "running", now, scheduledOn=node, startedAt=ms)
            return self._via(frame, node, w)
        if action == "requeue":
            w = rng.choice(running)
            runner = w.info["scheduledOn"]
            return self._via(self._advance(w, "queued", now, startedAt=None), runner, w)
        if action == "finish":
            w = rng.choice(running)
            runner = w.info["scheduledOn"]
            if rng.random() < 0.8:
                frame = self._advance(w, "completed", now, completedAt=ms)
            else:
                frame = self._advance(w, "failed", now, completedAt=ms, error="CUDA out of memory")
            return self._via(frame, runner, w)
        if action == "cancel":
            w = rng.choice(queued + by_state.get("running", []))
            frame = self._advance(w, "cancelled", now, completedAt=ms)
            return self._via(frame, self.origin, w)
        pool = done if action == "remove" else queued + running
        return self._via(self.remove(rng.choice(pool)), self.origin)

    def resend_via(self, node: str, policy: Resend) -> list[dict[str, Any]]:
        """Multi-path: what to re-report through ``node``'s channel after it restarted: the
        workloads whose newest report it carried, and (its own broker) the removals."""
        out = []
        for key, w in self.workloads.items():
            if w.reporter != node:
                continue
            if policy == "live" or self.acked.get(key, 0) < w.info["seq"]:
                out.append(self._via(self._event(w), node)[1])
        if node == self.origin:
            for key, params in list(self.unacked_removals.items()):
                frame = self._request("workloads:remove", params, key, float("inf"))
                out.append(self._via(frame, node)[1])
        return out
