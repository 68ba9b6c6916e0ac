"""The codec path, implemented once per stack, all doing the same work on the same frames.

Per frame: NDJSON framing (partial reads, CRLF, a 1 MiB limit), decode + validate against the
InboundFrame schema, translation (state from the method; unknown fields dropped), dedup on
(runId, id, seq) - duplicates collapsed, stale events (lower seq than the newest seen) dropped -
and encoding of the broker-bound ``workloads:upsert`` line for each applied event.

* ``ours`` - nvpair-wm's sans-IO core: ``Dispatcher.peer`` when it exists (the whole path in one
  call), otherwise ``codec.decode`` + ``events.translate`` + ``WorkloadTable.observe`` +
  ``codec.encode_line`` composed here. Both are measured when both exist.
* ``jsonschema`` - ``json`` + a ``jsonschema`` Draft 2020-12 validator built once over
  InboundFrame (the registry holds every schema/ file by ``$id``).
* ``fastjsonschema`` - ``orjson`` + ``fastjsonschema`` compiled once from a bundled copy of
  InboundFrame (every ``$ref`` inlined).
* ``pydantic`` - pydantic v2 models generated from schema/ by datamodel-code-generator, the
  InboundFrame union discriminated on ``method``; ``model_validate_json`` and
  ``model_dump_json(exclude_unset=True)`` (absent stays absent).

The baselines share one framer (the same algorithm as the project's LineBuffer) and the same
dedup rule in a plain dict (runId, id) -> newest seq. Each implementation has a tight ``full``
loop (the headline number) and the stage functions used for the per-stage breakdown.
"""

# Imports are deferred on purpose: an implementation whose modules do not exist (yet) is left
# out of the run with a note instead of breaking it, and heavy baselines load only when built.
# ruff: noqa: PLC0415

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

from bench.frames import STATE
from bench.harness import Role

MAX_FRAME = 1 << 20
UPSERT_HEAD = {"jsonrpc": "2.0", "method": "workloads:upsert"}


class DedupDict:
    """The dedup rule in a plain dict: (runId, id) -> newest seq."""

    __slots__ = ("duplicates", "newest", "stale")

    def __init__(self) -> None:
        self.newest: dict[tuple[str, str], int] = {}
        self.duplicates = 0
        self.stale = 0

    def applies(self, run_id: str, wid: str, seq: int) -> bool:
        key = (run_id, wid)
        prev = self.newest.get(key)
        if prev is not None:
            if seq == prev:
                self.duplicates += 1
                return False
            if seq < prev:
                self.stale += 1
                return False
        self.newest[key] = seq
        return True


class Impl:
    """Interface: ``new()`` fresh state; ``full(state, chunks) -> upsert lines``; and the stage
    functions ``framer``, ``decode(line)``, ``apply(state, frame) -> info | None`` (translate +
    dedup), ``encode(info) -> line`` for the breakdown."""

    key: str
    label: str
    role: Role = "baseline"
    note: str = ""

    def new(self) -> Any:
        raise NotImplementedError

    def full(self, state: Any, chunks: list[bytes]) -> list[bytes]:
        """Frame, decode + validate, translate + dedup, encode: the baselines' whole path."""
        framer = self.framer()
        decode, apply, encode = self.decode, self.apply, self.encode
        out = []
        for chunk in chunks:
            for line in framer.feed(chunk):
                if not isinstance(line, bytes):
                    continue  # over the size limit: a real server answers -32000; none here
                info = apply(state, decode(line))
                if info is not None:
                    out.append(encode(info))
        return out

    def framer(self) -> Any:
        """Framing is not what the baselines compare: every side uses the project's own."""
        from nvpair_wm.codec import LineBuffer

        return LineBuffer(MAX_FRAME)

    def decode(self, line: bytes) -> Any:
        raise NotImplementedError

    def apply(self, state: Any, frame: Any) -> Any:
        raise NotImplementedError

    def encode(self, info: Any) -> bytes:
        raise NotImplementedError

    def accepts(self, line: bytes) -> bool:
        """Whether the validator lets this frame through (for the sanity check on bad frames)."""
        try:
            self.decode(line)
        except Exception:
            return False
        return True


# ------------------------------------------------------------------------------ dict baselines


class _DictImpl(Impl):
    """Shared by the two baselines whose decoder yields plain dicts."""

    def __init__(self) -> None:
        from bench.schemas import info_properties

        self.allowed = info_properties()

    def new(self) -> Any:
        return DedupDict()

    def apply(self, state: DedupDict, obj: dict[str, Any]) -> dict[str, Any] | None:
        new_state = STATE.get(obj["method"])
        if new_state is None:
            return None  # removals, nodes:update... are not in this corpus
        wi = obj["params"]["workloadInfo"]
        if not state.applies(wi["runId"], wi["id"], wi["seq"]):
            return None
        out = {k: wi[k] for k in self.allowed if k in wi}
        out["state"] = new_state
        return out


