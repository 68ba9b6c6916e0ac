"""Codec: frames per second on one core through the whole per-frame path, ours and baselines.

Path per frame: NDJSON framing -> decode + validate (InboundFrame) -> translate (state from the
method, unknown fields dropped) -> dedup on (runId, id, seq) -> encode the broker-bound
``workloads:upsert`` line. Every implementation (see ``bench/codec_impls.py``) runs on the same
corpus (``bench/frames.py``: five lifecycle methods, ~1,500 distinct workloads per 5,000 frames,
~8 % duplicates, ~3 % stale, ~5 % with an unknown field), fed as 64 KiB reads, with fresh
dedup state for each pass. Before timing, every implementation's output is compared with the
jsonschema baseline's, frame by frame (parsed), so all sides provably do the same work.

Issue targets: >= 20x the jsonschema path, >= 1.3x the pydantic path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from bench.codec_impls import Impl, available
from bench.frames import corpus, describe, ndjson_chunks
from bench.harness import (
    BenchResult,
    Case,
    Context,
    Measurement,
    fmt,
    measure_rates,
    pin_to_one_core,
    unpin,
)

NAME = "codec"
DESCRIPTION = "per-frame path on one core: framing, decode+validate, translate, dedup, encode"

TARGETS = {"jsonschema": 20.0, "pydantic": 1.3}
MEANINGS = {
    "jsonschema": "the codec's CPU per frame (decode, validate, dedup, encode) is over the "
    "issue's budget: look for a regression in codec.py or dispatch.py (bench.profile)",
    "pydantic": "the generated msgspec path lost its edge over a pydantic model of the same "
    "schemas: look for a regression in codec.py or dispatch.py (bench.profile)",
}
STAGES = ("framing", "decode+validate", "translate+dedup", "encode")


def _check_outputs(impls: list[Impl], chunks: list[bytes], res: BenchResult) -> list[Impl]:
    """Run each implementation once; keep those whose output equals the reference's."""
    ref_impl = next(i for i in impls if i.key == "jsonschema")
    reference = [json.loads(x) for x in ref_impl.full(ref_impl.new(), chunks)]
    res.params["upserts_per_pass"] = len(reference)
    kept = []
    for impl in impls:
        try:
            out = [json.loads(x) for x in impl.full(impl.new(), chunks)]
        except Exception as exc:
            res.notes.append(f"{impl.label}: failed on the corpus ({exc!r}); not measured")
            continue
        if out != reference:
            pairs = enumerate(zip(out, reference, strict=False))
            first = next((i for i, (a, b) in pairs if a != b), None)
            res.notes.append(
                f"{impl.label}: output differs from the jsonschema baseline "
                f"({len(out)} vs {len(reference)} upserts, first difference at {first}); "
                "not measured"
            )
            continue
        kept.append(impl)
    res.notes.append(
        f"outputs checked: {', '.join(i.key for i in kept)} produce the same "
        f"{len(reference)} upserts (parsed JSON equal, same order) on the corpus"
    )
    # And each really validates: every one must refuse these (the schema does).
    good = json.loads(chunks[0].split(b"\n", 1)[0])
    rows = []
    for impl in kept:
        verdicts = [impl.accepts(_mutate(good, *m[1:])) for m in BAD_FRAMES]
        rows.append([impl.label, *("ACCEPTED" if v else "refused" for v in verdicts)])
    res.tables.append(
        {
            "title": "sanity: frames the schema refuses (the timed corpus has none)",
            "columns": ["variant", *(m[0] for m in BAD_FRAMES)],
            "rows": rows,
        }
    )
    res.params["bad_frames"] = {r[0]: r[1:] for r in rows}
    return kept


BAD_FRAMES: list[tuple[str, str, Any]] = [
    ("seq 0", "seq", 0),
    ('seq "3"', "seq", "3"),
    ("seq 1.5", "seq", 1.5),
    ("no runId", "runId", KeyError),
    ("scheduledOn null", "scheduledOn", None),
    ("state bogus", "state", "bogus"),
    ("model too long", "model", "m" * 513),
    ("unknown method", "method", "workload:bogus"),
]


def _mutate(frame: dict[str, Any], field: str, value: Any) -> bytes:
    f = json.loads(json.dumps(frame))
    target = f if field == "method" else f["params"]["workloadInfo"]
    if value is KeyError:
        del target[field]
    else:
        target[field] = value
    return json.dumps(f, separators=(",", ":")).encode()


def _ns(m: Measurement) -> Measurement:
    """frames/s -> ns/frame, sample by sample."""
    return Measurement(
        m.key,
        m.label,
        "ns/frame",
        [1e9 / x for x in m.samples],
        higher_is_better=False,
        role=m.role,
        note=m.note,
    )


