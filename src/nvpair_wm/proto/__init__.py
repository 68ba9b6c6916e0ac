"""Sans-IO protocol machines: bytes and ``now`` in; bytes, events and the next deadline out.

Nothing here imports asyncio, opens a file or reads a clock: ``nvpair_wm.io`` drives these.
"""
