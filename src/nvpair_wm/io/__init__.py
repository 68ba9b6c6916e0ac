"""Thin asyncio drivers of the sans-IO machines in ``nvpair_wm.proto`` (no protocol logic)."""
