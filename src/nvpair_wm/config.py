"""Every limit and tunable of the daemon in one :class:`Config`, set by ``--config FILE``.

The sans-IO modules own their limits as frozen dataclasses (``TableLimits`` in ``dedup``,
``Limits`` in ``http.core``, ``BroadcastLimits`` in ``outbox``, ``BrokerLimits`` in ``local``,
``PinLimits`` in ``pins``, ``TLSPolicy`` in ``tls_contexts``); this module composes them and reads
them from TOML (standard library ``tomllib``). The file mirrors the dataclasses: :class:`Config`'s
own scalars are top-level keys, each nested dataclass is a table (``[broadcast]``, ``[http]``,
...). Fields are discovered with :func:`dataclasses.fields`, so a field added to any of those
dataclasses is settable, checked and documented (the table of docs/configuration.md) without a
change here.

Units: seconds for every float, bytes for sizes (``*_bytes``, bodies, windows, budgets), a plain
count otherwise (:func:`unit`), except the keys in :data:`UNITS` (``journal.compact_growth`` is
a ratio). A value of the wrong type, out of range, or an unknown key is a :class:`ConfigError`
naming the key; the command line turns it into one line and exit 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import io
import math
import tokenize
import tomllib
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Final

from nvpair_wm_schema.contract import DEFAULT_PORT

from nvpair_wm import codec, logs
from nvpair_wm.dedup import TableLimits
from nvpair_wm.errors import ConfigError  # defined there; still importable from here
from nvpair_wm.http.core import Limits
from nvpair_wm.journal import JournalLimits
from nvpair_wm.local import BrokerLimits
from nvpair_wm.outbox import BroadcastLimits
from nvpair_wm.pins import PinLimits
from nvpair_wm.tls_contexts import TLS_VERSIONS, TLSPolicy

__all__ = [
    "Config",
    "ConfigError",
    "Key",
    "dumps",
    "every_key",
    "key_names",
    "load",
    "loads",
    "markdown_table",
    "ordered_key_names",
    "parse",
    "replace",
    "toml_value",
]

LOG_LEVELS: Final = ("error", "warn", "info", "debug")
LOG_FORMATS: Final = logs.FORMATS
PEER_PROTOCOLS: Final = ("h2", "http/1.1")


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration of one node: flags, ``--config`` file, defaults, in that order."""

    port: int = DEFAULT_PORT  # inter-node port to listen on and advertise; 0 picks a free one
    bind: str | None = None  # listen on this address only (default: every interface)
    ipc: str | None = None  # broker endpoint to dial instead of stdio
    cluster_dir: Path | None = None  # node.crt, node.key and trusted/
    log_level: str = "info"  # error, warn, info or debug
    log_format: str = "auto"  # auto (rich on a terminal, else plain), plain or json
    max_frame: int = codec.MAX_FRAME_BYTES  # one JSON-RPC frame (broker line or peer body)
    max_batch: int = codec.MAX_BATCH_FRAMES  # frames in one batch (line or body); more: refused
    shutdown_grace: float = 5.0  # at exit: time to finish requests and flush queues
    metrics: str | None = None  # serve Prometheus metrics at ADDR:PORT (plain HTTP); off unset
    broker: BrokerLimits = field(default_factory=BrokerLimits)
    table: TableLimits = field(default_factory=TableLimits)
    http: Limits = field(default_factory=Limits)
    broadcast: BroadcastLimits = field(default_factory=BroadcastLimits)
    pins: PinLimits = field(default_factory=PinLimits)
    journal: JournalLimits = field(default_factory=JournalLimits)
    tls: TLSPolicy = field(default_factory=TLSPolicy)


METRICS_DEFAULT_HOST: Final = "127.0.0.1"  # --metrics binds loopback unless told otherwise