class JsonJsonschema(_DictImpl):
    key = "jsonschema"
    label = "json + jsonschema"
    note = "Draft202012Validator over InboundFrame (oneOf), built once; validate() per frame"

    def __init__(self, *, dispatch: bool = False) -> None:
        super().__init__()
        from jsonschema import Draft202012Validator

        from bench.schemas import INBOUND, documents, registry

        reg = registry()
        inbound = documents()[INBOUND]
        if dispatch:
            # A stronger variant: pick the branch by method, validate only that branch.
            self.key = "jsonschema_dispatch"
            self.label = "json + jsonschema by method"
            self.note = "one Draft202012Validator per InboundFrame branch, picked by method"
            self.role = "info"
            by_method = {}
            for branch in inbound["oneOf"]:
                uri = urljoin(INBOUND, branch["$ref"])
                contents = reg.resolver().lookup(uri).contents
                by_method[contents["properties"]["method"]["const"]] = Draft202012Validator(
                    {"$ref": uri}, registry=reg
                )
            self._by_method = by_method
            self.decode = self._decode_dispatch  # type: ignore[method-assign]
        else:
            self.validator = Draft202012Validator(inbound, registry=reg)

    def decode(self, line: bytes) -> Any:
        obj = json.loads(line)
        self.validator.validate(obj)
        return obj

    def _decode_dispatch(self, line: bytes) -> Any:
        obj = json.loads(line)
        v = self._by_method.get(obj.get("method")) if isinstance(obj, dict) else None
        if v is None:
            raise ValueError("unknown method")
        v.validate(obj)
        return obj

    def encode(self, info: dict[str, Any]) -> bytes:
        frame = {**UPSERT_HEAD, "params": {"workloadInfo": info}}
        return json.dumps(frame, separators=(",", ":")).encode() + b"\n"


class OrjsonFastjsonschema(_DictImpl):
    key = "fastjsonschema"
    label = "orjson + fastjsonschema"
    note = "fastjsonschema.compile(bundled InboundFrame, use_default=False), built once"

    def __init__(self) -> None:
        super().__init__()
        import fastjsonschema
        import orjson

        from bench.schemas import bundled

        self.validate = fastjsonschema.compile(bundled(), use_default=False)
        self.loads = orjson.loads
        self.dumps = orjson.dumps
        self.opt = orjson.OPT_APPEND_NEWLINE

    def decode(self, line: bytes) -> Any:
        obj = self.loads(line)
        self.validate(obj)
        return obj

    def encode(self, info: dict[str, Any]) -> bytes:
        return self.dumps({**UPSERT_HEAD, "params": {"workloadInfo": info}}, option=self.opt)


# ------------------------------------------------------------------------------------ pydantic


class Pydantic(Impl):
    key = "pydantic"
    label = "pydantic v2"
    note = "datamodel-codegen pydantic_v2 models; InboundFrame discriminated on method"

    def __init__(self) -> None:
        from bench.schemas import pydantic_models

        mods = pydantic_models()
        self.frame_model = mods["inbound_frame_schema"].InboundFrame
        up = mods["workloads_upsert_schema"]
        self.Upsert = up.WorkloadsUpsert
        self.UpsertParams = up.UpsertParams

    def new(self) -> Any:
        return DedupDict()

    def decode(self, line: bytes) -> Any:
        # strict: a JSON string is not an integer, as in the schema (lax mode would take "3").
        return self.frame_model.model_validate_json(line, strict=True).root

    def apply(self, state: DedupDict, frame: Any) -> Any:
        new_state = STATE.get(frame.method)
        if new_state is None:
            return None
        info = frame.params.workloadInfo
        if not state.applies(info.runId, info.id, info.seq):
            return None
        if info.state != new_state:
            info = info.model_copy(update={"state": new_state})
        return info

    def encode(self, info: Any) -> bytes:
        frame = self.Upsert(
            jsonrpc="2.0", method="workloads:upsert", params=self.UpsertParams(workloadInfo=info)
        )
        # The models are built at run time, so mypy sees Any.
        line: bytes = frame.model_dump_json(exclude_unset=True).encode() + b"\n"
        return line


class PydanticTuned(Pydantic):
    """The same, with the encode a performance-minded pydantic user would write: the frame
    head spliced around the serializer's bytes (no wrapper models, no str round trip)."""

    key = "pydantic_tuned"
    label = "pydantic v2, spliced encode"
    role = "info"
    note = "as pydantic, but encode = head + __pydantic_serializer__.to_json(info) + tail"
    HEAD = b'{"jsonrpc":"2.0","method":"workloads:upsert","params":{"workloadInfo":'

    def encode(self, info: Any) -> bytes:
        body: bytes = info.__pydantic_serializer__.to_json(info, exclude_unset=True)
        return self.HEAD + body + b"}}\n"


