"""The outcome table: one row per outcome of the contract, naming counters that exist."""

from __future__ import annotations

import typing

import msgspec
from nvpair_wm_schema.jsonrpc_schema import EventOutcome
from nvpair_wm_schema.manager_status_schema import ChannelCounters, Counters

from nvpair_wm.outcomes import COUNTED, FORWARDED, RULES, Outcome


def _literals() -> set[str]:
    annotated = typing.get_args(EventOutcome)[0]  # Annotated[Literal[...], Meta]
    return set(typing.get_args(annotated))


def test_every_outcome_of_the_contract_has_one_row() -> None:
    assert {o.value for o in Outcome} == _literals()
    assert set(RULES) == set(Outcome)
    assert {rule.answered for rule in RULES.values()} == _literals()


def test_the_counters_named_exist() -> None:
    channel = set(ChannelCounters.__struct_fields__)
    totals = set(Counters.__struct_fields__)
    for rule in RULES.values():
        assert rule.counted in channel
        assert rule.total is None or rule.total in totals


def test_only_what_is_forwarded_is_journaled_and_only_applied_is_forwarded() -> None:
    for outcome, rule in RULES.items():
        assert rule.journaled == rule.forwarded, outcome
    assert {Outcome.APPLIED} == FORWARDED
    assert COUNTED[Outcome.REMOVED] == "suppressed"


def test_an_outcome_is_its_contract_string() -> None:
    """Compared, hashed and encoded as the string: no conversion on the hot path."""
    stale: str = Outcome.STALE
    assert stale == "stale" and "stale" in {Outcome.STALE} and hash(stale) == hash("stale")
    assert msgspec.json.encode(Outcome.REMOVED) == b'"removed"'
