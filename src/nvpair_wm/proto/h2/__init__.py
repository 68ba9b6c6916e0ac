"""The HTTP/2 server session, sans-IO, our own implementation (no h2 library on the path).

``frames`` (frame layout, outbound frames), ``settings`` (ours and the peer's), ``hpack``
(decoder and stateless response encoder), ``budgets`` (flood budgets per time window),
``windows`` (receive flow control), ``streams`` (per-request state, inbound field rules,
requests and responses as fields), ``connection`` (:class:`H2ServerSession`, which ties them).
"""

from nvpair_wm.proto.h2.connection import DISCARD_LIMIT, H2ServerSession
from nvpair_wm.proto.h2.frames import H2_PREFACE

__all__ = ["DISCARD_LIMIT", "H2_PREFACE", "H2ServerSession"]
