"""``nvpair-wm status``: ask a running node for its account of itself and print it.

The node serves ``GET /status`` on its ``--metrics`` listener (loopback by default): a
``NodeStatus`` (schema/node-status.schema.json). This command fetches it, checks it against the
contract (the generated type: a node that answers something else is named as such), and prints
its peers (state, versions, queue, last success, retries, give-ups), its journal and its
counters as tables, or the document itself with ``--json``. Where to ask: ``--metrics
ADDR:PORT``, else the ``metrics`` key of ``--config FILE``, else the packaged unit's
``127.0.0.1:9464``. No node answering is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final, NoReturn

import msgspec
from nvpair_wm_schema.node_status_schema import NodeStatus

from nvpair_wm import config
from nvpair_wm.cmdline import OneLineParser
from nvpair_wm.config import ConfigError
from nvpair_wm.errors import StatusUnavailable

__all__ = ["DEFAULT_ADDRESS", "fetch", "main", "render"]

#: The metrics listener of the packaged unit (packaging/nvpair-wm.service).
DEFAULT_ADDRESS: Final = "127.0.0.1:9464"
TIMEOUT: Final = 5.0  # seconds to connect and read the answer
MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024  # a status of thousands of peers fits


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="nvpair-wm status",
        description="Print a running node's peers, journal and counters (GET /status on its "
        "--metrics listener).",
    )
    p.add_argument(
        "--metrics",
        metavar="ADDR:PORT",
        help=f"the node's --metrics listener (default: the metrics key of --config, else "
        f"{DEFAULT_ADDRESS})",
    )
    p.add_argument("--config", type=Path, metavar="FILE", help="the node's --config file")
    p.add_argument("--json", action="store_true", help="print the NodeStatus document as JSON")
    return p


def _fail(message: str) -> NoReturn:
    sys.stderr.write(f"nvpair-wm status: {' '.join(message.split())}\n")
    raise SystemExit(1)


def address_of(metrics: str | None, config_file: Path | None) -> tuple[str, int]:
    """Where to ask: the flag, else the file's ``metrics``, else the unit's default."""
    text = metrics
    if text is None and config_file is not None:
        try:
            text = config.load(config_file).metrics
        except ConfigError as exc:
            raise StatusUnavailable(f"--config {config_file}: {exc}") from None
        if text is None:
            raise StatusUnavailable(
                f'--config {config_file} sets no metrics listener (metrics = "ADDR:PORT"): '
                "the node serves its status there"
            )
    try:
        return config.metrics_address(text or DEFAULT_ADDRESS)
    except ValueError as exc:
        raise StatusUnavailable(f"--metrics: {exc}") from None


def fetch(host: str, port: int, timeout: float = TIMEOUT) -> tuple[NodeStatus, bytes]:
    """The node's status (checked against the contract) and the raw document."""
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{port}/status"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            body: bytes = answer.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise StatusUnavailable(
            f"{url} answered HTTP {exc.code}: not an nvpair-wm node's metrics listener (or an "
            "older one, without /status)"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StatusUnavailable(
            f"no node answers at {url} ({reason}); is it running with --metrics "
            f"{shown_host}:{port}?"
        ) from None
    if len(body) > MAX_ANSWER_BYTES:
        raise StatusUnavailable(f"{url}: the answer is over {MAX_ANSWER_BYTES} bytes")
    try:
        return msgspec.json.decode(body, type=NodeStatus), body
    except msgspec.ValidationError as exc:
        raise StatusUnavailable(
            f"{url} answered something that is not a node status: {exc}"
        ) from None
    except msgspec.DecodeError as exc:
        raise StatusUnavailable(f"{url} answered something that is not JSON: {exc}") from None


def _ago(epoch_ms: int | None, now: float) -> str:
    if epoch_ms is None:
        return "never"
    seconds = max(0.0, now - epoch_ms / 1000)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"


def _utc(epoch_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_ms / 1000))


def render(status: NodeStatus, now: float | None = None, width: int | None = None) -> str:
    """The tables ``nvpair-wm status`` prints (rich; plain text when not on a terminal)."""
    import io  # noqa: PLC0415 - rendering only

    from rich.console import Console  # noqa: PLC0415 - rendering only
    from rich.table import Table  # noqa: PLC0415

    now = time.time() if now is None else now
    out = io.StringIO()
    tty = sys.stdout.isatty()
    console = Console(file=out, force_terminal=tty, width=width or (None if tty else 160))
    identity = status.fingerprint[:16] + "…" if status.fingerprint else "none"
    port = status.port if status.port is not None else "not listening"
    j = status.journal
    journal = j.state if j.state != "failing" else f"failing since {_ago(j.failingSince, now)}"
    if j.lastError:
        journal += f" ({j.lastError})"
    cfg = status.config
    console.print(
        f"nvpair-wm {status.version} (contract {status.contractVersion}), port {port}, "
        f"identity {identity}\njournal {journal}; configuration generation {cfg.generation}, "
        f"loaded {_utc(cfg.loadedAt)}"
    )
    peers = Table(title=f"peers ({len(status.peers)})", title_justify="left")
    for column in ("peer", "address", "state", "protocol", "contract", "software"):
        peers.add_column(column)
    for column in ("queue", "last success", "sent", "retried", "dropped", "given up"):
        peers.add_column(column, justify="right")
    peers.add_column("last error")
    for p in status.peers:
        state = p.state if isinstance(p.state, str) else ("connected" if p.connected else "-")
        last_ok = p.lastSuccessAt if isinstance(p.lastSuccessAt, int) else None
        given_up = p.givenUp if isinstance(p.givenUp, int) else "-"
        error = f"{p.lastError} ({_ago(p.lastErrorAt, now)})" if p.lastError else ""
        peers.add_row(
            p.nodeId,
            f"{p.address}:{p.port}",
            state,
            p.protocol or "",
            p.contractVersion if isinstance(p.contractVersion, str) else "",
            p.softwareVersion if isinstance(p.softwareVersion, str) else "",
            str(p.queueDepth),
            _ago(last_ok, now),
            str(p.sent),
            str(p.retried),
            str(p.dropped),
            str(given_up),
            error,
        )
    console.print(peers)
    c = status.counters
    counters = Table(title="counters", title_justify="left")
    names = (
        "frames in",
        "frames out",
        "invalid",
        "duplicates",
        "stale",
        "suppressed",
        "evicted",
        "workloads",
        "tombstones",
        "broker queue",
    )
    for name in names:
        counters.add_column(name, justify="right")
    counters.add_row(
        *(
            str(v)
            for v in (
                c.framesIn,
                c.framesOut,
                c.invalid,
                c.duplicates,
                c.stale,
                c.suppressed,
                c.evicted,
                c.workloads,
                c.tombstones,
                c.brokerQueue,
            )
        )
    )
    console.print(counters)
    return out.getvalue()


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        host, port = address_of(args.metrics, args.config)
        status, body = fetch(host, port)
    except StatusUnavailable as exc:
        _fail(str(exc))
    if args.json:
        sys.stdout.write(body.decode().rstrip("\n") + "\n")
    else:
        sys.stdout.write(render(status))
    return 0
