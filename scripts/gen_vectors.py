"""Behaviour vectors derived from schema/: every constraint on its boundary and just past it.

Walks the params schema of every method a manager accepts (following ``$ref``) and, for each
constraint (minimum/maximum, minLength/maxLength, pattern, enum, required, null versus absent,
unknown members, item counts), makes the frame on the boundary and the one just past it; adds
the nesting bound (64 levels) and the version rule in both directions. Each goes over the local
channel and over HTTP/2 and HTTP/1.1, alone and inside a batch, and its expectation is what the
executable model (``nvpair_wm.conformance.model``, with jsonschema over schema/ as its
validator) decides, in order, so duplicates between cases are the model's to call too.

Writes ``schema/conformance/behaviour/generated.json`` (the runner and the wheel pick it up
with the hand-written files). ``--check`` fails when that file is stale. Run by ``make gen``
(through ``scripts/gen_types.py``) and drift-checked by ``make check-gen``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nvpair_wm_schema.contract import INVALID_PARAMS, MAX_SAFE_INTEGER
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from nvpair_wm.conformance import model, outcomes, vectors
from nvpair_wm.conformance.schemacheck import BASE, SchemaValidator

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schema"
TARGET = SCHEMA / "conformance" / "behaviour" / "generated.json"
STARTUP = [
    {
        "equal": {"/jsonrpc": "2.0", "/method": "ready"},
        "types": {"/params/version": "string", "/params/contractVersion": "string"},
        "absent": ["/id"],
    }
]
FINGERPRINT = "ab" * 32
RELAY = "relay"  # the kit's peer in generated-schema
MAX_BATCH = model.MAX_BATCH
HTTP_BATCH = 32  # mutants per HTTP batch request
Mutation = tuple[list[str | int], str, Any]  # (path in params, "set" | "drop", value)


def _registry() -> Registry[Any]:
    docs = [json.loads(p.read_text()) for p in sorted(SCHEMA.glob("*.schema.json"))]
    return Registry().with_resources(
        (d["$id"], Resource.from_contents(d, default_specification=DRAFT202012)) for d in docs
    )


REGISTRY = _registry()


def _resolve(node: dict[str, Any], base: str) -> tuple[dict[str, Any], str]:
    while "$ref" in node:
        resolved = REGISTRY.resolver(base).lookup(node["$ref"])
        node, base = resolved.contents, resolved.resolver._base_uri or base
    return node, base


def _branch(node: dict[str, Any], base: str) -> tuple[dict[str, Any], str]:
    """The non-null branch of an ``anyOf`` / ``oneOf`` (nullable members)."""
    for key in ("anyOf", "oneOf"):
        for b in node.get(key, []):
            b2, base2 = _resolve(b, base)
            if b2.get("type") != "null":
                return b2, base2
    return node, base


def mutations(
    node: dict[str, Any], base: str, value: Any, path: list[str | int]
) -> Iterator[tuple[str, Mutation]]:
    """(label, mutation) for every constraint of ``node`` at ``path``, on its boundary and
    just past it."""
    node, base = _resolve(node, base)
    name = ".".join(str(p) for p in path) or "params"
    nullable = any(_resolve(b, base)[0].get("type") == "null" for b in node.get("anyOf", []))
    node, base = _branch(node, base)
    kind = node.get("type")
    if kind == "string":
        if "minLength" in node:
            n = node["minLength"]
            yield f"{name}-minLength-{n}", (path, "set", _string(value, n))
            if n > 0:
                yield f"{name}-minLength-{n}-less-1", (path, "set", _string(value, n - 1))
        if "maxLength" in node:
            n = node["maxLength"]
            yield f"{name}-maxLength-{n}", (path, "set", _string(value, n))
            yield f"{name}-maxLength-{n}-plus-1", (path, "set", _string(value, n + 1))
        if "pattern" in node:
            yield f"{name}-pattern-uppercase", (path, "set", str(value).upper())
        yield f"{name}-not-a-string", (path, "set", 7)
    elif kind == "integer":
        if "minimum" in node:
            n = node["minimum"]
            yield f"{name}-minimum-{n}", (path, "set", n)
            yield f"{name}-minimum-{n}-less-1", (path, "set", n - 1)
        if "maximum" in node:
            n = node["maximum"]
            yield f"{name}-maximum", (path, "set", n)
            yield f"{name}-maximum-plus-1", (path, "set", n + 1)
        yield f"{name}-fractional", (path, "set", 1.5)
        yield f"{name}-boolean", (path, "set", True)
    elif "enum" in node:
        for v in node["enum"]:
            yield f"{name}-enum-{v}", (path, "set", v)
        yield f"{name}-enum-unknown", (path, "set", "no-such-value")
    elif kind == "object" and isinstance(value, dict):
        required = set(node.get("required", []))
        for prop, sub in node.get("properties", {}).items():
            if prop not in value:
                continue
            yield from mutations(sub, base, value[prop], [*path, prop])
            side = "required" if prop in required else "optional"
            yield f"{name}.{prop}-{side}-absent", ([*path, prop], "drop", None)
            if not nullable:
                yield f"{name}.{prop}-null", ([*path, prop], "set", None)
        yield f"{name}-unknown-member", ([*path, "x-unknown"], "set", {"a": [1, None]})
    elif kind == "array" and isinstance(value, list) and value:
        if "minItems" in node:
            n = node["minItems"]
            yield f"{name}-minItems-{n}", (path, "set", value[:1] * n)
        if "maxItems" in node:
            n = node["maxItems"]
            yield f"{name}-maxItems-{n}", (path, "set", _records(n))
            yield f"{name}-maxItems-{n}-plus-1", (path, "set", _records(n + 1))
        yield from mutations(node.get("items", {}), base, value[0], [*path, 0])
    if nullable:
        yield f"{name}-null", (path, "set", None)


def _string(value: Any, n: int) -> str:
    return (str(value) * (n // max(1, len(str(value))) + 1))[:n] if n else ""


def _records(n: int) -> list[dict[str, Any]]:
    return [
        {"nodeId": f"n{i}", "address": "127.0.0.1", "fingerprint": FINGERPRINT} for i in range(n)
    ]


def apply(params: dict[str, Any], mutation: Mutation) -> dict[str, Any]:
    path, op, value = mutation
    out = copy.deepcopy(params)
    target: Any = out
    for key in path[:-1]:
        target = target[key]
    if op == "drop":
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


def _info(wid: str) -> dict[str, Any]:
    return {
        "id": wid,
        "model": "llama-3.1-8b",
        "engine": "vllm",
        "runId": "g-run",
        "state": "running",
        "originatedFrom": "node-g",
        "scheduledOn": "node-g",
        "createdAt": 1764690000000,
        "startedAt": 1764690001000,
        "completedAt": None,
        "error": None,
        "requesterId": "u-1",
        "seq": 1,
    }


BASES: dict[str, Any] = {
    "workload:started": lambda wid: {"workloadInfo": _info(wid)},
    "workloads:remove": lambda wid: {"workloadId": wid, "originatedFrom": "node-g", "runId": "r"},
    "nodes:update": lambda wid: {
        "nodes": [
            {"nodeId": wid, "address": "127.0.0.1", "port": 14320, "fingerprint": FINGERPRINT}
        ]
    },
}


def _schema_of(method: str) -> tuple[dict[str, Any], str]:
    inbound = json.loads((SCHEMA / "inbound-frame.schema.json").read_text())
    for branch in inbound["oneOf"]:
        node, base = _resolve({"$ref": BASE + branch["$ref"]}, BASE)
        if node["properties"]["method"]["const"] == method:
            return _resolve(node["properties"]["params"], base)
    raise KeyError(method)


def _deep(depth: int, wide: int = 0) -> dict[str, Any]:
    """A frame nesting exactly ``depth`` levels (the frame object is level 1); ``wide`` empty
    arrays beside the deep member give it more brackets than twice its depth, so that a count of
    brackets cannot stand in for the depth."""
    inner: Any = 1
    for _ in range(depth - 3):  # frame, params and workloadInfo are 3; the arrays are the rest
        inner = [inner]
    info = {**_info(f"g-deep-{depth}{'-wide' if wide else ''}"), "x-deep": inner}
    if wide:
        info["x-wide"] = [[] for _ in range(wide)]
    return {"jsonrpc": "2.0", "method": "workload:started", "params": {"workloadInfo": info}}


def _name(text: str) -> str:
    """A case name the format allows (letters, digits and dashes)."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-.")


