"""The journal's knobs, set through configuration (``[journal]``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JournalLimits"]


@dataclass(frozen=True, slots=True)
class JournalLimits:
    """The journal's knobs (off: no journal even with a cluster dir).

    ``fsync_interval`` (seconds): the group commit's period; 0: fsync every write before the
    broker gets its reply. Compaction is checked on the same timer, or every
    ``compaction_check_interval`` seconds when ``fsync_interval`` is 0.
    ``compact_min_records``: the log is not compacted below this many appended records.
    ``compact_growth``: the appends since the last compaction that make the next one due, as a
    multiple of the records it kept (1: as many; 0: ``compact_min_records`` alone decides);
    the larger, the rarer the compactions and the larger the file (docs/crash-safety.md).
    ``compaction_timeout`` (seconds): a compaction child running longer is killed (one warning;
    the journal appends on and the next check retries)."""

    enabled: bool = True  # keep journal.log in the cluster dir (a restart forgets nothing)
    fsync_interval: float = 1.0  # group commit period; 0: fsync every write before the answer
    compaction_check_interval: float = 1.0  # when fsync_interval is 0
    compact_min_records: int = 4096  # appended records before a compaction is worth it
    compact_growth: float = 3.0  # compact once appends reach this many times what the last one kept
    compaction_timeout: float = 60.0  # a compaction child running longer is killed; next retries
    retry_backoff: float = 0.5  # after a failed write: first pause before rewriting the state
    retry_backoff_max: float = 30.0  # longest pause between two rewrite attempts
