"""Scale on paper: messages, bytes and CPU per event as the cluster grows (2 to 64 nodes).

Computed from what the other benchmarks measured in the same run (or, when run alone, in the
run saved in ``bench/results/latest.json``, said so in the notes), plus one measurement of its
own: the per-request pin check, whose cost grows with the number of files in ``trusted/``.

The design being modelled (``src/nvpair_wm/sync.py``, ``broadcaster.py``): every node pushes
the events its broker reports straight to every other node (a full mesh, no relaying), over one
connection per peer; a link sends each event alone while it is idle and batches what queued up
while its requests were in flight (up to 512 frames) when it is busy. So for one event in a
cluster of N nodes:

* messages: N-1 requests (and N-1 responses) when links are idle; about (N-1)/b when they are
  busy and batch b frames per request;
* bytes: N-1 times the bytes of one frame on the wire (plus a request's overhead when alone);
* CPU: the origin decodes it once from its broker (``c_in``) and sends it N-1 times (``s`` per
  peer), each of the N-1 receivers spends ``r`` on it.

Costs used (CPU seconds per event, one core, as measured):

* ``c_in``: the local channel, a real process (``local_channel``: stdio, CPU per frame);
* ``s`` and ``r``: from ``propagation``, per node CPU per event: ``r`` is a receiver's; the
  sender's per-peer part ``s`` is A's cost with three nodes minus with two (one more peer),
  batched (the sustained-rate runs) and unbatched (100 events/s: every event its own request);
* the pin check: ``r`` grows by (pin check with N-1 files - with 1 file) per request.

Saturation: a node is one event loop, so one core. If every node originates ``x`` events/s,
each node spends ``x * (c_in + (N-1) * (s + r))`` CPU-s per second: it saturates at
``x_max(N) = 1 / (c_in + (N-1)(s + r))``, and the whole cluster then carries ``N * x_max``
events/s, which tends to ``1 / (s + r)``: every node handles every event, so adding nodes adds
no capacity. If one node originates everything (a hot spot), it saturates first, at
``1 / (c_in + (N-1) s)`` events/s.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import RESULTS, BenchResult, Context, Measurement, Skip, fmt

NAME = "scale"
DESCRIPTION = "messages, bytes and CPU per event for 2..64 nodes, from the measured costs"

SIZES = (2, 4, 8, 16, 32, 64)
RATES = (10, 100, 1_000, 10_000)  # events/s originated per node
SOURCES = ("codec", "local_channel", "internode", "propagation")


def _load(ctx: Context) -> tuple[dict[str, dict[str, Any]], str]:
    """The inputs as JSON-like dicts, and where they come from."""
    found = {k: ctx.results[k].to_json() for k in SOURCES if k in ctx.results}
    found = {k: v for k, v in found.items() if not v.get("skipped")}
    where = "this run"
    if len(found) < len(SOURCES):
        try:
            saved = json.loads((RESULTS / "latest.json").read_text())
        except (OSError, ValueError):
            saved = {}
        for k in SOURCES:
            b = saved.get("benchmarks", {}).get(k)
            if k not in found and b and not b.get("skipped"):
                found[k] = b
                where = f"this run and bench/results/latest.json of {saved.get('date')}"
    return found, where


def _median(bench: dict[str, Any], key: str) -> float:
    for m in bench["measurements"]:
        if m["key"] == key:
            return float(statistics.median(m["samples"]))
    raise KeyError(key)


def pin_check_costs(ctx: Context) -> dict[int, list[float]]:
    """CPU seconds of one ``PinSet.is_pinned`` with N-1 certificates in trusted/ (the file
    count of an N-node cluster); one directory per size, the same certificate under N-1
    names (what is timed is the stat-signature scan, which does not read them)."""
    from nvpair_wm.clusterdir import cert_fingerprint, make_self_signed  # noqa: PLC0415
    from nvpair_wm.pins import PinSet  # noqa: PLC0415

    cert, _ = make_self_signed("pin-cost")
    fp = cert_fingerprint(cert)
    calls = ctx.size(2_000, 300)
    out: dict[int, list[float]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="nvpair-bench-pins-"))
    try:
        sets = {}
        for n in SIZES:
            d = tmp / f"n{n}"
            d.mkdir()
            for i in range(n - 1):
                (d / f"node-{i}.crt").write_bytes(cert)
            sets[n] = PinSet(d)
            assert sets[n].is_pinned(fp)
        for _ in range(ctx.reps):
            for n in SIZES:
                check = sets[n].is_pinned
                t0 = time.thread_time()
                for _ in range(calls):
                    check(fp)
                out.setdefault(n, []).append((time.thread_time() - t0) / calls)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def run(ctx: Context) -> BenchResult:
    found, where = _load(ctx)
    missing = [k for k in SOURCES if k not in found]
    if missing:
        raise Skip(f"needs the results of {', '.join(missing)} (run them first, or together)")
    res = BenchResult(NAME, DESCRIPTION)
    res.notes.append(f"inputs from {where}")

    lc, ig, pr, co = (
        found["local_channel"],
        found["internode"],
        found["propagation"],
        found["codec"],
    )
    costs = pr["params"]["costs"]
    c_in = _median(lc, "stdio/ns") * 1e-9
    codec_peer = 1.0 / _median(co, "ours")

    def node_cpu(kind: str, size: int, i: int) -> float:
        return float(costs[f"{kind}/{size}"]["cpu_s_per_event"][i])

    model: dict[str, dict[str, float]] = {}
    for kind, label in (("max", "batched"), ("low", "unbatched")):
        a2, a3 = node_cpu(kind, 2, 0), node_cpu(kind, 3, 0)
        r = statistics.median([node_cpu(kind, 2, 1), node_cpu(kind, 3, 1), node_cpu(kind, 3, 2)])
        s = a3 - a2
        note = ""
        if s <= 0:  # noise larger than one peer's cost: fall back to A's total as one peer
            s, note = a2, "(3-node minus 2-node was not positive: A's whole 2-node cost used)"
        model[label] = {"s": s, "r": r, "a2": a2, "a3": a3, "c_in": c_in, "note": note}  # type: ignore[dict-item]

    runs = ig["params"]["runs"]
    single = runs["ours/h2"]
    batch = runs["ours/h2_b100"]
    bytes_single = single["bytes_up_per_request"] + single["bytes_down_per_request"]
    bytes_batched = (batch["bytes_up_per_request"] + batch["bytes_down_per_request"]) / 100
    pin = pin_check_costs(ctx)
    pin_med = {n: statistics.median(v) for n, v in pin.items()}
    pin_base, pin_slope = _pin_line(pin_med)
    for n in SIZES:
        res.measurements.append(
            Measurement(
                f"pin/{n}",
                f"per-request pin check, {n - 1} file(s) in trusted/ ({n} nodes)",
                "ns/request",
                [x * 1e9 for x in pin[n]],
                higher_is_better=False,
                role="info",
                note="PinSet.is_pinned, CPU time of this thread",
            )
        )

    rows = []
    detail: dict[str, Any] = {}
    for n in SIZES:
        extra = pin_med[n] - pin_med[2]  # pin check growth, per request
        ub, b = model["unbatched"], model["batched"]
        r_u = ub["r"] + extra
        r_b = b["r"] + extra / 512
        cpu_u = c_in + (n - 1) * (ub["s"] + r_u)
        cpu_b = c_in + (n - 1) * (b["s"] + r_b)
        x_u = 1 / cpu_u
        x_b = 1 / cpu_b
        hot_u = 1 / (c_in + (n - 1) * ub["s"])
        hot_b = 1 / (c_in + (n - 1) * b["s"])
        rows.append(
            [
                str(n),
                f"{n - 1} / {(n - 1) / 100:.2f}",
                f"{fmt((n - 1) * bytes_single)} / {fmt((n - 1) * bytes_batched)}",
                f"{fmt(cpu_u * 1e6)} / {fmt(cpu_b * 1e6)}",
                f"{fmt(x_u)} / {fmt(x_b)}",
                f"{fmt(n * x_u)} / {fmt(n * x_b)}",
                f"{fmt(hot_u)} / {fmt(hot_b)}",
                fmt(extra * 1e6),
            ]
        )
        detail[str(n)] = {
            "messages_per_event_unbatched": n - 1,
            "messages_per_event_batch100": (n - 1) / 100,
            "bytes_per_event_unbatched": (n - 1) * bytes_single,
            "bytes_per_event_batched": (n - 1) * bytes_batched,
            "cluster_cpu_s_per_event_unbatched": cpu_u,
            "cluster_cpu_s_per_event_batched": cpu_b,
            "per_node_origin_rate_at_saturation_unbatched": x_u,
            "per_node_origin_rate_at_saturation_batched": x_b,
            "cluster_rate_at_saturation_unbatched": n * x_u,
            "cluster_rate_at_saturation_batched": n * x_b,
            "hot_spot_rate_unbatched": hot_u,
            "hot_spot_rate_batched": hot_b,
            "pin_check_growth_s_per_request": extra,
        }
    res.tables.append(
        {
            "title": "per event, unbatched (idle links: one request per event) / batched "
            "(busy links); CPU summed over the cluster; saturation = one node's core full",
            "columns": [
                "nodes",
                "requests/event (unbatched / batch of 100)",
                "bytes on the wire/event",
                "cluster CPU us/event",
                "events/s per node at saturation",
                "cluster events/s at saturation",
                "hot spot: one origin, events/s",
                "pin check growth us/request",
            ],
            "rows": rows,
        }
    )
    sat_rows = []
    sat: dict[str, Any] = {}
    for x in RATES:
        cells = [f"{x:,}"]
        for label in ("unbatched", "batched"):
            m = model[label]
            nodes = _saturating_size(
                x,
                c_in,
                m["s"],
                m["r"],
                per_file=pin_slope,
                batch=1 if label == "unbatched" else 512,
            )
            cells.append(nodes)
            sat[f"{x}/{label}"] = nodes
        sat_rows.append(cells)
    res.tables.append(
        {
            "title": "cluster size at which one node's CPU saturates, if every node originates "
            "x events/s (each node then receives (N-1)x)",
            "columns": ["x events/s per node", "unbatched costs", "batched costs"],
            "rows": sat_rows,
        }
    )
    res.tables.append(
        {
            "title": "the measured costs used (CPU us per event)",
            "columns": ["cost", "unbatched (100 events/s)", "batched (sustained)", "from"],
            "rows": [
                [
                    "c_in: broker -> table -> outbound",
                    fmt(c_in * 1e6),
                    fmt(c_in * 1e6),
                    "local_channel stdio",
                ],
                [
                    "s: sender, per peer",
                    fmt(model["unbatched"]["s"] * 1e6),
                    fmt(model["batched"]["s"] * 1e6),
                    "propagation: A(3 nodes) - A(2 nodes)",
                ],
                [
                    "r: receiver",
                    fmt(model["unbatched"]["r"] * 1e6),
                    fmt(model["batched"]["r"] * 1e6),
                    "propagation: median of B(2), B(3), C(3)",
                ],
                [
                    "(codec alone, Dispatcher.peer)",
                    fmt(codec_peer * 1e6),
                    fmt(codec_peer * 1e6),
                    "codec",
                ],
                [
                    "bytes on the wire per frame",
                    fmt(bytes_single),
                    fmt(bytes_batched),
                    "internode: h2 single / batch of 100, TLS records both ways",
                ],
            ],
        }
    )
    res.params["model"] = model
    res.params["sizes"] = detail
    res.params["saturating_size"] = sat
    res.params["pin_check_s"] = pin_med
    res.params["pin_check_fit"] = {"a_s": pin_base, "per_file_s": pin_slope}
    res.notes.append(
        f"pin check per request: {pin_base * 1e6:.1f} us + {pin_slope * 1e9:.0f} ns per file in "
        "trusted/ (least squares over the sizes measured): one stat per pinned peer per request"
    )
    res.params["bytes_per_frame"] = {"single": bytes_single, "batched": bytes_batched}
    for label in ("unbatched", "batched"):
        if model[label].get("note"):
            res.notes.append(f"{label}: {model[label]['note']}")
    res.notes.append(
        "bytes: TLS records as the load generator's sockets saw them (headers, frames, "
        "responses), no TCP/IP headers; a batched frame also carries 1/b of its request"
    )
    return res


def _pin_line(pin: dict[int, float]) -> tuple[float, float]:
    """Least-squares fit pin(N) = a + b (N - 1): the scan stats every file in trusted/."""
    xs = [n - 1 for n in pin]
    ys = list(pin.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - b * mx, b


def _saturating_size(
    x: float, c_in: float, s: float, r: float, *, per_file: float, batch: int
) -> str:
    """The smallest N at which x * (c_in + (N-1)(s + r + pin growth)) >= 1."""
    for n in range(2, 100_001):
        growth = per_file * (n - 2) / batch
        if x * (c_in + (n - 1) * (s + r + growth)) >= 1:
            return f"{n:,}"
    return "> 100,000"
