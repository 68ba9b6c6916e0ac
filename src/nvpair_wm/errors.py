r"""The one error hierarchy of nvpair-wm (no IO, no dependencies).

Modelled on h11's: a protocol error is either *remote* (the peer broke the protocol: answer it
with the hinted status or a GOAWAY, log at debug, keep serving others) or *local* (we tried to
do something the protocol forbids: a bug of ours, logged as one, never blamed on the peer).
Everything else is a bug and propagates; ``asyncio.CancelledError`` is a ``BaseException`` and
is never caught here.

    WmError
    ├── ProtocolError                 error_status_hint: the HTTP status to answer with
    │   ├── LocalProtocolError        our side broke the protocol (a bug)
    │   └── RemoteProtocolError       the peer broke it
    │       └── H2ConnectionError     ...badly enough to end an HTTP/2 connection (GOAWAY code)
    ├── ConnectionClosed              the transport is gone (also a ConnectionError)
    ├── TLSError                      handshake refused, TLS protocol error (also a ConnectionError)
    ├── ClusterDirInUse               another process holds the cluster directory's lock
    ├── ListenFailed                  a listener cannot bind: names the flag to fix
    ├── ConfigInvalid                 flags or --config cannot work: exit 2, or a reload refused
    ├── StatusUnavailable             ``nvpair-wm status`` found no node status where it asked
    ├── ConfigError                   a configuration value that cannot work (also a ValueError)
    ├── ClusterError                  an operation on a cluster directory failed (nvpair-wm-cluster)
    ├── InvalidFrame                  a value the generated validator refused (also a ValueError)
    ├── DialFailed                    the broker's --ipc endpoint unreachable (also an OSError)
    ├── JournalFormatError            a journal of a newer format (defined in
    │                                 nvpair_wm.journal.records, whose formats its message names)
    ├── DemoError                     the demo cannot go on (a node did not start)
    ├── KitError                      the conformance kit found no answer where one was due
    │   ├── BrokerError               the implementation misbehaved on the broker channel
    │   └── PeerError                 no HTTP response from the implementation
    └── ClientError                   an outbound request got no response: safe to retry
        ├── ConnectFailed             TCP connect or TLS handshake failed, or timed out
        │   └── PinRefused            the server's certificate is not the record's, or not pinned
        ├── ConnectionLost            the connection ended before the response was complete
        ├── ResponseTimeout           no complete response (or PING answer) in time
        └── StreamRefused             HTTP/2: the server reset the stream or excluded it (GOAWAY)

An error that callers caught by a built-in base keeps it (``ConfigError`` and ``InvalidFrame``
are ``ValueError``\ s, ``DialFailed`` an ``OSError``), so moving it here changed no ``except``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BrokerError",
    "ClientError",
    "ClusterDirInUse",
    "ClusterError",
    "ConfigError",
    "ConfigInvalid",
    "ConnectFailed",
    "ConnectionClosed",
    "ConnectionLost",
    "DemoError",
    "DialFailed",
    "H2ConnectionError",
    "InvalidFrame",
    "KitError",
    "ListenFailed",
    "LocalProtocolError",
    "PeerError",
    "PinRefused",
    "ProtocolError",
    "RemoteProtocolError",
    "ResponseTimeout",
    "StatusUnavailable",
    "StreamRefused",
    "TLSError",
    "WmError",
]


class WmError(Exception):
    """Base of every error nvpair-wm raises on purpose."""


class ProtocolError(WmError):
    """A protocol rule was broken; ``error_status_hint`` is the HTTP status that says so."""

    def __init__(self, msg: str, error_status_hint: int = 400) -> None:
        super().__init__(msg)
        self.error_status_hint = error_status_hint


class LocalProtocolError(ProtocolError):
    """We were about to break the protocol: a bug of ours (answered 500 at most, logged)."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol: its error, answered with ``error_status_hint``."""


class H2ConnectionError(RemoteProtocolError):
    """The peer's frames end the HTTP/2 connection: GOAWAY with ``code`` (RFC 9113 §7)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason, 400)
        self.code = code
        self.reason = reason


class ConnectionClosed(WmError, ConnectionError):
    """The connection is gone (closed, reset, or aborted for a peer that stopped reading)."""


class TLSError(WmError, ConnectionError):
    """A TLS failure: handshake refused, protocol error, peer vanished mid-handshake."""


class ClusterDirInUse(WmError):
    """Another process runs on this cluster directory: ``path`` is the lock it holds, ``pid``
    the pid it wrote there (None when it has not yet)."""

    def __init__(self, path: Path, pid: int | None) -> None:
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(f"in use: {path} is locked by {holder}")
        self.path = path
        self.pid = pid


class ConfigInvalid(WmError):
    """A configuration that cannot work (a bad flag or ``--config`` file, a value this host
    cannot use): the message is one line naming the flag, or the file and the key, to fix. At
    start it is exit status 2; on a reload the running configuration stays."""


class StatusUnavailable(WmError):
    """``nvpair-wm status`` found no node status where it asked (nobody listens, something
    else answers, the answer breaks the contract): the message is the one line it prints."""


class ListenFailed(WmError):
    """A listener could not bind: ``where`` names the flag to fix (``--metrics ADDR:PORT``,
    ``--port N (...)``), ``reason`` what the OS said."""

    def __init__(self, where: str, exc: OSError) -> None:
        self.where = where
        self.reason = exc.strerror or str(exc)
        super().__init__(f"{where}: {self.reason}")


class ClientError(WmError, ConnectionError):
    """An outbound request did not get a response; retrying it (here or anew) is safe."""


class ConnectFailed(ClientError):
    """TCP connect or TLS handshake failed, or timed out."""


class PinRefused(ConnectFailed):
    """The server's certificate is not the record's fingerprint, or is not pinned."""


class ConnectionLost(ClientError):
    """The connection ended before the response was complete."""


class ResponseTimeout(ClientError):
    """No complete response (or PING answer) in time; the connection is closed (it may be dead)."""


class StreamRefused(ClientError):
    """HTTP/2: the server reset the stream or excluded it with GOAWAY (never processed)."""


class ConfigError(WmError, ValueError):
    """A configuration value that cannot work: ``key`` (dotted) and what is wrong with it."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}" if key else reason)
        self.key = key
        self.reason = reason


class ClusterError(WmError):
    """An operation on a cluster directory failed; the message is one line."""


class InvalidFrame(WmError, ValueError):
    """A value refused by the generated validator, with where and why."""

    def __init__(self, reason: str, path: str | None = None) -> None:
        super().__init__(f"{reason} at {path}" if path else reason)
        self.reason = reason
        self.path = path


class DialFailed(WmError, OSError):
    """The broker's endpoint could not be reached within the dial budget."""


class DemoError(WmError):
    """The demo cannot go on (a node did not start); the message is for the user."""


class KitError(WmError):
    """The conformance kit could not get what it needed from the implementation under test."""


class BrokerError(KitError):
    """The implementation did not behave as a process on the broker channel must."""


class PeerError(KitError):
    """No HTTP response: the connection or the handshake failed, or the server went silent."""
