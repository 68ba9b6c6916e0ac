"""The receiving side's shortcuts equal the general path, byte for byte, on many bodies.

* ``codec.decode`` reads a batch whose every element the strict pass reads whole with one typed
  decode and one encode of the array (``codec._whole_batch``): its result must be the
  element-wise one.
* ``Dispatcher.peer`` builds each ``workloads:upsert`` line from the event's workloadInfo
  (``events.upsert_line``), or, for a single notification read whole, from the received
  frame's own encoding (``events.upsert_line_from``): the lines must be those of
  ``codec.encode_line(upsert(translate(frame)))``, and the statuses, answers and counters those
  of the general path (the loop as it was, kept below as the reference).

The bodies: every frame of the conformance vectors (valid and invalid), frames with unknown
members, other member orders, whitespace, escapes and wrong state, removals, other channels'
methods, unparseable text; alone and in seeded random batches.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from msgspec import UNSET
from nvpair_wm_schema.http_error_schema import HttpError
from nvpair_wm_schema.manager_status_schema import StatusResult
from nvpair_wm_schema.workloads_remove_schema import WorkloadsRemove

from nvpair_wm import codec
from nvpair_wm.codec import RpcError
from nvpair_wm.dedup import TableLimits, WorkloadTable
from nvpair_wm.dispatch import Dispatcher, PeerResult, _not_from_peers, removal_frame
from nvpair_wm.events import (
    LIFECYCLE_TYPES,
    RELAY_HEAD,
    Forwarded,
    lifecycle_frame,
    translate,
    upsert,
    upsert_line,
    upsert_line_from,
)
from nvpair_wm.outcomes import RULES
from tests.support.frames import (
    ABSENT,
    LIFECYCLE,
    METHODS,
    dumps,
    event_frame,
    frame,
    manager_status,
    nodes_update,
    remove_frame,
    status_result,
    workload,
)

VECTORS = Path(__file__).resolve().parent.parent / "schema" / "conformance"


def _vector_frames() -> list[bytes]:
    """The ``data`` of every conformance vector that is a JSON object, compact."""
    out: list[bytes] = []
    for path in sorted(VECTORS.glob("*.json")):
        for group in json.loads(path.read_text()):
            for test in group.get("tests", []):
                data = test.get("data")
                if isinstance(data, dict):
                    out.append(dumps(data))
    return out


def _workloads(rng: random.Random) -> Iterator[dict[str, Any]]:
    strings = ["é", 'quo"te', "back\\slash", "tab\t", "\u2028", "😀", "plain"]
    for i in range(60):
        over: dict[str, Any] = {
            "id": f"w{i % 23}",
            "seq": rng.randint(1, 5),
            "runId": rng.choice(["run-a", "run-b"]),
            "originatedFrom": rng.choice(["node-a", "node-c"]),
        }
        if rng.random() < 0.3:
            over["model"] = rng.choice(strings)
        if rng.random() < 0.3:
            over["requesterId"] = rng.choice([None, ABSENT, "bob"])
        if rng.random() < 0.3:
            over["scheduledOn"] = ABSENT
        if rng.random() < 0.2:
            over["error"] = rng.choice(strings)
        yield workload(**over)


def _frames(rng: random.Random) -> tuple[list[bytes], list[bytes]]:
    """Element texts: all (valid and invalid, compact and not), and the valid ones the strict
    pass reads whole."""
    out = _vector_frames()
    whole: list[bytes] = []
    for wl in _workloads(rng):
        method = rng.choice(METHODS)
        good = dict(wl, state=LIFECYCLE[method])
        whole.append(dumps(event_frame(method, good)))  # the usual one
        whole.append(dumps(event_frame(method, wl)))  # state maybe not the method's
        whole.append(dumps(event_frame(method, good, id=rng.choice([1, "r", None]))))
        whole.append(json.dumps(event_frame(method, good)).encode())  # whitespace
        whole.append(json.dumps(event_frame(method, good), ensure_ascii=True).encode())
        whole.append(dumps(dict(reversed(list(event_frame(method, good).items())))))  # order
        whole.append(dumps(remove_frame(wl["id"], wl["originatedFrom"], run_id=wl["runId"])))
        out.append(dumps(event_frame(method, dict(good, traceId="00-ab"))))  # unknown member
        out.append(dumps(event_frame(method, dict(good, seq=1.0))))  # integral float
        out.append(dumps(event_frame(method, dict(good, seq="1"))))  # wrong type
        out.append(
            dumps(event_frame(method, {k: v for k, v in good.items() if k != "id"}))
        )  # missing member
        out.append(dumps(remove_frame(wl["id"], id=7)))
    text = dumps(event_frame("workload:started", dict(workload(), state="running")))
    out += [
        text.replace(b'"jsonrpc":"2.0"', b'"jsonrpc":"2.0","jsonrpc":"2.0"'),  # repeated name
        text.replace(b'"model":"', b'"model":"\\u0022'),
        text.replace(b'"model":"', b'"model":"\\\\u0022'),
        text.replace(b'"model":"', b'"model":"\\ud800'),  # lone surrogate
        text.replace(b"}}}", b'},"x":' + b"[" * 100 + b"]" * 100 + b"}}"),  # deep unknown
        text[:-5],
        b"{}",
        b"[]",
        b"1",
        b"null",
        nodes_update(),
        manager_status(),
        dumps(frame("workloads:upsert", {"workloadInfo": workload()})),
        dumps(frame("no:such", {})),
    ]
    return out + whole, whole


def _bodies(seed: int = 9) -> list[bytes]:
    rng = random.Random(seed)
    elements, usual = _frames(rng)
    bodies = list(elements)
    # Batches of one, as nvpair-wm's broadcaster sends one event (and spaced, and of two).
    bodies += [b"[" + e + b"]" for e in elements]
    bodies += [b"[ " + e + b" ]" for e in usual[::3]]
    bodies += [b"[" + a + b"," + b + b"]" for a, b in zip(usual[::4], usual[1::4], strict=False)]
    for _ in range(300):
        pool = usual if rng.random() < 0.5 else elements
        parts = [rng.choice(pool) for _ in range(rng.randint(1, 12))]
        sep = rng.choice([b",", b", ", b" ,\n"])
        bodies.append(rng.choice([b"", b" ", b"\n"]) + b"[" + sep.join(parts) + b"]")
    bodies += [b"[" + b",".join([usual[0]] * 9) + b"]", b"[", b"[1,", b"[]", b"[ ]"]
    return bodies


BODIES = _bodies()


class _ElementWise:
    """``codec.decode`` with the whole-batch read off: the element-wise path."""

    def __enter__(self) -> None:
        self._saved = codec._whole_batch
        codec._whole_batch = lambda payload, max_batch: None

    def __exit__(self, *exc: object) -> None:
        codec._whole_batch = self._saved


def test_bodies_take_the_shortcut_and_not() -> None:
    """The corpus exercises both sides of each shortcut (else the tests below prove little)."""
    whole = [b for b in BODIES if b.lstrip()[:1] == b"[" and codec._whole_batch(b, 10_000)]
    refused = [b for b in BODIES if b.lstrip()[:1] == b"[" and not codec._whole_batch(b, 10_000)]
    assert len(whole) > 100 and len(refused) > 100
    assert any(b[:1] != b"[" for b in whole)  # leading whitespace: the quote count's case


@pytest.mark.parametrize("shape", ["frame", "batch of one"])
def test_single_frame_bodies_take_the_lone_notification_shortcut_and_not(shape: str) -> None:
    """``Dispatcher.peer``'s shortcut (one lifecycle notification in its method's state, read
    whole, alone or alone in a batch) is taken by many such bodies and refused by many others
    (an id, another state, not read whole, not lifecycle), so the comparison below covers both."""
    taken = refused = 0
    for body in BODIES:
        if shape == "frame" and body[:1] == b"{":
            whole = codec.decode_whole(body)
            assert (whole is None) == (codec.decode_frame(body)[1] is None)
        elif shape == "batch of one" and body[:1] == b"[" and body[-1:] == b"]":
            whole = codec.decode_whole(body[1:-1])
        else:
            continue
        item = whole[0] if whole is not None else None
        if (
            isinstance(item, LIFECYCLE_TYPES)
            and item.id is UNSET
            and item.params.workloadInfo.state == translate(item).state
        ):
            taken += 1
        else:
            refused += 1
    assert taken > 20 and refused > 20, (taken, refused)


@pytest.mark.parametrize("max_batch", [10_000, 5])
def test_decode_equals_the_element_wise_path(max_batch: int) -> None:
    for body in BODIES:
        got = codec.decode(body, max_batch)
        with _ElementWise():
            want = codec.decode(body, max_batch)
        assert got == want, body
        if body.lstrip()[:1] != b"[":  # one frame: as the element-wise step reads it
            item, encoded = codec.decode_frame(body)
            assert got == codec.Decoded([item], False, False, encoded), body


def test_upsert_line_equals_encoding_the_frame() -> None:
    rng = random.Random(3)
    for wl in _workloads(rng):
        for method in METHODS:
            item = codec.decode(dumps(event_frame(method, wl))).items[0]
            assert isinstance(item, LIFECYCLE_TYPES)
            info = translate(item)
            assert upsert_line(info) == codec.encode_line(upsert(info))


def test_upsert_line_from_a_notification_equals_encoding_the_frame() -> None:
    assert set(RELAY_HEAD) == set(LIFECYCLE_TYPES)
    rng = random.Random(4)
    for wl in _workloads(rng):
        for method in METHODS:
            text = dumps(event_frame(method, dict(wl, state=LIFECYCLE[method])))
            decoded = codec.decode(text)
            assert decoded.encoded is not None
            item = decoded.items[0]
            assert isinstance(item, LIFECYCLE_TYPES) and item.id is UNSET
            line = upsert_line_from(type(item), decoded.encoded)
            assert line == codec.encode_line(upsert(translate(item)))
            assert line == codec.encode_line(upsert(item.params.workloadInfo))


def _reference_peer(d: Dispatcher, body: bytes) -> PeerResult:
    """``Dispatcher.peer`` as it was before the shortcuts (element-wise decode, the upsert
    frame built and encoded per event)."""
    with _ElementWise():
        decoded = codec.decode(body, d.max_batch)
    ch = d.peer_counters
    if decoded.too_many:
        d.counters.framesIn += 1
        ch.framesIn += 1
        err = decoded.items[0]
        assert isinstance(err, RpcError)
        d._refused(err, ch, "peer")
        return PeerResult(413, codec.encode(HttpError(error=err.reason)), [])
    now = d._clock()
    to_broker: list[bytes] = []
    forwarded: list[Forwarded] = []
    answers: list[Any] = []
    bad = False
    d.counters.framesIn += len(decoded.items)
    ch.framesIn += len(decoded.items)
    for index, decoded_item in enumerate(decoded.items):
        item: Any = decoded_item
        if not isinstance(item, (RpcError, *LIFECYCLE_TYPES, WorkloadsRemove)):
            item = _not_from_peers(item)
        if isinstance(item, RpcError):
            d._refused(item, ch, "peer")
            bad = True
            answers.append(item.response(index if decoded.batch else None))
            continue
        if isinstance(item, LIFECYCLE_TYPES):
            info = translate(item)
            outcome = d.table.observe(info, now)
            if outcome == "applied":
                to_broker.append(codec.encode_line(upsert(info)))
                key = (info.originatedFrom, info.id, info.runId)
                forwarded.append(Forwarded(*key, info.seq, info.state))
        else:
            p = item.params
            run = p.runId if isinstance(p.runId, str) else None
            outcome, removal = d.table.remove(p.originatedFrom, p.workloadId, run, now)
            if outcome == "applied":
                to_broker.append(codec.encode_line(removal_frame(removal)))
                key = (removal.origin, removal.workload_id, removal.run_id or "")
                forwarded.append(Forwarded(*key, 0, "removed"))
        d._count(ch, outcome)
        rid = getattr(item, "id", UNSET)
        if rid is not UNSET:
            answers.append(codec.event_response(rid, RULES[outcome].answered))
    if not answers:
        return PeerResult(202, None, to_broker, forwarded)
    out = answers if decoded.batch else answers[0]
    return PeerResult(400 if bad else 200, codec.encode(out), to_broker, forwarded)


def _dispatcher(max_batch: int) -> Dispatcher:
    def provider() -> StatusResult:
        return status_result()

    return Dispatcher(WorkloadTable(TableLimits()), provider, lambda: 1000.0, max_batch=max_batch)


@pytest.mark.parametrize("max_batch", [10_000, 5])
def test_peer_equals_the_general_path(max_batch: int) -> None:
    """Two dispatchers fed the same bodies in the same order (their tables evolve alike):
    the same status, answer bytes, broker lines and counters after every body."""
    fast, ref = _dispatcher(max_batch), _dispatcher(max_batch)
    rng = random.Random(11)
    bodies = BODIES * 2  # the second round meets the first's workloads: duplicates, stale
    rng.shuffle(bodies)
    applied = 0
    for body in bodies:
        got, want = fast.peer(body), _reference_peer(ref, body)
        assert (got.status, got.body, got.to_broker) == (want.status, want.body, want.to_broker)
        assert got.forwarded == want.forwarded, body
        assert fast.counters == ref.counters, body
        assert fast.peer_counters == ref.peer_counters, body
        applied += len(got.to_broker)
    assert applied > 80
    # A relayed event whose state the method changes still reads as translated.
    wl = dict(workload(), state="queued")
    text = dumps(event_frame("workload:started", wl))
    line = _dispatcher(max_batch).peer(text).to_broker[0]
    assert json.loads(line)["params"]["workloadInfo"]["state"] == "running"
    item = codec.decode(text).items[0]
    assert isinstance(item, LIFECYCLE_TYPES)
    assert line == codec.encode_line(upsert(translate(lifecycle_frame(translate(item)))))