def metrics_address(text: str) -> tuple[str, int]:
    """``ADDR:PORT``, ``[V6]:PORT``, ``:PORT`` or ``PORT`` (loopback) → (host, port).

    Raises ValueError with a message fit for the command line.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"an IPv6 address goes in brackets, [{host}]:PORT: {text!r}")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"not ADDR:PORT with a port from 0 to 65535: {text!r}")
    return host or METRICS_DEFAULT_HOST, int(port_text)


# -- ranges: what every value must satisfy --------------------------------------------------------

_INT_MAX: Final = 2**53 - 1
_H2_MAX: Final = 2**31 - 1  # HTTP/2 settings and windows
_SECONDS_MAX: Final = 1e9  # ~31 years: anything larger is a typo (and overflows timers)

#: Explicit (low, high) bounds; other ints are >= 1, other floats > 0 (see _bounds).
RANGES: Final[dict[str, tuple[float, float]]] = {
    "port": (0, 65535),
    "max_frame": (64, 2**31 - 1),
    "broker.dial_timeout": (0.0, _SECONDS_MAX),
    "broadcast.max_retry_after": (0.0, _SECONDS_MAX),
    "http.h2_max_frame_size": (16_384, 16_777_215),  # RFC 9113 §6.5.2
    "http.h2_initial_window_size": (1, _H2_MAX),
    "http.h2_connection_window": (65_535, _H2_MAX),
    "pins.max_file_bytes": (1, 2**31 - 1),
    "journal.fsync_interval": (0.0, _SECONDS_MAX),  # 0: fsync every write
    "journal.compact_growth": (0.0, 100.0),  # 0: compact_min_records alone decides
}

#: Allowed values of string keys (each element, for lists).
CHOICES: Final[dict[str, tuple[str, ...]]] = {
    "log_level": LOG_LEVELS,
    "log_format": LOG_FORMATS,
    "broadcast.protocols": PEER_PROTOCOLS,
    "tls.min_version": TLS_VERSIONS,
}

#: Units the naming rule of :func:`unit` would get wrong.
UNITS: Final[dict[str, str]] = {
    "port": "",
    "max_frame": "bytes",
    "http.h2_max_decoded_header_list": "bytes",
    "journal.compact_growth": "ratio",
}

#: Meanings for fields whose dataclass line carries no (or no self-explanatory) comment.
MEANINGS: Final[dict[str, str]] = {
    "table.max_tombstones": "removals, and runs another origin's removal took (these go first)",
    "http.h2_max_concurrent_streams": "SETTINGS_MAX_CONCURRENT_STREAMS offered to clients",
    "http.h2_max_frame_size": "SETTINGS_MAX_FRAME_SIZE offered to clients",
    "http.h2_initial_window_size": "per-stream receive window (SETTINGS_INITIAL_WINDOW_SIZE)",
    "http.h2_rate_window": "the period of the h2_max_*_per_window flood budgets",
    "broadcast.max_batch_frames": "frames in one request to a peer",
    "broadcast.max_batch_bytes": "bytes in one request to a peer (under the peer's max_body)",
    "broadcast.max_in_flight": "concurrent requests on one HTTP/2 connection (HTTP/1.1: 1)",
}


def _bounds(key: str, kind: type) -> tuple[float, float, bool]:
    """(low, high, low is exclusive) for a numeric key."""
    if key in RANGES:
        lo, hi = RANGES[key]
        return lo, hi, False
    if kind is float:
        return 0.0, _SECONDS_MAX, True
    hi = _H2_MAX if key.startswith("http.") else _INT_MAX
    return 1, hi, False


# -- the keys -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Key:
    """One settable value: its dotted name, type, default, unit and meaning."""

    name: str
    kind: Any  # the annotation, resolved (int, float, str, Path, str | None, tuple[str, ...])
    default: Any
    unit: str
    meaning: str


def _is_dataclass_type(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _base(kind: Any) -> Any:
    """``X | None`` → X; anything else unchanged."""
    if isinstance(kind, UnionType) or typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not NoneType]
        if len(args) == 1:
            return args[0]
    return kind


def unit(name: str, kind: Any) -> str:
    """The unit of a key: seconds for floats, bytes for sizes, a count for other ints."""
    if name in UNITS:
        return UNITS[name]
    base = _base(kind)
    leaf = name.rsplit(".", 1)[-1]
    if base is float:
        return "s"
    if base is int:
        size = "bytes" in leaf or leaf.endswith(("_body", "_size", "_window", "_budget"))
        size = size and not leaf.endswith("_per_window")
        return "bytes" if size else "count"
    return ""


@functools.cache
def _comments(cls: type) -> dict[str, str]:
    """Trailing ``# comments`` of a dataclass's field lines, by field name (from its source)."""
    import inspect  # noqa: PLC0415 - only the documented table and --help need it

    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    names = {f.name for f in dataclasses.fields(cls)}
    first_on_line: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        row = tok.start[0]
        if tok.type == tokenize.NAME and row not in first_on_line:
            first_on_line[row] = tok.string
        elif tok.type == tokenize.COMMENT and first_on_line.get(row) in names:
            out[first_on_line[row]] = tok.string.lstrip("#").strip()
    return out


