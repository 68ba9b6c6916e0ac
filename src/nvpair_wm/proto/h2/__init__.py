"""The HTTP/2 server session on h2, sans-IO, split by concern like h2 itself.

``frames`` (the scanner in front of h2: frame bounds, header blocks), ``budgets`` (flood
budgets per time window), ``windows`` (receive flow control), ``streams`` (per-request state,
requests and responses as fields), ``connection`` (:class:`H2ServerSession`, which ties them).
"""

from nvpair_wm.proto.h2.connection import DISCARD_LIMIT, H2ServerSession
from nvpair_wm.proto.h2.frames import H2_PREFACE

__all__ = ["DISCARD_LIMIT", "H2_PREFACE", "H2ServerSession"]
