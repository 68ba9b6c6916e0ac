"""TLS over pyOpenSSL memory BIOs as a sans-IO machine: ciphertext in, plaintext out.

The caller feeds what the socket delivered (:meth:`TLSMachine.receive`), gets the plaintext it
carried, and sends :meth:`TLSMachine.data_to_send` (handshake messages, records, alerts,
close_notify). The handshake runs inside ``receive``; once it is done :attr:`peer_fingerprint`
and :attr:`alpn` say who the peer is and what it speaks. No socket, no clock, no asyncio.
"""

from __future__ import annotations

import contextlib

from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL

from nvpair_wm.errors import TLSError
from nvpair_wm.pins import fingerprint_der

__all__ = ["TLSMachine", "describe_ssl_error"]

_CHUNK = 64 * 1024


def describe_ssl_error(exc: SSL.Error) -> str:
    """OpenSSL's reason strings of ``exc``, joined (its repr is a nested list)."""
    if exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        return "; ".join(str(e[-1]) for e in exc.args[0] if isinstance(e, tuple))
    return str(exc) or type(exc).__name__


class TLSMachine:
    """One TLS connection (either side) over memory BIOs; ``conn`` is in accept or connect state."""

    __slots__ = ("_ssl", "alpn", "handshake_done", "peer_closed", "peer_fingerprint", "sent_close")

    def __init__(self, conn: SSL.Connection) -> None:
        self._ssl = conn
        self.handshake_done = False
        self.peer_closed = False  # close_notify or an unclean EOF seen
        self.sent_close = False
        self.peer_fingerprint: str | None = None  # sha256 hex of the peer's leaf (DER)
        self.alpn: str | None = None

    def start(self) -> None:
        """Client side: produce the ClientHello (read it with :meth:`data_to_send`)."""
        self._handshake()

    def receive(self, data: bytes | memoryview) -> bytes:
        """Feed ciphertext; returns the plaintext it completed (b"" during the handshake).

        Raises :class:`TLSError` when the handshake or a record fails (the alert to send is
        then in :meth:`data_to_send`).
        """
        if data:
            self._ssl.bio_write(data)
        if not self.handshake_done and not self._handshake():
            return b""
        return self._read_plaintext()

    def receive_eof(self) -> None:
        """The transport delivered EOF."""
        self.peer_closed = True

    def send(self, data: bytes) -> None:
        """Encrypt ``data`` (read the records with :meth:`data_to_send`)."""
        if not data or self.sent_close:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[self._ssl.send(view) :]
        except SSL.Error as exc:
            raise TLSError(f"TLS write failed: {describe_ssl_error(exc)}") from exc

    def close(self) -> None:
        """Queue close_notify (only after a completed handshake). Idempotent."""
        if self.sent_close:
            return
        self.sent_close = True
        if self.handshake_done:
            with contextlib.suppress(SSL.Error):  # the peer is gone: nothing left to say
                self._ssl.shutdown()

    def data_to_send(self) -> bytes:
        """Ciphertext OpenSSL produced since the last call."""
        chunks = []
        bio_read = self._ssl.bio_read
        while True:
            try:
                chunk = bio_read(_CHUNK)
            except SSL.WantReadError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    # -- internals --------------------------------------------------------------------------

    def _handshake(self) -> bool:
        try:
            self._ssl.do_handshake()
        except SSL.WantReadError:
            return False
        except SSL.Error as exc:
            raise TLSError(f"TLS handshake failed: {describe_ssl_error(exc)}") from exc
        self.handshake_done = True
        cert = self._ssl.get_peer_certificate(as_cryptography=True)
        if cert is not None:
            self.peer_fingerprint = fingerprint_der(cert.public_bytes(serialization.Encoding.DER))
        proto = self._ssl.get_alpn_proto_negotiated()
        self.alpn = proto.decode("ascii", "replace") if proto else None
        return True

    def _read_plaintext(self) -> bytes:
        chunks = []
        recv = self._ssl.recv
        while not self.peer_closed:
            try:
                chunk = recv(_CHUNK)
            except SSL.WantReadError:
                break
            except (SSL.ZeroReturnError, SSL.SysCallError):
                self.peer_closed = True  # close_notify, or EOF without one: the same to us
                break
            except SSL.Error as exc:
                raise TLSError(f"TLS error: {describe_ssl_error(exc)}") from exc
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