def _walk(cls: type, prefix: str, meanings: bool) -> Iterator[Key]:
    hints = _hints(cls)
    comments = _comments(cls) if meanings else {}
    default = cls()
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        name = prefix + f.name
        if _is_dataclass_type(kind):
            yield from _walk(kind, name + ".", meanings)
            continue
        meaning = MEANINGS.get(name) or comments.get(f.name, "")
        yield Key(name, kind, getattr(default, f.name), unit(name, kind), meaning)


def every_key() -> list[Key]:
    """Every settable key of :class:`Config`, in declaration order (tables after scalars)."""
    return list(_walk(Config, "", meanings=True))


def key_names() -> frozenset[str]:
    """The dotted names of every key (cheap: no source is read for meanings)."""
    return frozenset(ordered_key_names())


def ordered_key_names() -> tuple[str, ...]:
    """The dotted names of every key, in declaration order (no source read)."""
    return tuple(key.name for key in _walk(Config, "", meanings=False))


# -- reading --------------------------------------------------------------------------------------


def _describe(value: object) -> str:
    kinds = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    what = kinds.get(type(value), type(value).__name__)
    shown = repr(value)
    return f"{what} ({shown if len(shown) <= 40 else shown[:37] + '...'})"


def _expected(name: str, kind: Any) -> str:
    base = _base(kind)
    if base is float:
        return "a number of seconds" if unit(name, kind) == "s" else "a number"
    if base is int:
        return "an integer"
    if base is Path:
        return "a path (string)"
    if base is str:
        return "a string"
    if base is bool:
        return "true or false"
    if typing.get_origin(base) is tuple:
        return "an array of strings"
    return str(base)


def coerce(name: str, kind: Any, value: object) -> Any:
    """``value`` (from TOML or a flag) as the field's type, range-checked; ConfigError if not."""
    base = _base(kind)
    bad_type = ConfigError(name, f"expected {_expected(name, kind)}, got {_describe(value)}")
    if base is bool:
        if not isinstance(value, bool):
            raise bad_type
        return value
    if base is int or base is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad_type
        if base is int and not isinstance(value, int):
            raise bad_type
        number: float = float(value) if base is float else value
        if not math.isfinite(number):
            raise ConfigError(name, f"must be a finite number, got {value}")
        lo, hi, exclusive = _bounds(name, base)
        if number <= lo if exclusive else number < lo:
            low = f"greater than {lo:g}" if exclusive else f"at least {lo:g}"
            raise ConfigError(name, f"must be {low}, got {value}")
        if number > hi:
            raise ConfigError(name, f"must be at most {hi:.16g}, got {value}")
        return number
    if base is str or base is Path:
        if not isinstance(value, str):
            raise bad_type
        if not value:
            raise ConfigError(name, "must not be empty")
        if name in CHOICES and value not in CHOICES[name]:
            raise ConfigError(name, f"must be one of {', '.join(CHOICES[name])}, got {value!r}")
        return Path(value) if base is Path else value
    if typing.get_origin(base) is tuple:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise bad_type
        if not value:
            raise ConfigError(name, "must not be empty")
        allowed = CHOICES.get(name)
        for item in value:
            if allowed is not None and item not in allowed:
                raise ConfigError(name, f"each must be one of {', '.join(allowed)}, got {item!r}")
        if len(set(value)) != len(value):
            raise ConfigError(name, "lists a value twice")
        return tuple(value)
    raise ConfigError(name, f"cannot be set (type {kind})")  # pragma: no cover - new field type


def _build(cls: type, table: Mapping[str, object], prefix: str, base: Any) -> Any:
    """``base`` (an instance of ``cls``) with the values of ``table`` set, checked."""
    hints = _hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    changes: dict[str, Any] = {}
    for key, value in table.items():
        name = prefix + key
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {prefix + near[0]}?)" if near else ""
            where = f"in [{prefix.rstrip('.')}]" if prefix else "at the top level"
            raise ConfigError(name, f"unknown key {where}{hint}")
        kind = hints[key]
        if _is_dataclass_type(kind):
            if not isinstance(value, dict):
                raise ConfigError(name, f"expected a table [{name}], got {_describe(value)}")
            changes[key] = _build(kind, value, name + ".", getattr(base, key))
        elif isinstance(value, dict):
            raise ConfigError(name, f"expected {_expected(name, kind)}, got a table")
        else:
            changes[key] = coerce(name, kind, value)
    return dataclasses.replace(base, **changes)


