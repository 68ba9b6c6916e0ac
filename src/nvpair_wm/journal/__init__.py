"""The journal: what this node originated, and what it told its broker, kept on disk
(``CLUSTER_DIR/journal.log``) so that a ``kill -9`` forgets nothing; reloaded into the table at
start, rewritten compacted. What it guarantees, and why it is built this way, is in
``docs/crash-safety.md``.

One idea per module:

* :mod:`~nvpair_wm.journal.records`: the record format (encoding, decoding, format 1), sans-IO;
* :mod:`~nvpair_wm.journal.fold`: what a compaction keeps, sans-IO;
* :mod:`~nvpair_wm.journal.health`: the journal's health, one state moved by a transition
  table: every failure, at start or later, takes one path (``off`` is only configuration's);
* :mod:`~nvpair_wm.journal.file`: the file (appends, group commit, recovery, compaction's
  orchestration), with :mod:`~nvpair_wm.journal.disk` (its file operations),
  :mod:`~nvpair_wm.journal.compaction` (one compaction's heavy part) and
  :mod:`~nvpair_wm.journal.compactor` (that part in a child process);
* :mod:`~nvpair_wm.journal.limits`: its knobs;
* :mod:`~nvpair_wm.journal.reload`: what each record kind is to the table, whose own reload
  (:meth:`nvpair_wm.dedup.WorkloadTable.reloader`) puts the records back at a start.
"""

from nvpair_wm.journal.compaction import Compaction
from nvpair_wm.journal.disk import close_quietly, fsync_and_close, fsync_directory
from nvpair_wm.journal.file import Journal, open_journal
from nvpair_wm.journal.fold import Fold
from nvpair_wm.journal.limits import JournalLimits
from nvpair_wm.journal.records import (
    CHECKPOINT,
    FORMAT,
    FORWARDED_BATCH,
    FORWARDED_LIVE,
    FORWARDED_REMOVAL,
    FORWARDED_TERMINAL,
    HEADER,
    JOURNAL_FILE,
    LIVE,
    MAX_RECORD,
    REMOVAL,
    TERMINAL_EVENT,
    Damage,
    JournalFormatError,
    Log,
    Record,
    collection_paused,
    decode_log,
    encode_forwarded,
    encode_log,
    encode_outbound,
    encode_outbounds,
    encode_record,
    format_of,
    forwarded_record,
    read_log,
    record_of,
)
from nvpair_wm.journal.reload import reload_table, reload_table_one_by_one

__all__ = [
    "CHECKPOINT",
    "FORMAT",
    "FORWARDED_BATCH",
    "FORWARDED_LIVE",
    "FORWARDED_REMOVAL",
    "FORWARDED_TERMINAL",
    "HEADER",
    "JOURNAL_FILE",
    "LIVE",
    "MAX_RECORD",
    "REMOVAL",
    "TERMINAL_EVENT",
    "Compaction",
    "Damage",
    "Fold",
    "Journal",
    "JournalFormatError",
    "JournalLimits",
    "Log",
    "Record",
    "close_quietly",
    "collection_paused",
    "decode_log",
    "encode_forwarded",
    "encode_log",
    "encode_outbound",
    "encode_outbounds",
    "encode_record",
    "format_of",
    "forwarded_record",
    "fsync_and_close",
    "fsync_directory",
    "open_journal",
    "read_log",
    "record_of",
    "reload_table",
    "reload_table_one_by_one",
]
