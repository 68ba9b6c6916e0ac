"""The inter-node server's import path of old: the listener lives in :mod:`nvpair_wm.io.server`."""

from nvpair_wm.io.server import DEFAULT_PORT, H2_PREFACE, InterNodeServer, bind_sockets

__all__ = ["DEFAULT_PORT", "H2_PREFACE", "InterNodeServer", "bind_sockets"]
