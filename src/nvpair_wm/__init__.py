"""nvpair-wm: relays and deduplicates inference-workload lifecycle events across a cluster."""

# The one place the version is written: pyproject.toml reads it (setuptools dynamic version),
# `nvpair-wm --version`, `ready` and `manager:status` report it.
__version__ = "0.2.0"