def _breakdown(
    impls: list[Impl], frames: list[bytes], ctx: Context, min_rep: float
) -> tuple[dict[str, dict[str, Measurement]], dict[str, str]]:
    """Each stage timed alone on the previous stage's (precomputed) output, in ns per input
    frame, so the stages add up to about the whole path."""
    chunks = ndjson_chunks(frames)
    n = len(frames)
    cases: list[Case] = []
    skipped: dict[str, str] = {}
    for impl in impls:
        if impl.key.startswith("jsonschema"):
            # Validation is >99 % of these (see the whole path): timing their other stages
            # would cost a minute for nothing.
            skipped[impl.key] = "validation is the whole cost"
            continue
        try:
            lines = [x for x in impl.framer().feed(b"".join(chunks)) if isinstance(x, bytes)]
            decoded = [impl.decode(x) for x in lines]
            st = impl.new()
            infos = [i for i in (impl.apply(st, f) for f in decoded) if i is not None]
        except NotImplementedError:
            skipped[impl.key] = "whole path in one call"
            continue

        def framing(_: Any, impl: Impl = impl) -> None:
            fr = impl.framer()
            for c in chunks:
                fr.feed(c)

        def decoding(_: Any, impl: Impl = impl, lines: list[bytes] = lines) -> None:
            dec = impl.decode
            for x in lines:
                dec(x)

        def applying(state: Any, impl: Impl = impl, decoded: list[Any] = decoded) -> None:
            ap = impl.apply
            for f in decoded:
                ap(state, f)

        def encoding(_: Any, impl: Impl = impl, infos: list[Any] = infos) -> None:
            enc = impl.encode
            for i in infos:
                enc(i)

        runs: tuple[Callable[[Any], None], ...] = (framing, decoding, applying, encoding)
        setups: tuple[Callable[[], Any] | None, ...] = (None, None, impl.new, None)
        for stage, fn, setup in zip(STAGES, runs, setups, strict=True):
            cases.append(
                Case(
                    f"{impl.key}/{stage}",
                    f"{impl.label}: {stage}",
                    fn,
                    setup or (lambda: None),
                    work=n,
                    warmup=1,
                )
            )
    ms = measure_rates(cases, ctx, unit="frames/s", min_rep_seconds=min_rep)
    out: dict[str, dict[str, Measurement]] = {}
    for m in ms:
        impl_key, stage = m.key.split("/")
        out.setdefault(impl_key, {})[stage] = _ns(m)
    return out, skipped


def _whole_path(impl: Impl, chunks: list[bytes]) -> Callable[[Any], list[bytes]]:
    """The timed run of a Case: ``impl``'s whole path over ``chunks`` from a fresh state."""

    def full(state: Any) -> list[bytes]:
        return impl.full(state, chunks)

    return full


def run(ctx: Context) -> BenchResult:
    n = ctx.size(5_000, 1_000)
    frames = corpus(n)
    chunks = ndjson_chunks(frames)
    res = BenchResult(NAME, DESCRIPTION)
    res.params["corpus"] = describe(frames)
    res.params["read_size"] = 65_536

    t0 = time.perf_counter()
    impls, notes = available()
    res.notes += notes
    res.params["setup_seconds"] = round(time.perf_counter() - t0, 2)
    impls = _check_outputs(impls, chunks, res)
    subject = next((i.key for i in impls if i.key == "ours"), None) or next(
        (i.key for i in impls if i.key == "ours_composed"), None
    )
    for i in impls:
        if i.key.startswith("ours"):
            i.role = "subject" if i.key == subject else "info"

    before, core = pin_to_one_core()
    res.params["pinned_to_cpu"] = core
    min_rep = 0.08 if ctx.quick else 0.3
    try:
        cases = [
            Case(
                impl.key,
                impl.label,
                _whole_path(impl, chunks),
                impl.new,
                work=n,
                role=impl.role,
                note=impl.note,
                # The slow baselines are warm after one pass of thousands of frames.
                warmup=1 if impl.key.startswith("jsonschema") else None,
            )
            for impl in impls
        ]
        res.measurements = measure_rates(cases, ctx, unit="frames/CPU-s", min_rep_seconds=min_rep)
        sub = ctx.size(1_000, 300)
        stages, skipped = _breakdown(impls, frames[:sub], ctx, min_rep / 3)
    finally:
        unpin(before)

    if subject:
        for base in (
            "jsonschema",
            "jsonschema_dispatch",
            "fastjsonschema",
            "pydantic",
            "pydantic_tuned",
        ):
            res.ratio(subject, base, TARGETS.get(base), MEANINGS.get(base, ""))
        if subject == "ours":
            res.ratio("ours", "ours_composed")
    else:
        res.notes.append("nvpair-wm's codec modules are not importable: baselines only")

    rows = []
    for impl in impls:
        st = stages.get(impl.key)
        full_ns = 1e9 / res.get(impl.key).median
        if st is None:
            rows.append([impl.label, *["-"] * len(STAGES), "-", fmt(full_ns)])
            continue
        meds = [st[s].median for s in STAGES]
        rows.append([impl.label, *map(fmt, meds), fmt(sum(meds)), fmt(full_ns)])
    res.tables.append(
        {
            "title": f"ns per frame by stage (median, first {sub} frames, each stage alone)",
            "columns": ["variant", *STAGES, "sum", "whole path"],
            "rows": rows,
        }
    )
    res.params["breakdown"] = {
        k: {s: {**m.summary(), "samples": m.samples} for s, m in v.items()}
        for k, v in stages.items()
    }
    res.params["breakdown_frames"] = sub
    res.params["breakdown_skipped"] = skipped
    c = res.params["corpus"]
    res.notes.append(
        f"corpus: {c['frames']} frames, {c['bytes_per_frame']:.0f} B each, {c['workloads']} "
        f"workloads, {c['duplicates']} duplicates, {c['stale']} stale, "
        f"{c['with_unknown_field']} with an unknown field; one core (cpu {core}); "
        "frames/CPU-s = frames in / CPU time of this thread for a pass (wall-clock "
        "medians alongside), fresh dedup state per pass"
    )
    return res
