"""HTTP/2 sessions, sans-IO, our own implementation (no h2 library on the path; h2 is the
reference the tests check them against).

Shared by both sessions: ``frames`` (the frame layer: reading, the rules per frame type,
padding, header blocks, outbound frames), ``settings`` (the peer's, checked; the server's own),
``hpack`` (the decoder and a stateless encoder), ``session`` (the frame handling both sides
share, the connection's states), ``windows`` (receive flow control: the connection's window;
the server's stream windows), ``streams`` (the field rules of requests and responses; the
server's per-request state and its transition table). The server's: ``budgets`` (flood
budgets per time window), ``connection`` (:class:`H2ServerSession`, which ties them). The
client's: ``client`` (:class:`~nvpair_wm.proto.h2.client.H2ClientSession`).
"""

from nvpair_wm.proto.h2.connection import DISCARD_PAST_LIMIT_BYTES, H2ServerSession
from nvpair_wm.proto.h2.frames import H2_PREFACE

__all__ = ["DISCARD_PAST_LIMIT_BYTES", "H2_PREFACE", "H2ServerSession"]
