"""What happened to an event or a removal, and what each outcome entails: one table.

The workload table (:mod:`nvpair_wm.dedup`) says which :class:`Outcome` an event or a removal
came to; :data:`RULES` says, per outcome, what that means everywhere else:

============  ==============  =================  =========  =========  ============
outcome       counted as      in the totals as   forwarded  journaled  answered
============  ==============  =================  =========  =========  ============
applied       ``applied``     (none)             yes        yes        ``applied``
duplicate     ``duplicate``   ``duplicates``     no         no         ``duplicate``
stale         ``stale``       ``stale``          no         no         ``stale``
removed       ``suppressed``  ``suppressed``     no         no         ``removed``
============  ==============  =================  =========  =========  ============

*Counted as*: the field of the channel's ``ChannelCounters`` (``manager:status`` ``byChannel``
and the metrics) that one frame of this outcome adds one to. *In the totals as*: the field of
``Counters`` the table keeps for both channels. *Forwarded*: a broker's event goes to the
peers' queues (:meth:`nvpair_wm.dispatch.Dispatcher.local` puts it in ``outbound``, which
:mod:`nvpair_wm.local` publishes), a peer's goes to the broker
(:meth:`~nvpair_wm.dispatch.Dispatcher.peer` puts it in ``to_broker``, which
:mod:`nvpair_wm.endpoint` queues). *Journaled*: what is forwarded is written to the journal
first (the node's ``on_outbound`` and the endpoint's ``on_forwarded``). *Answered*: the
``result.outcome`` of the JSON-RPC answer to a request (a notification gets none).

An outcome is a :class:`enum.StrEnum`: its members are the contract's ``EventOutcome`` strings,
so they are answered and compared as such, and cost no more than the strings did.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from nvpair_wm_schema.jsonrpc_schema import EventOutcome

__all__ = ["COUNTED", "FORWARDED", "RULES", "Outcome", "Rule"]


class Outcome(enum.StrEnum):
    """What the table did with an event or a removal (the contract's ``EventOutcome``)."""

    APPLIED = "applied"  # new: recorded, and forwarded
    DUPLICATE = "duplicate"  # seen already (same run, id and seq; or a repeated removal)
    STALE = "stale"  # older than the newest seen for its run and id
    REMOVED = "removed"  # suppressed: its workload was removed (a tombstone covers it)


@dataclass(frozen=True, slots=True)
class Rule:
    """What one outcome entails (see the module's table)."""

    counted: str  # the ChannelCounters field it adds one to
    total: str | None  # the Counters field the table keeps for it
    forwarded: bool  # relayed: to the peers (a broker's) or to the broker (a peer's)
    journaled: bool  # written to the journal before it is relayed
    answered: EventOutcome  # result.outcome of the answer to a request


RULES: Final[dict[Outcome, Rule]] = {
    Outcome.APPLIED: Rule("applied", None, forwarded=True, journaled=True, answered="applied"),
    Outcome.DUPLICATE: Rule(
        "duplicate", "duplicates", forwarded=False, journaled=False, answered="duplicate"
    ),
    Outcome.STALE: Rule("stale", "stale", forwarded=False, journaled=False, answered="stale"),
    Outcome.REMOVED: Rule(
        "suppressed", "suppressed", forwarded=False, journaled=False, answered="removed"
    ),
}

#: The outcomes that are relayed (and journaled): ``outcome in FORWARDED`` on the hot path.
FORWARDED: Final = frozenset(o for o, rule in RULES.items() if rule.forwarded)
#: The ChannelCounters field each outcome adds one to.
COUNTED: Final = {o: rule.counted for o, rule in RULES.items()}