class Builder:
    """The cases of one group, with the model fed in the runner's order. The group has one peer
    of the kit's, ``relay``: what the broker's valid frames must become on the way to a peer is
    checked too (the other side of what a peer's frames become on the way to the broker)."""

    def __init__(self) -> None:
        self.model = model.Model(validator=SchemaValidator())
        self.cases: list[dict[str, Any]] = []
        self.n = 0
        self.batched: dict[str, list[Any]] = {"h2": [], "http/1.1": []}

    def fresh(self) -> str:
        self.n += 1
        return f"g{self.n}"

    def local(self, name: str, frame: Any) -> None:
        name = _name(name)
        answers = self.model.broker_bytes(vectors.encode(frame) + b"\n")
        self.cases.append(
            {"name": name, "local": [{"frame": frame}], "expect": outcomes.local_expect(answers)}
        )

    def http(self, name: str, frame: Any, proto: str, version: str | None = None) -> None:
        name = _name(name)
        headers = {"content-type": "application/json"}
        if version is not None:
            headers["nvpair-contract-version"] = version
        answer = self.model.peer_request(RELAY, vectors.encode(frame), version=version)
        http = {"client": RELAY, "protocols": [proto], "headers": headers, "body": {"frame": frame}}
        self.cases.append(
            {
                "name": name,
                "http": http,
                "response": outcomes.http_response(answer),
                "broker": outcomes.broker_lines(answer),
            }
        )

    def batch(self, name: str, count: int) -> None:
        """A batch of ``count`` notifications the schema refuses (small, so that 10,001 fit in a
        line): locally none is answered unless the batch is over the bound; over HTTP each is
        answered with its index (400), or the whole body is 413."""
        tpl = {"jsonrpc": "2.0", "method": "workload:started",
               "params": {"workloadInfo": {"id": "b{n}"}}}  # fmt: skip
        spec = {"batch": {"count": count, "frame": tpl}}
        data = vectors.payload(spec)
        answers = self.model.broker_bytes(data + b"\n")
        local = {"name": _name(f"{name}-local"), "local": [spec]}
        self.cases.append({**local, "expect": outcomes.local_expect(answers)})
        for proto in ("h2", "http/1.1"):
            answer = self.model.peer_request(RELAY, data)
            response = outcomes.http_response(answer)
            if answer.status == 400:  # 10,000 errors: their count and the last one's index
                response["body"] = {"types": {f"/{count - 1}/error/data/reason": "string"},
                                    "equal": {f"/{count - 1}/error/data/index": count - 1,
                                              f"/{count - 1}/error/code": INVALID_PARAMS},
                                    "absent": [f"/{count}"]}  # fmt: skip
            http = {"client": RELAY, "protocols": [proto], "body": spec}
            tag = _name(f"{name}-http-{proto}")
            self.cases.append({"name": tag, "http": http, "response": response})

    def announce(self, name: str) -> None:
        """``nodes:update`` naming relay (the kit puts in its record, which the model does not
        need to validate: only who is announced)."""
        nodes = [{"$record": RELAY}, {"$record": "subject"}]
        frame = frame_of("nodes:update", {"nodes": nodes}, 0)
        self.model.nodes([{"nodeId": RELAY}])
        applied = {"jsonrpc": "2.0", "id": 0, "result": {"outcome": "applied"}}
        self.cases.append(
            {"name": name, "local": [{"frame": frame}], "expect": [{"exact": applied}]}
        )

    def check(self, name: str) -> None:
        spec = outcomes.arrivals(self.model.take_deliveries(RELAY))
        self.cases.append({"name": _name(name), "arrivals": {RELAY: spec}, "within": 10})

    def emit(self, name: str, make: Callable[[], Any], k: int, *, http: bool, batch: bool) -> None:
        """One mutant: locally alone and in a batch, over HTTP alone on one protocol and in a
        batch (:meth:`flush`) on the other; ``make`` builds it afresh each time (new ids)."""
        self.local(f"{name}-local", make())
        if batch:
            started = frame_of("workload:started", {"workloadInfo": _info(self.fresh())})
            self.local(f"{name}-local-batch", [make(), started])
        if http:
            protos = ("h2", "http/1.1") if k % 2 else ("http/1.1", "h2")
            self.http(f"{name}-http", make(), protos[0])
            # Inside a batch, over the other protocol: one request holds many mutants, each
            # answered in element order with its index (one handshake, not dozens).
            self.batched[protos[1]].append(make())

    def flush(self, tag: str) -> None:
        for proto, frames in self.batched.items():
            for start in range(0, len(frames), HTTP_BATCH):
                chunk = frames[start : start + HTTP_BATCH]
                self.http(f"{tag}-http-batch-{proto}-{start // HTTP_BATCH}", chunk, proto)
            frames.clear()


