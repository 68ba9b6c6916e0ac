"""TLS over pyOpenSSL memory BIOs as a sans-IO machine: ciphertext in, plaintext out.

The caller feeds what the socket delivered (:meth:`TLSMachine.receive`), gets the plaintext it
carried, and sends :meth:`TLSMachine.data_to_send` (handshake messages, records, alerts,
close_notify). The handshake runs inside ``receive``; once it is done :attr:`peer_fingerprint`
and :attr:`alpn` say who the peer is and what it speaks. No socket, no clock, no asyncio.

Once the handshake is done, records go through OpenSSL's ``SSL_read`` / ``SSL_write`` /
``BIO_read`` directly (the cffi binding pyOpenSSL itself uses): pyOpenSSL's wrappers check
three callback helpers and raise ``WantReadError`` on every call that finds nothing more, which
cost a quarter of the TLS time per request. Errors still go through pyOpenSSL's own mapping
(:func:`nvpair_wm.internals.raise_ssl_error`), so they raise exactly what they did before.
Those internals are reached only through :mod:`nvpair_wm.internals`; without them (a pyOpenSSL
that renamed them) the public methods are used, and ``manager:status`` says so.
"""

from __future__ import annotations

import contextlib
from typing import Any

from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL

from nvpair_wm.errors import TLSError
from nvpair_wm.internals import OPENSSL, raise_ssl_error, ssl_parts
from nvpair_wm.pins import fingerprint_der

__all__ = ["TLSMachine", "describe_ssl_error", "pointer_to"]

_CHUNK = 64 * 1024
#: The most plaintext one TLS record carries: one ``SSL_read`` returns at most one record.
_RECORD = 16 * 1024
#: Plaintext read per copy: the records of one read are decrypted into one such buffer.
_READ_BUFFER = 2 * _RECORD

# The cffi binding pyOpenSSL calls OpenSSL through (nvpair_wm.internals), bound to module
# globals: the record path looks each up once per call, as it did its own import.
_lib: Any = None
if OPENSSL is not None:
    _lib, _ffi, _alloc, _NULL = OPENSSL.lib, OPENSSL.ffi, OPENSSL.alloc, OPENSSL.null
    _WANT_READ: int = OPENSSL.want_read


def pointer_to(buffer: bytearray) -> Any:
    """A cffi pointer to a long-lived buffer for :meth:`TLSMachine.receive_from` (None
    without the direct path: then it takes the public one). It keeps ``buffer`` alive; give
    it the bytearray itself, never a memoryview (see ``InterNodeServer``)."""
    return _ffi.from_buffer(buffer) if _lib is not None else None


def describe_ssl_error(exc: SSL.Error) -> str:
    """OpenSSL's reason strings of ``exc``, joined (its repr is a nested list)."""
    if exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        return "; ".join(str(e[-1]) for e in exc.args[0] if isinstance(e, tuple))
    return str(exc) or type(exc).__name__


