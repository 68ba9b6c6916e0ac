"""The contract as an executable model: what a workload manager must do, with no IO.

One :class:`Model` is one manager as the contract (``schema/README.md``) describes it, fed the
inputs a kit can make: lines from its broker (:meth:`Model.broker_line`), requests from named
peers with their ``nvpair-contract-version`` (:meth:`Model.peer_request`), membership and pin
changes (:meth:`Model.nodes`, :meth:`Model.pin`), peers going down, coming back or restarting
empty (:meth:`Model.peer_down`, :meth:`Model.peer_up`, :meth:`Model.peer_restarted`) and a
restart of the manager itself (:meth:`Model.restart`). It answers with what the broker and
every caller must get (:class:`Answer`), and keeps what every peer must be sent, and may be
sent, until a kit checks it (:meth:`Model.take_deliveries`).

Each rule of ``schema/README.md`` names the function here that states it, and each function
names its rule (the README's section titles, in quotes). The model decides
behaviour, not shapes: whether ``params`` fit a method's schema it asks a ``Validator`` (in
this repository, jsonschema over ``schema/``: ``nvpair_wm.conformance.schemacheck``); by
default it trusts them, which is what exploration needs (it only sends frames the schema
accepts). The freedoms the contract leaves are outputs too: a frame a peer *may* get
(:class:`Deliveries`), a line the broker *may* get (``Answer.broker_may``).

Identities: workloads are keyed by (``runId``, ``id``); tombstones by (``originatedFrom``,
``id``) and the runs they cover (``""``: every run). Times are not modelled: TTLs (10 minutes
and more) are far beyond any scenario a kit runs.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Final

from nvpair_wm_schema.contract import (
    CONTRACT_VERSION,
    FRAME_TOO_LARGE,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_REQUEST_ID_LENGTH,
    MAX_SAFE_INTEGER,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
)

from nvpair_wm.conformance.answers import ANY_PATH, Answer, Deliveries, Error, Validator, trust
from nvpair_wm.conformance.grammar import is_json_text

# Lifecycle method -> the state it sets (schema/README.md, method catalogue; WorkloadState).
STATE_OF: Final = {
    "workload:submitted": "queued",
    "workload:started": "running",
    "workload:completed": "completed",
    "workload:errored": "failed",
    "workload:cancelled": "cancelled",
}
METHOD_OF: Final = {state: method for method, state in STATE_OF.items()}
REMOVE: Final = "workloads:remove"
UPSERT: Final = "workloads:upsert"
PEER_METHODS: Final = frozenset({*STATE_OF, REMOVE})
BROKER_METHODS: Final = frozenset({*PEER_METHODS, "nodes:update", "manager:status"})
PARAMLESS: Final = frozenset({"manager:status"})
REQUEST_ONLY: Final = frozenset({"manager:status"})
# WorkloadInfo's properties: the allow-list of what leaves a manager (unknown members dropped).
INFO_FIELDS: Final = (
    "id", "model", "engine", "runId", "state", "originatedFrom", "scheduledOn", "createdAt",
    "startedAt", "completedAt", "error", "requesterId", "seq",
)  # fmt: skip
REMOVE_FIELDS: Final = ("workloadId", "originatedFrom", "runId")
MAX_DEPTH: Final = 64
MAX_BATCH: Final = 10_000
MAX_FRAME: Final = 1 << 20  # bytes of a line (without its LF) or of an HTTP body
PATH: Final = "/v1/workloads/events"
MAJOR: Final = CONTRACT_VERSION.split(".")[0]
_SEMVER: Final = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]+)?"
)


@dataclass(slots=True)
class _Workload:
    origin: str
    seq: int
    frame: dict[str, Any] | None  # the lifecycle frame, for one this manager originated
    resend: bool = False  # a peer's workload reloaded at a restart ("What a broker may rely on")


@dataclass(slots=True)
class _Peer:
    announced: bool = False
    pinned: bool = True
    up: bool = True
    out: Deliveries = field(default_factory=Deliveries)
    missed: set[Any] = field(default_factory=set)  # due when it was unpinned (see Model.pin)

    @property
    def receives(self) -> bool:
        return self.announced and self.pinned and self.up


# -- parsing: I-JSON and the nesting bound ----------------------------------------------------


class _Bad:
    """A value JSON text spells but I-JSON refuses (a number no double holds)."""


def parse(data: bytes) -> Any:
    """The JSON value of a line or body, or an :class:`Error` -32700 when it is not JSON text
    (schema/README.md, "Framing" and "JSON text is I-JSON"). Per-element faults (I-JSON, depth)
    are left for :func:`element_fault`, since in a batch they refuse only that element; so is
    invalid UTF-8 in a string, read as lone surrogates (outside any string it is not JSON)."""
    text = data.decode("utf-8", "surrogateescape")
    if text.startswith("\ufeff"):
        return Error(PARSE_ERROR)
    try:
        return _loads(text)
    except ValueError:
        return Error(PARSE_ERROR)
    except RecursionError:  # deeper than Python's parser goes: only such an element is refused
        if not is_json_text(text):  # the grammar first: no fault hides a syntax error
            return Error(PARSE_ERROR)
        blank = _STRING.sub(lambda m: "_" * len(m.group()), text).strip(" \t\r\n")
        depth = list(itertools.accumulate((c in "[{") - (c in "]}") for c in blank))
        if blank[:1] + blank[-1:] != "[]" or 0 in depth[:-1] or depth[-1]:
            return Error(PARSE_ERROR)  # not one array
        at = len(text) - len(text.lstrip(" \t\r\n"))
        cuts = [i for i, c in enumerate(blank) if c in ",]" and depth[i] == (c == ",")]
        elements = []
        for a, b in itertools.pairwise([0, *cuts]):
            try:
                elements.append(_loads(text[at + a + 1 : at + b]))
            except RecursionError:  # JSON text (checked above), nested too deep
                elements.append(_Bad())
        return elements


def _float(text: str) -> Any:
    value = float(text)
    return _Bad() if math.isinf(value) else value


_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)  # a JSON string
# NaN and Infinity, which Python's json takes, are not JSON text: int() refuses them (ValueError).
_loads: Final = functools.partial(json.loads, parse_constant=int, parse_float=_float)


def element_fault(value: Any, depth: int = 1) -> bool:
    """Whether one frame breaks I-JSON (a lone surrogate, a number no double holds, in any
    member, known or not) or nests deeper than 64 levels: rule "Nesting and I-JSON"."""
    if isinstance(value, _Bad):
        return True
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**1024:
        return True
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict | list):
        if depth > MAX_DEPTH:
            return True
        members = value.items() if isinstance(value, dict) else enumerate(value)
        return any(
            (isinstance(k, str) and element_fault(k)) or element_fault(v, depth + 1)
            for k, v in members
        )
    return False


def _integral(value: Any) -> Any:
    """Integers follow JSON Schema's data model: ``1.0`` is the integer 1 (rule "Integers")."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def is_request_id(value: Any) -> bool:
    """RequestId: null, a string of at most 256 characters, an integer within +-(2^53-1)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return len(value) <= MAX_REQUEST_ID_LENGTH
    return value is None or (isinstance(value, int) and abs(value) <= MAX_SAFE_INTEGER)


def check_version(header: str | None) -> int | None:
    """Rule "Versions on the wire": the HTTP status a request's ``nvpair-contract-version`` earns
    before its body is read (409 another major, 400 malformed), None when it is served (absent:
    this major; minor and patch skew are served)."""
    if header is None:
        return None
    match = _SEMVER.fullmatch(header.strip())
    if match is None:
        return 400
    return None if match.group(1) == MAJOR else 409


class Model:
    """One manager with a cluster directory (a journal), as the contract describes it."""

    def __init__(self, node_id: str = "subject", validator: Validator = trust) -> None:
        self.node_id = node_id
        self.validator = validator
        self.workloads: dict[tuple[str, str], _Workload] = {}
        self.tombs: dict[tuple[str, str], list[str]] = {}
        self.local_removals: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.newest_run: dict[tuple[str, str], str] = {}  # (origin, id) -> its newest run
        self.peers: dict[str, _Peer] = {}

    # -- classifying one frame: "Which code wins" --------------------------------------------

    def classify(self, value: Any, channel: str, index: int | None) -> Error | dict[str, Any]:
        """Rule "Which code wins", steps 3-9 for one frame (a batch element or a lone frame),
        the frame itself when it is acceptable on ``channel`` ("broker" or "peer")."""
        if element_fault(value):
            return Error(PARSE_ERROR, None, index)
        if not isinstance(value, dict):
            return Error(INVALID_REQUEST, None, index)
        obj: dict[str, Any] = _integral(value)
        has_id = "id" in obj
        rid = obj.get("id")
        if has_id and not is_request_id(rid):
            return Error(INVALID_REQUEST, None, index, "$.id")
        respond = has_id or channel == "peer"  # "Who gets an answer"
        if "method" not in obj and ("result" in obj or "error" in obj):
            return Error(INVALID_REQUEST, rid, index, respond=channel == "peer")
        if obj.get("jsonrpc") != "2.0" or not isinstance(obj.get("method"), str):
            return Error(INVALID_REQUEST, rid, index, respond=respond)
        method = obj["method"]
        if method not in BROKER_METHODS:
            return Error(METHOD_NOT_FOUND, rid, index, respond=respond)
        if "params" in obj and not isinstance(obj["params"], dict):
            return Error(INVALID_PARAMS, rid, index, "$.params", respond)
        if "params" not in obj and method not in PARAMLESS:
            return Error(INVALID_PARAMS, rid, index, "$.params", respond)
        fault = self.validator(method, obj.get("params", {}))
        if fault is not None:  # data.path: the validator's, or ANY_PATH (a string) if unsure
            path = fault[0]
            code = INVALID_PARAMS if path.startswith(("$.params", ANY_PATH)) else INVALID_REQUEST
            return Error(code, rid, index, path if code == INVALID_PARAMS else None, respond)
        if method in REQUEST_ONLY and not has_id:
            return Error(INVALID_REQUEST, None, index, respond=channel == "peer")
        if channel == "peer" and method not in PEER_METHODS:
            return Error(METHOD_NOT_FOUND, rid, index, respond=True)
        return obj

    # -- the local channel --------------------------------------------------------------------

    def broker_bytes(self, data: bytes) -> list[Answer]:
        """Rule "Framing": what the broker wrote, cut into lines at LF; a CR before the LF is
        dropped, blank lines are ignored, a last line without LF is still read, and a line over
        1 MiB gets one -32000 with id null."""
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        answers = []
        for raw in lines:
            if len(raw) > MAX_FRAME:
                answers.append(Answer(Error(FRAME_TOO_LARGE).response()))
                continue
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if line.strip(b" \t\r"):
                answers.append(self.broker_line(line))
        return answers

    def broker_line(self, data: bytes) -> Answer:
        """Rule "Framing", responses: one line from the broker (without its LF): the one response
        line it earns, if any (a batch's answers in element order, notifications unanswered)."""
        value = parse(data)
        if isinstance(value, Error):
            return Answer(value.response())
        if isinstance(value, list):
            if not value or len(value) > MAX_BATCH:  # "Batch size": refused whole
                return Answer(Error(INVALID_REQUEST).response())
            answers: list[Any] = []
            for i, element in enumerate(value):
                self._local_frame(element, i, answers)
            return Answer(answers or None)
        answers = []
        self._local_frame(value, None, answers)
        return Answer(answers[0] if answers else None)

    def _local_frame(self, element: Any, index: int | None, answers: list[Any]) -> None:
        frame = self.classify(element, "broker", index)
        if isinstance(frame, Error):
            if frame.respond:
                answers.append(frame.response())
            return
        method, params, rid = frame["method"], frame.get("params", {}), frame.get("id", _NO_ID)
        if method in STATE_OF:
            outcome = self.local_event(method, params["workloadInfo"])
        elif method == REMOVE:
            outcome = self.local_remove(params)
        elif method == "nodes:update":
            self.nodes([r for r in params["nodes"] if isinstance(r, dict)])
            outcome = "applied"
        else:  # manager:status: the kit matches its result by shape only
            answers.append({"jsonrpc": "2.0", "id": rid, "result": _STATUS})
            return
        if rid is not _NO_ID:
            answers.append(_result(rid, outcome))

    def local_event(self, method: str, info: dict[str, Any]) -> str:
        """:meth:`observe` for the broker's own event; an applied one goes to every peer
        (:meth:`_broadcast`), never back to the broker."""
        relayed = relay_info(info, STATE_OF[method])
        outcome = self.observe(relayed, local=True)
        if outcome == "applied":
            frame = lifecycle(relayed)
            self._broadcast(("event", relayed["runId"], relayed["id"]), frame)
        return outcome

    def local_remove(self, params: dict[str, Any]) -> str:
        """:meth:`remove` for the broker's removal; an applied one goes to every peer with the
        run it covered (:meth:`_broadcast`)."""
        outcome, frame = self.remove(params)
        if outcome == "applied":
            key = (frame["params"]["originatedFrom"], frame["params"]["workloadId"])
            run = frame["params"].get("runId", "")
            self.local_removals[(*key, run)] = frame
            self._broadcast(("remove", *key, run), frame)
        return outcome

    # -- deduplication and tombstones ---------------------------------------------------------

    def observe(self, info: dict[str, Any], *, local: bool) -> str:
        """Deduplication ("Retries", EventOutcome): an event is keyed by (runId, id, seq). A
        tombstone of (originatedFrom, id) covering its run: ``removed``; same seq as the newest:
        ``duplicate`` (but see :meth:`restart`); lower: ``stale``; else ``applied``."""
        origin, wid, run, seq = info["originatedFrom"], info["id"], info["runId"], info["seq"]
        covered = self.tombs.get((origin, wid))
        if covered is not None and ("" in covered or run in covered):
            return "removed"
        held = self.workloads.get((run, wid))
        if held is None:
            self.newest_run[(origin, wid)] = run  # the run whose first event came last
        elif seq == held.seq:
            if held.resend and not local:
                held.resend = False  # applied once more ("What a broker may rely on")
                return "applied"
            return "duplicate"
        elif seq < held.seq:
            return "stale"
        frame = lifecycle(info) if local else (held.frame if held is not None else None)
        self.workloads[(run, wid)] = _Workload(origin, seq, frame)
        return "applied"

    def remove(self, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Removals (workloads-remove.schema.json): a removal with ``runId`` covers that run;
        without it, the newest run of (originatedFrom, id) (the one whose first event came last), or
        every run when none was seen. One already covered is a ``duplicate``; the tombstone keeps
        every run removed."""
        origin, wid = params["originatedFrom"], params["workloadId"]
        run = params.get("runId")
        covered = self.tombs.get((origin, wid), [])
        if not isinstance(run, str):
            run = self.newest_run.get((origin, wid))
            if run is None and covered:  # none seen: the newest removal's run is the newest
                run = covered[-1] or None
        frame: dict[str, Any] = {"workloadId": wid, "originatedFrom": origin}
        if run is not None:
            frame["runId"] = run
        out = {"jsonrpc": "2.0", "method": REMOVE, "params": frame}
        if "" in covered or (run or "") in covered:
            return "duplicate", out
        if run is not None:
            self.workloads.pop((run, wid), None)
        self.tombs[(origin, wid)] = [*covered, run or ""]
        return "applied", out

    # -- the inter-node channel ---------------------------------------------------------------

    def peer_request(
        self,
        peer: str,
        data: bytes,
        *,
        version: str | None = None,
        content_type: str | None = "application/json",
        method: str = "POST",
        path: str = PATH,
    ) -> Answer:
        """Rule "HTTP status codes" and "Which code wins" step 9: a request from a member to ``POST
        /v1/workloads/events``. Pins first (403), then the version (409/400), the media type
        (415), the size (413); then the body's frames, answered as on the local channel,
        every invalid frame included, applied ones forwarded to the broker as upserts and
        removals (never to peers)."""
        if not self.peers.setdefault(peer, _Peer()).pinned:
            return Answer(status=403, http_error=True)
        if path != PATH:
            return Answer(status=404, http_error=True)
        if method != "POST":
            return Answer(status=405, http_error=True)
        refused = check_version(version)
        if refused is not None:
            return Answer(status=refused, http_error=True)
        if not _json_media_type(content_type):
            return Answer(status=415, http_error=True)
        if len(data) > MAX_FRAME:
            return Answer(status=413, http_error=True)
        value = parse(data)
        if isinstance(value, Error):
            return Answer(value.response(), status=400)
        batch = isinstance(value, list)
        elements = value if batch else [value]
        if batch and len(elements) > MAX_BATCH:
            return Answer(status=413, http_error=True)
        if batch and not elements:
            return Answer(Error(INVALID_REQUEST).response(), status=400)
        answer = Answer()
        answers: list[Any] = []
        bad = False
        for i, element in enumerate(elements):
            frame = self.classify(element, "peer", i if batch else None)
            if isinstance(frame, Error):
                bad = True
                answers.append(frame.response())
                continue
            outcome = self._peer_frame(frame, answer)
            if "id" in frame:
                answers.append(_result(frame["id"], outcome))
        if not answers:
            answer.status = 202
            return answer
        answer.status = 400 if bad else 200
        answer.response = answers if batch else answers[0]
        return answer

    def _peer_frame(self, frame: dict[str, Any], answer: Answer) -> str:
        params = frame["params"]
        if frame["method"] == REMOVE:
            outcome, out = self.remove(params)
            if outcome == "applied":
                answer.to_broker.append(out)
            return outcome
        info = relay_info(params["workloadInfo"], STATE_OF[frame["method"]])
        held = self.workloads.get((info["runId"], info["id"]))
        resend = held is not None and held.resend and held.seq == info["seq"]
        outcome = self.observe(info, local=False)
        if outcome == "applied":
            upsert = {
                "jsonrpc": "2.0",
                "method": UPSERT,
                "params": {"workloadInfo": info},
            }
            (answer.broker_may if resend else answer.to_broker).append(upsert)
        answer.free_outcome |= resend
        return outcome

    # -- membership, pins and the peers' view -------------------------------------------------

    def nodes(self, records: list[dict[str, Any]]) -> None:
        """Rule "Who is a peer": the latest ``nodes:update`` names the peers (not this node);
        one announced anew gets a snapshot (:meth:`_snapshot`); one left out gets nothing more."""
        names = {str(r.get("nodeId")) for r in records} - {self.node_id}
        for name, p in self.peers.items():
            if p.announced and name not in names:
                self._lose(p)
                p.announced = False
        for name in names:
            p = self.peers.setdefault(name, _Peer())
            if not p.announced:
                p.announced = True
                self._snapshot(p)

    def pin(self, peer: str, pinned: bool) -> None:
        """Rule "Server side" and "Who is a peer": pins are read now: an unpinned member gets 403 at
        its next request and is no peer. Pinned again (and announced), it must get what it missed
        meanwhile (what was due, what changed); the rest of the current state may come again (a
        snapshot, if the manager noticed the unpin: it need not have, when nothing was sent)."""
        p = self.peers.setdefault(peer, _Peer())
        if p.pinned == pinned:
            return
        p.pinned = pinned
        if not pinned:
            p.missed |= set(p.out.due)
            self._lose(p)
        elif p.receives:
            missed, p.missed = p.missed, set()
            for key, frame in self._state():
                if key in missed:
                    p.out.due[key] = frame
                else:
                    p.out.may.append(frame)
                p.out.repeats = True

    def peer_down(self, peer: str) -> None:
        """A peer stops listening (or refuses every request): what was due to it may be lost,
        given up after the retries (:meth:`_snapshot` repairs it)."""
        p = self.peers.setdefault(peer, _Peer())
        p.up = False
        self._lose(p)

    def peer_up(self, peer: str) -> None:
        """On its next connection (or its first answer) a peer that was down
        gets the current state."""
        p = self.peers.setdefault(peer, _Peer())
        if not p.up:
            p.up = True
            self._snapshot(p)

    def peer_restarted(self, peer: str) -> None:
        """A peer that restarted with an empty view gets the current state."""
        p = self.peers.setdefault(peer, _Peer())
        self._lose(p)
        self._snapshot(p)

    def restart(self) -> None:
        """Rule "After ready" and "What a broker may rely on": a restart keeps (journal) what the
        broker reported and what was told to the broker, not the peers: the broker sends
        ``nodes:update`` again. A peer's workload reloaded may be forwarded once more at its same
        seq (a freedom)."""
        for w in self.workloads.values():
            w.resend = w.frame is None
        for p in self.peers.values():
            self._lose(p)
            p.announced = False

    def take_deliveries(self, peer: str) -> Deliveries:
        """What ``peer`` must have got, and may have got, since the last call."""
        p = self.peers.setdefault(peer, _Peer())
        out, p.out = p.out, Deliveries()
        return out

    # -- what peers are sent --------------------------------------------------------------------

    def _broadcast(self, key: Any, frame: dict[str, Any]) -> None:
        """Method catalogue ("manager -> peer"): an applied local event or removal is due to every
        peer; the one it supersedes for the same workload may still come or not (coalescing is
        allowed)."""
        for p in self.peers.values():
            if p.announced and p.up and not p.pinned:
                # No peer now, but the contract does not say how soon a sender notices an
                # unpin (it re-reads pins on a tick): it may still send this; once pinned again
                # the member must have it (Model.pin).
                p.missed.add(key)
                p.out.may.append(frame)
            if not p.receives:
                continue
            wkey = key[:3] if key[0] == "event" else ("event", key[3], key[2])
            if wkey in p.out.due:
                p.out.may.append(p.out.due.pop(wkey))
            p.out.due[key] = frame

    def _lose(self, p: _Peer) -> None:
        """A peer unreachable or no peer now: what was due may or may not have arrived."""
        p.out.may.extend(p.out.due.values())
        p.out.due.clear()

    def _snapshot(self, p: _Peer) -> None:
        """A snapshot: the newest event of each workload this manager originated and its
        removals, due again (repeats allowed: the peer may have had them)."""
        if not p.receives:
            return
        p.missed.clear()
        for key, frame in self._state():
            p.out.due[key] = frame
            p.out.repeats = True

    def _state(self) -> list[tuple[Any, dict[str, Any]]]:
        """What a snapshot carries, by delivery key: originated events and removals."""
        events = [(("event", run, wid), w.frame) for (run, wid), w in self.workloads.items()]
        removals = [(("remove", *key), frame) for key, frame in self.local_removals.items()]
        return [(k, f) for k, f in events + removals if f is not None]


_NO_ID: Final = object()


def _result(rid: Any, outcome: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": {"outcome": outcome}}


def _json_media_type(value: str | None) -> bool:
    """``application/json``, with a ``charset`` parameter only if it is UTF-8."""
    if value is None:
        return False
    media, *params = (part.strip().lower() for part in value.split(";"))
    charsets = [p.split("=", 1)[1].strip('"') for p in params if p.startswith("charset=")]
    return media == "application/json" and all(c in ("utf-8", "utf8") for c in charsets)


# manager:status's result, as the kit matches it (counters are not modelled).
_STATUS: Final[dict[str, Any]] = {"hasIdentity": True}


def relay_info(info: dict[str, Any], state: str) -> dict[str, Any]:
    """Rule "Absent versus null" and "Unknown properties": what leaves a manager of a WorkloadInfo:
    the state its method sets, every known member as received (absent stays absent, null stays
    null), unknown members dropped."""
    out: dict[str, Any] = {k: info[k] for k in INFO_FIELDS if k in info}
    out["state"] = state
    return out


def lifecycle(info: dict[str, Any]) -> dict[str, Any]:
    """The notification that reports ``info`` to a peer (its state picks the method)."""
    return {"jsonrpc": "2.0", "method": METHOD_OF[info["state"]], "params": {"workloadInfo": info}}