# ----------------------------------------------------------------------------------------- ours


class OursComposed(Impl):
    """nvpair-wm's sans-IO modules composed by hand: LineBuffer, decode, translate, observe,
    encode_line (what a dispatcher does for a peer frame)."""

    key = "ours_composed"
    label = "ours: modules composed"
    role = "subject"
    note = "LineBuffer.feed, codec.decode, events.translate, WorkloadTable.observe, encode_line"

    def __init__(self) -> None:
        from nvpair_wm import codec, dedup, events

        self.codec, self.dedup, self.events = codec, dedup, events

    def new(self) -> Any:
        return self.dedup.WorkloadTable()

    def framer(self) -> Any:
        return self.codec.LineBuffer()

    def decode(self, line: bytes) -> Any:
        return self.codec.decode(line).items[0]

    def accepts(self, line: bytes) -> bool:
        return not isinstance(self.decode(line), self.codec.RpcError)

    def apply(self, table: Any, frame: Any) -> Any:
        if not isinstance(frame, self.events.LIFECYCLE_TYPES):
            return None
        info = self.events.translate(frame)
        return info if table.observe(info, 0.0) == "applied" else None

    def encode(self, info: Any) -> bytes:
        return self.codec.encode_line(self.events.upsert(info))

    def full(self, table: Any, chunks: list[bytes]) -> list[bytes]:
        codec, events = self.codec, self.events
        lb = codec.LineBuffer()
        decode, translate, upsert, encode_line = (
            codec.decode,
            events.translate,
            events.upsert,
            codec.encode_line,
        )
        lifecycle, too_large = events.LIFECYCLE_TYPES, codec.TooLarge
        observe = table.observe
        now = time.monotonic()
        out = []
        for chunk in chunks:
            for line in lb.feed(chunk):
                if isinstance(line, too_large):
                    continue
                for item in decode(line).items:
                    if isinstance(item, lifecycle):
                        info = translate(item)
                        if observe(info, now) == "applied":
                            out.append(encode_line(upsert(info)))
        return out


class OursDispatcher(Impl):
    """The whole path in one sans-IO call per frame: ``Dispatcher.peer(body)``."""

    key = "ours"
    label = "ours: Dispatcher.peer"
    role = "subject"
    note = "LineBuffer.feed + Dispatcher.peer(line) -> PeerResult.to_broker"

    def __init__(self, make: Callable[[], Any]) -> None:
        from nvpair_wm import codec, dispatch  # noqa: F401  (ImportError: not there yet)

        self.codec = codec
        self.make = make

    def new(self) -> Any:
        return self.make()

    def accepts(self, line: bytes) -> bool:
        logger = logging.getLogger("nvpair_wm.dispatch")
        level, logger.disabled = logger.disabled, True  # refusals are logged at warning
        try:
            return bool(self.new().peer(line).status == 202)
        finally:
            logger.disabled = level

    def full(self, disp: Any, chunks: list[bytes]) -> list[bytes]:
        lb = self.codec.LineBuffer()
        too_large = self.codec.TooLarge
        peer = disp.peer
        out: list[bytes] = []
        for chunk in chunks:
            for line in lb.feed(chunk):
                if isinstance(line, too_large):
                    continue
                out.extend(peer(line).to_broker)
        return out


def make_dispatcher(limits: Any = None, clock: Callable[[], float] = time.monotonic) -> Any:
    """A Dispatcher as the node builds one (default table limits, the real monotonic clock);
    the status callback is never called on the peer path."""
    from nvpair_wm.dedup import WorkloadTable
    from nvpair_wm.dispatch import Dispatcher

    def no_status() -> Any:
        raise AssertionError("manager:status is not part of this benchmark")

    return Dispatcher(WorkloadTable(limits), no_status, clock)


def available() -> tuple[list[Impl], list[str]]:
    """Every implementation that can be built here, and why any could not."""
    impls: list[Impl] = []
    notes: list[str] = []
    try:
        impls.append(OursDispatcher(make_dispatcher))
    except ImportError as exc:
        notes.append(f"Dispatcher.peer not measured: {exc}")
    try:
        impls.append(OursComposed())
    except Exception as exc:
        notes.append(f"nvpair-wm composed path not measured: {exc!r}")
    impls += [JsonJsonschema(), JsonJsonschema(dispatch=True), OrjsonFastjsonschema()]
    impls += [Pydantic(), PydanticTuned()]
    return impls, notes
