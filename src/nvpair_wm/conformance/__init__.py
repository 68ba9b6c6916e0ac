"""The conformance kit: behaviour vectors run against any implementation, as a black box.

``nvpair-wm-conformance [--json] [--only GROUP] -- COMMAND [ARGS...]`` launches COMMAND with the
spec's flags (``--port``, ``--cluster-dir``, ``--ipc``, and ``--config`` for groups that set
limits), plays its broker over stdio or the ``--ipc`` socket and its peers in both directions:
a client of its server over mutual-TLS HTTP/2 and HTTP/1.1 (``peer``), and pinned servers its
broadcaster sends to (``peerserver``). It checks every vector in
``schema/conformance/behaviour/``. It uses only the standard library, ``h2``, ``h11`` and
``rich``, plus ``nvpair_wm.clusterdir`` to make certificates and the constants generated from
the schema (``nvpair_wm_schema.contract``): nothing of the implementation it tests.
"""
