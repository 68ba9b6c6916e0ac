"""What a configuration reload (SIGHUP) may change in a running node: the plan, without IO.

The node reads its ``--config`` file again, validated exactly as at start (flags still override
it), and hands the running and the new :class:`~nvpair_wm.config.Config` to :func:`plan`. Each
key that differs is either *live* (applied now, without dropping a connection: the log, limits,
timeouts, retry and backoff settings, the metrics listener) or *restart-only* (refused for
that key: the node keeps the running value and says once that a restart is needed), by
:func:`is_live`. The rest of the file still applies.

Restart-only, and why: what the node listens on or dials (``port``, ``bind``, ``ipc``), what it
is (``cluster_dir``, ``tls.min_version``: the identity and the TLS contexts are built once),
the sizes both ends of a channel agreed on at start (``max_frame``, ``max_batch``, ``broker.*``:
the broker queue's bound and the dial, done), the table's shape (``table.*`` but
``expire_interval``: its TTL generations and caps are built from them), and whether there is
a journal at all (``journal.enabled``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from nvpair_wm import config
from nvpair_wm.config import Config

__all__ = ["LIVE", "RESTART_ONLY", "Change", "ReloadPlan", "flat", "is_live", "plan"]

#: Keys, or a whole table as its prefix with the dot (``"http."``), applied live; anything
#: else is restart-only.
LIVE: Final = (
    "log_level",
    "log_format",
    "shutdown_grace",
    "metrics",
    "table.expire_interval",
    "http.",
    "broadcast.",
    "pins.",
    "journal.",
)
#: Exceptions inside a live table.
RESTART_ONLY: Final = frozenset({"journal.enabled"})


def is_live(key: str) -> bool:
    """Whether a running node applies ``key`` on reload (else a restart is needed)."""
    if key in RESTART_ONLY:
        return False
    return any(key == live or (live.endswith(".") and key.startswith(live)) for live in LIVE)


@dataclass(frozen=True, slots=True)
class Change:
    key: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.key}: {_shown(self.old)} -> {_shown(self.new)}"


def _shown(value: Any) -> str:
    return "unset" if value is None else config.toml_value(value)


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """What differs between the running configuration and the file read again."""

    applied: tuple[Change, ...]  # live: set now
    refused: tuple[Change, ...]  # restart-only: the running value stays

    @property
    def changed(self) -> bool:
        return bool(self.applied)

    def effective(self, running: Config) -> Config:
        """``running`` with the live changes set: the node's configuration after the reload."""
        out = running
        for change in self.applied:  # each value checked already: the loaded file validated
            out = _set(out, change.key.split("."), change.new)
        return out

    def touches(self, *prefixes: str) -> bool:
        """Whether an applied key is one of ``prefixes`` (a key, or a table with its dot)."""
        return any(c.key == p or (p.endswith(".") and c.key.startswith(p))
                   for c in self.applied for p in prefixes)  # fmt: skip


def _set(obj: Any, path: list[str], value: Any) -> Any:
    """``obj`` (a frozen dataclass) with the field at ``path`` set to ``value``."""
    head, *rest = path
    inner = _set(getattr(obj, head), rest, value) if rest else value
    return dataclasses.replace(obj, **{head: inner})


def flat(cfg: Config) -> Iterator[tuple[str, Any]]:
    """Every key of ``cfg`` with its value, dotted, in declaration order."""
    for name in config.ordered_key_names():
        value: Any = cfg
        for part in name.split("."):
            value = getattr(value, part)
        yield name, value


def plan(running: Config, loaded: Config) -> ReloadPlan:
    """The changes from ``running`` to ``loaded``, split into applied and refused."""
    new = dict(flat(loaded))
    applied: list[Change] = []
    refused: list[Change] = []
    for key, old in flat(running):
        if new[key] != old:
            (applied if is_live(key) else refused).append(Change(key, old, new[key]))
    return ReloadPlan(tuple(applied), tuple(refused))
