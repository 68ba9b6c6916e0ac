"""The TLS contexts of the inter-node channel, built from this node's identity (pyOpenSSL).

Why pyOpenSSL and not :mod:`ssl`: the server must complete the handshake with ANY client
certificate and refuse an unpinned caller per request with a 403 (pins are re-read per request,
also on an open connection). :mod:`ssl` has no verify callback, so it can only accept
certificates that chain to a CA it was told about. pyOpenSSL gives the verify callback, ALPN
selection and per-connection certificates; memory BIOs let asyncio own the socket.

Policy (:class:`TLSPolicy`, the ``[tls]`` config table), the same on both sides: TLS 1.3, and
TLS 1.2 with ECDHE key exchange and AEAD ciphers only (AES-GCM, ChaCha20-Poly1305): Mozilla's
"intermediate" profile without its finite-field DHE suites. No CBC suite, no SHA-1 MAC, no RSA
key exchange. ``min_version = "1.3"`` is Mozilla's "modern" profile: every peer is an nvpair-wm
node or a Go client, and both speak TLS 1.3.

Server side (:class:`ServerTLS`): the policy's versions and suites, renegotiation off, no session
resumption (every handshake is a full one with a client certificate), client certificate REQUIRED
but any certificate accepted (authorization is the endpoint's job, by pin), ALPN ``h2`` then
``http/1.1``. The node certificate is resolved per handshake from an :class:`IdentitySource`
(``nvpair_wm.pins.Identity``: stat-cached, parsed and checked there, so this is cheap): no identity
means that handshake fails while the listener stays up; a new identity is used from the next
handshake on. Each identity gets its own ``SSL.Context`` with the certificate and key loaded once,
so a handshake costs no certificate or key conversion.

Client side (:func:`client_context`): presents the node identity and accepts the server only if
the SHA-256 of its leaf certificate is pinned.

Certificates and keys go to pyOpenSSL as cryptography objects (``NodeIdentity.certificate`` /
``private_key``): passing pyOpenSSL ``X509``/``PKey`` objects is deprecated since 24.3.

This module only builds contexts and connections; the bytes are moved by the sans-IO
:class:`nvpair_wm.proto.tls.TLSMachine`, driven by ``nvpair_wm.io.server`` (accepted
connections) and ``nvpair_wm.io.client`` (connections to peers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from OpenSSL import SSL, crypto

from nvpair_wm.pins import IdentitySource, NodeIdentity, fingerprint_der
from nvpair_wm.proto.tls import describe_ssl_error

__all__ = ["ALPN_PROTOCOLS", "TLS12_CIPHERS", "ServerTLS", "TLSPolicy", "client_context"]

log = logging.getLogger(__name__)

ALPN_PROTOCOLS: tuple[bytes, ...] = (b"h2", b"http/1.1")

#: TLS 1.2 suites (OpenSSL names), preferred first: ECDHE with an AEAD cipher. Node certificates
#: are ECDSA; the RSA ones serve a peer with an RSA certificate. TLS 1.3's suites are all AEAD
#: (OpenSSL's default three).
TLS12_CIPHERS: Final = (
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
)
TLS_VERSIONS: Final = ("1.2", "1.3")
_MIN_VERSION: Final = {"1.2": SSL.TLS1_2_VERSION, "1.3": SSL.TLS1_3_VERSION}


@dataclass(frozen=True, slots=True)
class TLSPolicy:
    """The inter-node TLS policy, for the server and the client alike."""

    min_version: str = "1.2"  # lowest TLS version, 1.2 or 1.3 (1.2: its AEAD suites only)


def _cert_fingerprint(cert: crypto.X509) -> str:
    return fingerprint_der(crypto.dump_certificate(crypto.FILETYPE_ASN1, cert))


def _accept_any_client_cert(
    conn: SSL.Connection, cert: crypto.X509, errno: int, depth: int, ok: int
) -> bool:
    # Authorization is per request, by pin (endpoint.py). The handshake only needs A cert.
    return True


def _select_alpn(conn: SSL.Connection, offered: list[bytes]) -> bytes | SSL._NoOverlappingProtocols:
    for proto in ALPN_PROTOCOLS:
        if proto in offered:
            return proto
    return SSL.NO_OVERLAPPING_PROTOCOLS  # go on without ALPN (the server then sniffs)


def _base_context(policy: TLSPolicy) -> SSL.Context:
    ctx = SSL.Context(SSL.TLS_METHOD)
    ctx.set_min_proto_version(_MIN_VERSION[policy.min_version])
    ctx.set_cipher_list(":".join(TLS12_CIPHERS).encode("ascii"))
    ctx.set_options(
        SSL.OP_NO_RENEGOTIATION
        | SSL.OP_NO_TICKET
        | SSL.OP_NO_COMPRESSION
        | SSL.OP_CIPHER_SERVER_PREFERENCE
    )
    ctx.set_session_cache_mode(SSL.SESS_CACHE_OFF)
    return ctx


def _use_identity(ctx: SSL.Context, identity: NodeIdentity) -> None:
    """Load ``identity`` into ``ctx``; raises ValueError if OpenSSL refuses it."""
    try:
        ctx.use_certificate(identity.certificate)
        ctx.use_privatekey(identity.private_key)
        ctx.check_privatekey()
    except (SSL.Error, TypeError) as exc:
        reason = describe_ssl_error(exc) if isinstance(exc, SSL.Error) else str(exc)
        raise ValueError(f"node identity {identity.fingerprint} unusable: {reason}") from exc


def _server_context(identity: NodeIdentity | None, policy: TLSPolicy) -> SSL.Context:
    """The server Context; without ``identity`` it has no certificate (handshakes fail)."""
    ctx = _base_context(policy)
    ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, _accept_any_client_cert)
    ctx.set_alpn_select_callback(_select_alpn)
    if identity is not None:
        _use_identity(ctx, identity)
    return ctx


class ServerTLS:
    """Server-side TLS: the Context of the current identity, rebuilt when the identity changes.

    ``context`` is the certificate-less Context used while there is no (usable) identity; the
    Context in use for a connection is ``conn.get_context()``.
    """

    def __init__(self, identity: IdentitySource, policy: TLSPolicy | None = None) -> None:
        self._identity = identity
        self.policy = policy or TLSPolicy()
        self.context = _server_context(None, self.policy)
        self._current: tuple[NodeIdentity, SSL.Context] | None = None
        self._unusable: NodeIdentity | None = None  # warned about once; retried when it changes

    def current_context(self) -> SSL.Context | None:
        """The Context of the identity of this moment, or None without a usable identity."""
        try:
            ident = self._identity.current()
        except Exception:  # a broken source must not take the listener down
            log.exception("resolving the node identity failed")
            return None
        if ident is None:
            return None
        current = self._current
        if current is not None and current[0] == ident:
            return current[1]
        if ident == self._unusable:
            return None
        try:
            ctx = _server_context(ident, self.policy)
        except ValueError as exc:
            self._unusable = ident
            log.warning("%s", exc)
            return None
        self._unusable = None
        self._current = (ident, ctx)  # the old Context lives on in its open connections
        return ctx

    def has_identity(self) -> bool:
        return self.current_context() is not None

    def new_connection(self) -> SSL.Connection:
        """A server-side SSL connection over memory BIOs, with the identity of this moment.

        Without an identity the connection carries no certificate and its handshake fails
        (the client gets a handshake_failure alert); the listener is not affected.
        """
        conn = SSL.Connection(self.current_context() or self.context, None)
        conn.set_accept_state()
        return conn


def client_context(
    identity: NodeIdentity,
    is_pinned: Callable[[str], bool],
    alpn: Iterable[bytes] = ALPN_PROTOCOLS,
    policy: TLSPolicy | None = None,
) -> SSL.Context:
    """Client-side Context: presents ``identity``, accepts a server only if its leaf is pinned.

    ``is_pinned`` is typically ``PinSet(trusted_dir).is_pinned``. Build a new context when the
    identity changes (cheap); the pin check runs at every handshake. Raises ValueError if
    OpenSSL refuses the identity (``nvpair_wm.pins.Identity`` has already checked it).
    """
    ctx = _base_context(policy or TLSPolicy())
    _use_identity(ctx, identity)

    def verify(conn: SSL.Connection, cert: crypto.X509, errno: int, depth: int, ok: int) -> bool:
        if depth > 0:
            return True  # chains are irrelevant: the leaf's pin decides
        return is_pinned(_cert_fingerprint(cert))

    ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, verify)
    protos = list(alpn)
    if protos:
        ctx.set_alpn_protos(protos)
    return ctx