def frame_of(method: str, params: Any, rid: Any = None) -> dict[str, Any]:
    frame = {"jsonrpc": "2.0", "method": method, "params": params}
    if rid is not None:
        frame["id"] = rid
    return frame


def schema_group() -> dict[str, Any]:
    b = Builder()
    b.announce("announce-relay")
    k = 0
    for method, base in BASES.items():
        node, uri = _schema_of(method)
        seen: set[str] = set()
        for label, mutation in mutations(node, uri, base("g0"), []):
            if label in seen:  # a nullable member's null, from it and from its object
                continue
            seen.add(label)
            make = functools.partial(_mutant, b, method, base, mutation, k)
            # A peer may not send nodes:update (-32601 whatever its params): locally only.
            name = f"{method.replace(':', '-')}-{label}"
            b.emit(name, make, k, http=method != "nodes:update", batch="maxItems" not in label)
            k += 1
        b.flush(method.replace(":", "-"))
        if method == "nodes:update":  # its mutants replaced the peers: announce relay again
            b.announce("announce-relay-again")
        b.check(f"{method.replace(':', '-')}-relayed")
    for label, change in ENVELOPE:
        make = functools.partial(_enveloped, b, change, k)
        b.emit(f"envelope-{label}", make, k, http=True, batch=True)
        k += 1
    b.flush("envelope")
    b.check("envelope-relayed")
    for count in (MAX_BATCH, MAX_BATCH + 1):  # the batch bound: at it, and one element past it
        b.batch(f"batch-of-{count}", count)
    for depth in (64, 65):  # the nesting bound: at it, and one level past it
        frame = _deep(depth)
        b.local(f"depth-{depth}-local", {**frame, "id": depth})
        b.local(f"depth-{depth}-local-batch", [{**_deep(depth), "id": depth}])
        b.local(f"depth-{depth}-wide-local", {**_deep(depth, wide=depth), "id": depth})
        for proto in ("h2", "http/1.1"):
            deep = _deep(depth)
            deep["params"]["workloadInfo"]["id"] += proto
            b.http(f"depth-{depth}-http-{proto.replace('/', '')}", {**deep, "id": depth}, proto)
    for version in (
        "1.0.0",
        "1.2.0",
        "1.99.7",
        "1.2.0-rc.1+b.5",
        "0.9.0",
        "2.0.0",
        "1.2",
        "v1.2.0",
        "1.02.0",
    ):
        for proto in ("h2", "http/1.1"):
            frame = frame_of("workload:started", {"workloadInfo": _info(b.fresh())}, 1)
            b.http(f"version-{version}-{proto.replace('/', '')}", frame, proto, version)
    b.check("last-relayed")
    return {
        "group": "generated-schema",
        "description": "generated by scripts/gen_vectors.py from schema/: every constraint on "
        "its boundary and just past it, locally, over HTTP/2 and HTTP/1.1, alone and in batches; "
        "the version rule as a server. Expectations from the model.",
        "config": {
            "shutdown_grace": 1.0,
            "broadcast": {
                "retry_base": 0.02,
                "retry_max_delay": 0.2,
                "min_reconnect_interval": 0.05,
                "reconcile_interval": 0.1,
            },
        },
        "peers": [{"name": RELAY, "protocols": ["h2", "http/1.1"]}],
        "startup": STARTUP,
        "cases": b.cases,
    }