class TLSMachine:
    """One TLS connection (either side) over memory BIOs; ``conn`` is in accept or connect state."""

    __slots__ = (
        "_bio_in",
        "_bio_out",
        "_raw",
        "_ssl",
        "alpn",
        "handshake_done",
        "peer_closed",
        "peer_fingerprint",
        "sent_close",
    )

    def __init__(self, conn: SSL.Connection) -> None:
        self._ssl = conn
        # OpenSSL's SSL* and memory BIOs, for the direct record path (None: public methods).
        parts = ssl_parts(conn)
        self._raw: Any = None if parts is None else parts[0]
        self._bio_in: Any = None if parts is None else parts[1]
        self._bio_out: Any = None if parts is None else parts[2]
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
            bio = self._bio_in if self._raw is not None else None
            if bio is None or _lib.BIO_write(bio, _ffi.from_buffer(data), len(data)) != len(data):
                self._ssl.bio_write(data)  # the public path (raises what went wrong)
        return self._after_input()

    def receive_from(self, buffer: Any, pointer: Any, nbytes: int) -> bytes:
        """:meth:`receive` of ``buffer[:nbytes]``, where ``pointer`` is :func:`pointer_to`
        ``buffer`` (the server's one receive buffer: no view or cffi object per read)."""
        if pointer is None or self._raw is None:
            return self.receive(buffer[:nbytes])
        if nbytes and _lib.BIO_write(self._bio_in, pointer, nbytes) != nbytes:
            self._ssl.bio_write(bytes(buffer[:nbytes]))  # the public path (raises what failed)
        if not self.handshake_done:
            return self._after_input()
        return self._read_plaintext()

    def _after_input(self) -> bytes:
        """The handshake's next step, or the plaintext of the records now complete."""
        if not self.handshake_done and not self._handshake():
            return b""
        return self._read_plaintext()

    def receive_eof(self) -> None:
        """The transport delivered EOF."""
        self.peer_closed = True

    def send(self, data: bytes | memoryview) -> None:
        """Encrypt ``data`` (read the records with :meth:`data_to_send`)."""
        if not data or self.sent_close:
            return
        raw = self._raw
        if raw is not None and self.handshake_done:
            n = _lib.SSL_write(raw, _ffi.from_buffer(data), len(data))
            if n == len(data):  # a memory BIO takes everything: the usual case
                return
            if n <= 0:
                self._write_error(n)
            else:
                data = memoryview(data)[n:]
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
        if self._raw is not None:
            bio = self._bio_out
            size = _lib.BIO_get_mem_data(bio, _NULL)  # what the memory BIO holds
            if size <= 0:
                return b""
            buf = _alloc("char[]", size)
            n = _lib.BIO_read(bio, buf, size)
            out: bytes = _ffi.buffer(buf, n)[:] if n > 0 else b""
            return out if n == size else out + self._drain_bio()
        return self._drain_bio()

    def _drain_bio(self) -> bytes:
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
        raw = self._raw
        if raw is None:
            return self._recv_plaintext()
        # The records of one read go into one buffer, one after the other (a request's
        # HEADERS and DATA are often two records): one allocation and one copy per read.
        chunks: list[bytes] = []
        read = _lib.SSL_read
        bio = self._bio_in
        buf = _alloc("char[]", _READ_BUFFER)
        filled = 0
        while not self.peer_closed:
            n = read(raw, buf + filled, _READ_BUFFER - filled)
            if n > 0:
                filled += n
                # No input and nothing decrypted left: another SSL_read could only say so.
                # (Input first: a request's HEADERS record is usually followed by its DATA.)
                if _lib.BIO_get_mem_data(bio, _NULL) <= 0 and not _lib.SSL_pending(raw):
                    break
                if filled > _READ_BUFFER - _RECORD:  # keep a whole record's room
                    chunks.append(_ffi.buffer(buf, filled)[:])
                    filled = 0
                continue
            if _lib.SSL_get_error(raw, n) != _WANT_READ:
                self._read_error(n)  # raises, or marks the peer closed
            break  # else the rest of the input is an unfinished record, or nothing
        out: bytes = _ffi.buffer(buf, filled)[:] if filled else b""
        if chunks:
            chunks.append(out)
            return b"".join(chunks)
        return out

    def _read_error(self, result: int) -> None:
        """An ``SSL_read`` failed: pyOpenSSL's mapping says how (close_notify, EOF, error)."""
        try:
            raise_ssl_error(self._ssl, self._raw, result)
        except (SSL.ZeroReturnError, SSL.SysCallError):
            self.peer_closed = True  # close_notify, or EOF without one: the same to us
        except SSL.WantReadError:
            pass
        except SSL.Error as exc:
            raise TLSError(f"TLS error: {describe_ssl_error(exc)}") from exc
        else:
            raise TLSError(f"TLS error: SSL_read returned {result}")

    def _write_error(self, result: int) -> None:
        """An ``SSL_write`` failed: raise what pyOpenSSL's mapping makes of it, as TLSError."""
        try:
            raise_ssl_error(self._ssl, self._raw, result)
        except SSL.Error as exc:
            raise TLSError(f"TLS write failed: {describe_ssl_error(exc)}") from exc

    def _recv_plaintext(self) -> bytes:
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
