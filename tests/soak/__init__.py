"""A seeded fault-injection soak with a history checker, in the spirit of Jepsen (issue 10, item 6).

It lives under ``tests/`` because it is a test: it drives real ``nvpair-wm`` processes with the
same harness pieces as the suite (:mod:`tests.test_netns` for namespaces, the cluster directory
of :mod:`nvpair_wm.clusterdir`), it ships in no wheel, and ruff and mypy already cover the
directory. Its command line is ``python -m tests.soak`` (``make soak ARGS=...``).

Modules, one concept each:

``history``   the record of a run: every frame on every broker channel, timestamped, plus the
              faults, process starts and exits, RSS samples and the quiesce marker (JSON lines)
``checker``   a pure function over a history: the properties and the figures
``schedule``  the fault schedule, drawn from the seed alone (so a seed replays it)
``workload``  the broker model per node: what it reports, what it has had acknowledged
``network``   partitions, heals and link impairment (network namespaces, or loopback pins)
``runner``    one run: start the nodes, generate, inject, quiesce, record
``cli``       the command line
"""