def _mutant(b: Builder, method: str, base: Any, mutation: Mutation, rid: int) -> dict[str, Any]:
    return frame_of(method, apply(base(b.fresh()), mutation), rid)


def _enveloped(b: Builder, change: Callable[[dict[str, Any]], None], rid: int) -> Any:
    frame = frame_of("workload:started", {"workloadInfo": _info(b.fresh())}, rid)
    change(frame)
    return frame


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda frame: frame.__setitem__(key, value)


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda frame: frame.pop(key, None)


# The envelope's constraints (jsonrpc.schema.json, the frame types): const, RequestId's bounds,
# length and types, params' type, and a notification (no id) beside each request.
ENVELOPE: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("jsonrpc-const", _set("jsonrpc", "2.0")),
    ("jsonrpc-other", _set("jsonrpc", "1.0")),
    ("jsonrpc-number", _set("jsonrpc", 2.0)),
    ("jsonrpc-absent", _drop("jsonrpc")),
    ("method-unknown", _set("method", "workload:paused")),
    ("method-number", _set("method", 5)),
    ("method-absent", _drop("method")),
    ("id-absent-notification", _drop("id")),
    ("id-null", _set("id", None)),
    ("id-max-safe", _set("id", MAX_SAFE_INTEGER)),
    ("id-max-safe-plus-1", _set("id", MAX_SAFE_INTEGER + 1)),
    ("id-min-safe", _set("id", -MAX_SAFE_INTEGER)),
    ("id-min-safe-less-1", _set("id", -MAX_SAFE_INTEGER - 1)),
    ("id-string-256", _set("id", "i" * 256)),
    ("id-string-257", _set("id", "i" * 257)),
    ("id-integral-float", _set("id", 7.0)),
    ("id-fractional", _set("id", 1.5)),
    ("id-boolean", _set("id", True)),
    ("id-array", _set("id", [1])),
    ("id-object", _set("id", {"a": 1})),
    ("params-absent", _drop("params")),
    ("params-array", _set("params", [])),
    ("params-string", _set("params", "x")),
]


