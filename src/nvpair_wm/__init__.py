"""nvpair-wm: relays and deduplicates inference-workload lifecycle events across a cluster."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nvpair-wm")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"