def _check(config: Config) -> Config:
    """Rules between keys."""
    bc = config.broadcast
    if bc.retry_base > bc.retry_max_delay:
        raise ConfigError(
            "broadcast.retry_base",
            f"{bc.retry_base:g} s is above broadcast.retry_max_delay ({bc.retry_max_delay:g} s)",
        )
    br = config.broker
    if br.dial_backoff > br.dial_backoff_max:
        raise ConfigError(
            "broker.dial_backoff",
            f"{br.dial_backoff:g} s is above broker.dial_backoff_max ({br.dial_backoff_max:g} s)",
        )
    return config


def parse(table: Mapping[str, object], base: Config | None = None) -> Config:
    """A Config from a parsed TOML document (or any mapping of the same shape)."""
    return _check(_build(Config, table, "", base or Config()))


def loads(text: str, base: Config | None = None) -> Config:
    """A Config from TOML text; ConfigError (key "") for a syntax error."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"not valid TOML: {exc}") from None
    return parse(table, base)


def load(path: Path | str, base: Config | None = None) -> Config:
    """A Config from a TOML file; ConfigError when it cannot be read or is not valid."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError("", f"cannot read it: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"not UTF-8 (byte {exc.start})") from None
    return loads(text, base)


def replace(config: Config, values: Mapping[str, object]) -> Config:
    """``config`` with dotted keys set (flags over the file): ``{"broker.queue_frames": 7}``."""
    nested: dict[str, Any] = {}
    for dotted, value in values.items():
        where = nested
        *tables, leaf = dotted.split(".")
        for t in tables:
            where = where.setdefault(t, {})
        where[leaf] = str(value) if isinstance(value, Path) else value
    return parse(nested, config)


# -- writing --------------------------------------------------------------------------------------


def toml_value(value: object) -> str:
    """``value`` as TOML writes it (``true``, ``1.5``, ``"text"``, ``["h2"]``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        text = str(value)
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def dumps(values: Mapping[str, object] | Config) -> str:
    """TOML text for a Config (every key; unset optional ones commented out) or for a mapping
    of dotted keys to values (just those): what tests and benchmarks pass to ``--config``."""
    if isinstance(values, Config):
        flat: dict[str, object] = {}
        for key in every_key():
            obj: Any = values
            for part in key.name.split("."):
                obj = getattr(obj, part)
            flat[key.name] = obj
    else:
        flat = dict(values)
    top = [(k, v) for k, v in flat.items() if "." not in k]
    tables: dict[str, list[tuple[str, object]]] = {}
    for k, v in flat.items():
        if "." in k:
            table, leaf = k.rsplit(".", 1)
            tables.setdefault(table, []).append((leaf, v))
    lines = [f"# {k} =" if v is None else f"{k} = {toml_value(v)}" for k, v in top]
    for table, items in tables.items():
        lines += ["", f"[{table}]"]
        lines += [f"# {k} =" if v is None else f"{k} = {toml_value(v)}" for k, v in items]
    return "\n".join(lines) + "\n"


def _shown_default(value: object, unit_: str) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):  # as TOML writes it, so that it can be pasted into a file
        return toml_value(value)
    if isinstance(value, tuple):
        return "`" + toml_value(value) + "`"
    if unit_ == "bytes" and isinstance(value, int) and value >= 1024 and value % 1024 == 0:
        for size, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if value % size == 0:
                return f"{value} ({value // size} {suffix})"
    return f"{value:g}" if isinstance(value, float) else str(value)


def markdown_table() -> str:
    """docs/configuration.md's table of every key, its default, unit and meaning."""
    rows = ["| key | default | unit | meaning |", "| --- | --- | --- | --- |"]
    for key in every_key():
        meaning = key.meaning.replace("|", "\\|")
        default = _shown_default(key.default, key.unit)
        rows.append(f"| `{key.name}` | {default} | {key.unit} | {meaning} |")
    return "\n".join(rows) + "\n"