def version_peer_group() -> dict[str, Any]:
    """The version rule as a client: the kit's peer answers as a newer minor (served on), as
    another major (409: the sender stops, drops its queue for it, and probes), then as this
    version again (the first probe it takes carries the snapshot). For the model a peer that
    refuses our version is a peer down, and taking it again is coming back."""
    m = model.Model()
    cases: list[dict[str, Any]] = []

    def local(name: str, frame: dict[str, Any]) -> None:
        answers = m.broker_bytes(vectors.encode(frame) + b"\n")
        cases.append({"name": name, "local": [{"frame": frame}],
                      "expect": outcomes.local_expect(answers)})  # fmt: skip

    def arrivals(name: str, **extra: Any) -> None:
        spec = {**outcomes.arrivals(m.take_deliveries("newer")), **extra}
        cases.append({"name": name, "arrivals": {"newer": spec}, "within": 5})

    def event(wid: str) -> dict[str, Any]:
        info = {**_info(wid), "originatedFrom": "subject", "state": "queued", "startedAt": None}
        return frame_of("workload:submitted", {"workloadInfo": info})

    records = [{"$record": "newer"}, {"$record": "subject"}]
    local("announce", frame_of("nodes:update", {"nodes": records}, 1))
    m.nodes([{"nodeId": "newer"}])
    m.take_deliveries("newer")
    for theirs in ("1.99.0", "1.0.7", "1.2.0+other.build"):
        tag = theirs.replace(".", "-").replace("+", "-")
        cases.append({"name": f"answers-as-{tag}", "peer": "newer",
                      "respond": [{"status": 202,
                                   "headers": {"nvpair-contract-version": theirs}}]})  # fmt: skip
        local(f"event-{tag}", event(f"v-{tag}"))
        arrivals(f"minor-skew-{tag}-served")
    for theirs in ("2.0.0", "0.9.1"):
        tag = theirs.replace(".", "-")
        cases.append({"name": f"answers-as-{tag}", "peer": "newer",
                      "respond": [{"status": 409,
                                   "headers": {"nvpair-contract-version": theirs}}]})  # fmt: skip
        m.peer_down("newer")
        local(f"event-while-{tag}", event(f"v-{tag}"))
        cases.append({"name": f"{tag}-refused", "arrivals": {"newer": {"frames": [],
                      "refusedAtLeast": 1}}, "settle": 0.2})  # fmt: skip
        m.take_deliveries("newer")
        cases.append({"name": f"answers-again-after-{tag}", "peer": "newer", "respond": []})
        m.peer_up("newer")
        arrivals(f"probe-after-{tag}-repairs")
    return {
        "group": "generated-versions-as-client",
        "description": "generated by scripts/gen_vectors.py: the version rule as a client, the "
        "kit's peer answering as other contract versions; expectations from the model",
        "config": {
            "shutdown_grace": 1.0,
            "broadcast": {
                "retry_base": 0.02,
                "retry_max_delay": 0.2,
                "min_reconnect_interval": 0.05,
                "reconcile_interval": 0.1,
                "version_probe_interval": 0.3,
            },
        },
        "peers": [{"name": "newer", "protocols": ["h2", "http/1.1"]}],
        "startup": STARTUP,
        "cases": cases,
    }


def render() -> str:
    groups = [schema_group(), version_peer_group()]
    return json.dumps(groups, indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help=f"fail if {TARGET.name} is stale")
    args = parser.parse_args()
    text = render()
    rel = TARGET.relative_to(ROOT)
    if args.check:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text:
            sys.exit(f"{rel} is stale: run `make gen`")
        print(f"{rel} is up to date")
        return
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {rel}")


if __name__ == "__main__":
    main()
